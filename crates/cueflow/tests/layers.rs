//! The library's layers, checked from its own source (DESIGN.md: api → core → backend; the
//! backends know only the contract, as wgpu-hal knows nothing of wgpu-core).
//!
//! The import graph is drawn file by file from the paths the code names — `crate::a::b::C`,
//! `super::x::Y`, `use crate::{…}` groups, and the crate root's `pub use m::…` — outside
//! `#[cfg(test)]` items and comments. A path resolves to the file of its longest module
//! prefix (`crate::backend::contract::op::Op` → `backend/contract/op.rs`, `crate::Error` →
//! `lib.rs`). `mod` declarations are not imports.
//!
//! Rules:
//! 1. No file under `src/backend/` names `crate::core`.
//! 2. No file under `src/api/` names `crate::backend`.
//! 3. No file under `src/core/` or `src/backend/` names `crate::api` or `crate::kernels`.
//! 4. No import circle of more than two files (no strongly connected component of the graph
//!    with more than two files).
//! 5. No file of `src` over 700 lines.
//!
//! Core's stream path keeps rule 4 by taking the lower object where it needs only part of the
//! upper one: streams, events and captures take the device core (`core/device.rs`), which
//! knows no stream — the legacy stream belongs to the device as the API opens it
//! (`core/open_device.rs`); captures take a stream's identity and capture slot
//! (`capture::LaneStream`) and an event's capture snapshot, not the stream or the event;
//! tracking takes a stream's identity (`core/stream_ident.rs`) and completions the device
//! through a trait (`CompletionDevice`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src`, as (module path, file path relative to `src`).
fn modules() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("src is readable") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&src_dir(), &mut files);
    let mut out: Vec<(String, String)> = files
        .iter()
        .map(|p| {
            let rel = p
                .strip_prefix(src_dir())
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let stem = rel.trim_end_matches(".rs");
            let module = match stem {
                "lib" => String::new(),
                s => s.trim_end_matches("/mod").replace('/', "::"),
            };
            (module, rel)
        })
        .collect();
    out.sort();
    out
}

/// The source without comments, string literals and `#[cfg(test)]` items.
fn code_of(src: &str) -> String {
    // Comments and strings first (so braces inside them do not count).
    let b = src.as_bytes();
    let mut s = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            s.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3; // a char literal such as '{'
        } else {
            s.push(b[i] as char);
            i += 1;
        }
    }
    // Then every item under `#[cfg(test)]`: up to its `;` or its balanced `{ … }`.
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let end = match (item.find('{'), item.find(';')) {
            (Some(brace), Some(semi)) if semi < brace => semi + 1,
            (Some(brace), _) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (k, c) in item[brace..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = brace + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(semi)) => semi + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    // Visibility paths (`pub(in crate::a::b)`) say who may see an item, not what it uses.
    while let Some(at) = out.find("pub(in ") {
        let end = out[at..].find(')').map_or(out.len(), |k| at + k + 1);
        out.replace_range(at..end, "pub");
    }
    out
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Expand the path starting at `text` (after its prefix) into full paths, following `{…}`
/// groups: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(prefix: &str, text: &str, out: &mut Vec<String>) {
    let head: String = text.chars().take_while(|&c| is_path_char(c)).collect();
    let full = format!("{prefix}{head}");
    let after = text[head.len()..].trim_start();
    if (head.is_empty() || head.ends_with("::")) && after.starts_with('{') {
        // Split the group's top-level items.
        let inner = &after[1..];
        let (mut depth, mut start) = (0usize, 0usize);
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand_item(&full, &inner[start..k], out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_item(&full, &inner[start..k], out);
                    start = k + 1;
                }
                _ => {}
            }
        }
    } else {
        out.push(full.trim_end_matches("::").to_string());
    }
}

fn expand_item(prefix: &str, item: &str, out: &mut Vec<String>) {
    let item = item.trim();
    let item = item.split(" as ").next().unwrap_or(item).trim();
    if item.is_empty() || item == "self" {
        out.push(prefix.trim_end_matches("::").to_string());
    } else {
        expand(prefix, item, out);
    }
}

/// The module paths (from the crate root) that `code` of module `module` names.
fn named_paths(module: &str, code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let parent = match module.rfind("::") {
        Some(k) => module[..k].to_string(),
        None => String::new(),
    };
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for prefix in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(k) = code[from..].find(prefix) {
            let at = from + k;
            from = at + prefix.len();
            // A whole word: not the tail of another identifier or path.
            if at > 0 && (is_path_char(bytes[at - 1] as char)) {
                continue;
            }
            let mut found = Vec::new();
            expand("", &code[at + prefix.len()..], &mut found);
            for p in found {
                let p = if prefix == "crate::" {
                    p
                } else {
                    // `super::super::x` climbs once more per `super`.
                    let mut base = parent.clone();
                    let mut rest = p.as_str();
                    while let Some(r) = rest.strip_prefix("super::") {
                        base = match base.rfind("::") {
                            Some(k) => base[..k].to_string(),
                            None => String::new(),
                        };
                        rest = r;
                    }
                    if base.is_empty() {
                        rest.to_string()
                    } else {
                        format!("{base}::{rest}")
                    }
                };
                out.push(p);
            }
        }
    }
    // A module names its own children without `crate::` (`pub use chunked::ChunkedPipeline`,
    // the crate root's `pub use api::device::Device`), or with `self::`.
    for line in code.split(';') {
        let t = line.trim();
        let t = t.rsplit(['}', '{']).next().unwrap_or(t).trim();
        let Some(u) = t
            .strip_prefix("pub use ")
            .or_else(|| t.strip_prefix("use "))
        else {
            continue;
        };
        let u = u.trim().strip_prefix("self::").unwrap_or(u.trim());
        let first: String = u
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let child = if module.is_empty() {
            first.clone()
        } else {
            format!("{module}::{first}")
        };
        if children.contains(&child) {
            let mut found = Vec::new();
            expand("", u, &mut found);
            for p in found {
                out.push(if module.is_empty() {
                    p
                } else {
                    format!("{module}::{p}")
                });
            }
        }
    }
    out
}

/// The file (module path) of the longest module prefix of `path`; the root for `crate::X`.
fn resolve(path: &str, mods: &BTreeSet<String>) -> String {
    let parts: Vec<&str> = path.split("::").collect();
    for n in (1..=parts.len()).rev() {
        let m = parts[..n].join("::");
        if mods.contains(&m) {
            return m;
        }
    }
    String::new()
}

struct Graph {
    files: BTreeMap<String, String>,
    edges: BTreeMap<String, BTreeSet<String>>,
    named: BTreeMap<String, Vec<String>>,
}

fn graph() -> Graph {
    let list = modules();
    // Files that exist only for tests (`#[cfg(test)] mod tests;`) are left out.
    let mut test_only = BTreeSet::new();
    for (m, rel) in &list {
        let src = std::fs::read_to_string(src_dir().join(rel)).expect("readable source");
        let mut rest = src.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            if let Some(decl) = rest.trim_start().strip_prefix("mod ") {
                let name: String = decl
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if decl[name.len()..].trim_start().starts_with(';') {
                    test_only.insert(if m.is_empty() {
                        name
                    } else {
                        format!("{m}::{name}")
                    });
                }
            }
        }
    }
    let list: Vec<(String, String)> = list
        .into_iter()
        .filter(|(m, _)| !test_only.contains(m))
        .collect();
    let mods: BTreeSet<String> = list.iter().map(|(m, _)| m.clone()).collect();
    let mut g = Graph {
        files: BTreeMap::new(),
        edges: BTreeMap::new(),
        named: BTreeMap::new(),
    };
    for (m, rel) in list {
        let src = std::fs::read_to_string(src_dir().join(&rel)).expect("readable source");
        let code = code_of(&src);
        let named = named_paths(&m, &code, &mods);
        let targets: BTreeSet<String> = named
            .iter()
            .map(|p| resolve(p, &mods))
            .filter(|t| *t != m)
            .collect();
        g.edges.insert(m.clone(), targets);
        g.named.insert(m.clone(), named);
        g.files.insert(m, rel);
    }
    g
}

/// Strongly connected components (Tarjan), each as file names.
fn components(g: &Graph) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    impl<'g> T<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in &self.g.edges[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().expect("on the stack");
                    self.on.remove(w);
                    comp.push(self.g.files[w].clone());
                    if w == v {
                        break;
                    }
                }
                comp.sort();
                self.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// Files under `dir` (a module path) that name a path under one of `forbidden`.
fn offenders(g: &Graph, dir: &str, forbidden: &[&str]) -> Vec<String> {
    g.named
        .iter()
        .filter(|(m, _)| *m == dir || m.starts_with(&format!("{dir}::")))
        .flat_map(|(m, named)| {
            named
                .iter()
                .filter(|p| {
                    forbidden
                        .iter()
                        .any(|f| *p == f || p.starts_with(&format!("{f}::")))
                })
                .map(move |p| format!("{} names crate::{p}", g.files[m]))
        })
        .collect()
}

#[test]
fn backends_import_nothing_of_core() {
    let bad = offenders(&graph(), "backend", &["core"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn the_api_reaches_no_backend() {
    let bad = offenders(&graph(), "api", &["backend"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn core_and_backends_import_neither_api_nor_kernels() {
    let g = graph();
    let mut bad = offenders(&g, "core", &["api", "kernels"]);
    bad.extend(offenders(&g, "backend", &["api", "kernels"]));
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn no_import_circle_of_more_than_two_files() {
    let g = graph();
    assert!(g.files.len() > 50, "the source tree was found");
    let edges: usize = g.edges.values().map(|e| e.len()).sum();
    assert!(edges > 100, "imports were found ({edges})");
    let big: Vec<Vec<String>> = components(&g).into_iter().filter(|c| c.len() > 2).collect();
    // Each circle with its edges, to see which import to turn around.
    let files = &g.files;
    let edges = &g.edges;
    let edges_in = |c: &Vec<String>| -> Vec<String> {
        let ms: Vec<&String> = files
            .iter()
            .filter(|(_, f)| c.contains(f))
            .map(|(m, _)| m)
            .collect();
        let mut out = Vec::new();
        for m in &ms {
            for t in &edges[*m] {
                if ms.contains(&t) {
                    out.push(format!("{} -> {}", files[*m], files[t]));
                }
            }
        }
        out
    };
    let shown: Vec<Vec<String>> = big.iter().map(edges_in).collect();
    assert!(
        big.is_empty(),
        "import circles of more than two files: {shown:#?}"
    );
}

#[test]
fn the_checker_sees_a_circle() {
    // The same analysis on a made-up tree with a three-file circle finds it.
    let mut g = Graph {
        files: BTreeMap::new(),
        edges: BTreeMap::new(),
        named: BTreeMap::new(),
    };
    for (m, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")] {
        g.files.insert(m.into(), format!("{m}.rs"));
        g.edges.insert(m.into(), [to.to_string()].into());
    }
    let comps = components(&g);
    assert!(comps.iter().any(|c| c.len() == 3), "{comps:?}");
    // And the path reader follows groups, `super` and `as`.
    let mods: BTreeSet<String> = ["x", "x::y", "z"].iter().map(|s| s.to_string()).collect();
    let named = named_paths(
        "x::y",
        "use crate::{z::Q, x::{self, y::R as S}}; fn f() { super::y::T; }",
        &BTreeSet::new(),
    );
    let files: BTreeSet<String> = named.iter().map(|p| resolve(p, &mods)).collect();
    assert_eq!(
        files,
        ["x", "x::y", "z"].iter().map(|s| s.to_string()).collect()
    );
    assert!(code_of("#[cfg(test)]\nmod tests { use crate::api; }\nfn g() {}").contains("fn g"));
    assert!(!code_of("#[cfg(test)]\nmod tests { use crate::api; }").contains("crate::api"));
}

#[test]
fn no_source_file_is_over_700_lines() {
    let long: Vec<String> = modules()
        .into_iter()
        .filter_map(|(_, rel)| {
            let n = std::fs::read_to_string(src_dir().join(&rel))
                .expect("readable source")
                .lines()
                .count();
            (n > 700).then(|| format!("{rel}: {n} lines"))
        })
        .collect();
    assert!(long.is_empty(), "split these along their seams: {long:#?}");
}

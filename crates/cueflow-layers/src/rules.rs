//! Rules over a crate's source, and what breaks them.
//!
//! A rule is one line of a table ([`crate::cueflow::RULES`]): a name, a [`Check`], and the
//! files allowed to break it today (`known`), a list that may only shrink: a file that joins
//! it fails the check, and an entry whose file keeps the rule now must be struck off.

use std::collections::BTreeSet;
use std::path::Path;

use crate::fns::{functions, Function};
use crate::graph::Analysis;
use crate::tests_dir;
use crate::tree::{FileId, Tree};

/// One rule of the table.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// What the rule says, shown with each finding.
    pub name: &'static str,
    /// What is checked.
    pub check: Check,
    /// What breaks the rule today, as [`Finding::key`] names it: a file (paths relative to
    /// the crate, `src/backend/cuda/pool.rs`); for [`Check::NoPath`], a file and the file it
    /// reaches (`src/api/kernel.rs -> src/backend/contract/kernel.rs`); for
    /// [`Check::NoCircleOver`], a circle's files joined by `, `.
    pub known: &'static [&'static str],
}

/// What a rule checks. Areas are module paths below the crate root (`backend` is
/// `crate::backend` and every module in it), so a rule holds whether a module is a file or a
/// folder.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// No code of a module in `from` names a path that leads into `to`: neither walks through
    /// a module of `to` (`crate::core::X`) nor names something defined there, re-exports
    /// followed (`crate::Device` is defined in `api::device`).
    NoPath {
        /// Where the code is.
        from: &'static [&'static str],
        /// What it may not reach.
        to: &'static [&'static str],
    },
    /// No import circle (strongly connected files of the import graph) of more than this many
    /// files.
    NoCircleOver(usize),
    /// No `.rs` file under these folders (relative to the crate) is over `lines` lines.
    NoFileOver {
        /// The most lines a file may have.
        lines: usize,
        /// The folders, `src` or `tests`.
        under: &'static [&'static str],
    },
    /// A call whose path (a `use` renaming spelled out) contains `call` — `sys::cu` is
    /// `…::sys::cuMemAlloc_v2` — only in code of modules in `only`.
    CallsOnlyIn {
        /// The path text that marks the call.
        call: &'static str,
        /// The modules it may be in.
        only: &'static [&'static str],
    },
    /// No item of a module in `under` is declared `pub` (a type, trait, alias, constant,
    /// function or static the crate could export): public items are defined elsewhere and
    /// imported there. Each finding is keyed `file: Name`.
    NoPublicItemsIn {
        /// The modules that define no public item.
        under: &'static [&'static str],
    },
    /// A string literal that is an environment variable's name beginning with `prefix`
    /// (`CUEFLOW_DEVICE`: the prefix, then only capitals, digits and `_`) only in code of
    /// modules in `only`: whatever reads the variable, it is named there.
    NamesOnlyIn {
        /// The names' prefix.
        prefix: &'static str,
        /// The modules that may name them.
        only: &'static [&'static str],
    },
    /// No function (free, method, trait method with a body) of a module in `under` is over
    /// `lines` lines, from its `fn` to the closing brace of its body. Each finding is keyed
    /// `file: Type::name` (`file: name` outside an `impl` or trait).
    NoFnOver {
        /// The most lines a function may have.
        lines: usize,
        /// The modules whose functions are measured.
        under: &'static [&'static str],
    },
    /// No function of a module in `under` takes more than `params` parameters, `self` not
    /// counted. Keyed as [`Check::NoFnOver`].
    NoFnWithParamsOver {
        /// The most parameters a function may take.
        params: usize,
        /// The modules whose functions are counted.
        under: &'static [&'static str],
    },
    /// Every `.rs` file under `tests/` is compiled into a test target: it is one
    /// (`tests/x.rs`, `tests/x/main.rs`) or a `mod` of one reaches it.
    EveryTestFileRuns,
}

impl Rule {
    /// Files under `from` name no path into `to`.
    pub const fn no_path(
        name: &'static str,
        from: &'static [&'static str],
        to: &'static [&'static str],
    ) -> Rule {
        Rule::new(name, Check::NoPath { from, to })
    }

    /// No import circle of more than `files` files.
    pub const fn no_circle_over(name: &'static str, files: usize) -> Rule {
        Rule::new(name, Check::NoCircleOver(files))
    }

    /// No file under `under` over `lines` lines.
    pub const fn no_file_over(
        name: &'static str,
        lines: usize,
        under: &'static [&'static str],
    ) -> Rule {
        Rule::new(name, Check::NoFileOver { lines, under })
    }

    /// Calls whose path contains `call` only in modules of `only`.
    pub const fn calls_only_in(
        name: &'static str,
        call: &'static str,
        only: &'static [&'static str],
    ) -> Rule {
        Rule::new(name, Check::CallsOnlyIn { call, only })
    }

    /// Variable names that begin with `prefix` only in modules of `only`.
    pub const fn names_only_in(
        name: &'static str,
        prefix: &'static str,
        only: &'static [&'static str],
    ) -> Rule {
        Rule::new(name, Check::NamesOnlyIn { prefix, only })
    }

    /// No `pub` item defined in modules of `under`.
    pub const fn no_public_items_in(name: &'static str, under: &'static [&'static str]) -> Rule {
        Rule::new(name, Check::NoPublicItemsIn { under })
    }

    /// No function of modules in `under` over `lines` lines.
    pub const fn no_fn_over(
        name: &'static str,
        lines: usize,
        under: &'static [&'static str],
    ) -> Rule {
        Rule::new(name, Check::NoFnOver { lines, under })
    }

    /// No function of modules in `under` with more than `params` parameters.
    pub const fn no_fn_with_params_over(
        name: &'static str,
        params: usize,
        under: &'static [&'static str],
    ) -> Rule {
        Rule::new(name, Check::NoFnWithParamsOver { params, under })
    }

    /// Every file under `tests/` belongs to a test target.
    pub const fn every_test_file_runs(name: &'static str) -> Rule {
        Rule::new(name, Check::EveryTestFileRuns)
    }

    /// The same rule, with the files that break it today.
    pub const fn known(self, known: &'static [&'static str]) -> Rule {
        Rule {
            name: self.name,
            check: self.check,
            known,
        }
    }

    const fn new(name: &'static str, check: Check) -> Rule {
        Rule {
            name,
            check,
            known: &[],
        }
    }
}

/// One place that breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The rule's name.
    pub rule: &'static str,
    /// What breaks it, as a [`Rule::known`] entry names it.
    pub key: String,
    /// What is wrong, with the line and the path.
    pub message: String,
}

/// The result of checking a crate.
#[derive(Debug, Default)]
pub struct Report {
    /// What breaks a rule and is not on its known list.
    pub broken: Vec<Finding>,
    /// Known-list entries that no longer break their rule, as `rule: entry`.
    pub stale: Vec<String>,
    /// The number of library files read.
    pub files: usize,
    /// The number of import edges between them.
    pub edges: usize,
}

impl Report {
    /// The messages of `broken` for rule `name`.
    pub fn broken_by(&self, name: &str) -> Vec<&str> {
        self.broken
            .iter()
            .filter(|f| f.rule == name)
            .map(|f| f.message.as_str())
            .collect()
    }
}

/// Check the crate in `dir` (its `src/lib.rs`, and `tests/`) against `rules`.
pub fn check(dir: &Path, rules: &[Rule]) -> Result<Report, String> {
    let src = Analysis::of(Tree::load(dir, "src/lib.rs", false)?);
    let mut report = Report {
        files: src.tree.files.len(),
        edges: src.edge_count(),
        ..Report::default()
    };
    for rule in rules {
        let found = match rule.check {
            Check::NoPath { from, to } => no_path(&src, from, to),
            Check::NoCircleOver(n) => circles_over(&src, n),
            Check::NoFileOver { lines, under } => files_over(dir, lines, under)?,
            Check::CallsOnlyIn { call, only } => calls_outside(&src, call, only),
            Check::NamesOnlyIn { prefix, only } => names_outside(&src, prefix, only),
            Check::NoPublicItemsIn { under } => public_items(&src, under),
            Check::NoFnOver { lines, under } => functions_over(
                &src,
                under,
                |f| f.lines > lines,
                |f| format!("{} lines", f.lines),
            ),
            Check::NoFnWithParamsOver { params, under } => functions_over(
                &src,
                under,
                |f| f.params > params,
                |f| format!("{} parameters", f.params),
            ),
            Check::EveryTestFileRuns => tests_dir::unreached(dir)?
                .into_iter()
                .map(|f| {
                    let message = format!(
                        "{f} is in no test target (no `mod` of tests/*.rs or tests/*/main.rs \
                         reaches it), so it is never compiled"
                    );
                    (f, message)
                })
                .collect(),
        };
        let keys: BTreeSet<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        report.stale.extend(
            rule.known
                .iter()
                .filter(|k| !keys.contains(*k))
                .map(|k| format!("{}: {k}", rule.name)),
        );
        report.broken.extend(
            found
                .into_iter()
                .filter(|(k, _)| !rule.known.contains(&k.as_str()))
                .map(|(key, message)| Finding {
                    rule: rule.name,
                    key,
                    message,
                }),
        );
    }
    Ok(report)
}

/// Whether module path `module` (`crate::a::b`) is `area` (`a`) or inside it.
fn in_area(module: &str, area: &str) -> bool {
    let below = module.strip_prefix("crate::").unwrap_or("");
    below == area
        || below
            .strip_prefix(area)
            .is_some_and(|rest| rest.starts_with("::"))
}

fn in_any(module: &str, areas: &[&str]) -> bool {
    areas.iter().any(|a| in_area(module, a))
}

/// The module path of each file (of its outermost module, for a file with inline modules),
/// by file.
fn file_modules(a: &Analysis) -> Vec<String> {
    let mut out = vec![String::new(); a.tree.files.len()];
    // A file's own module comes before the inline modules inside it.
    for (m, module) in a.tree.modules.iter().enumerate().rev() {
        out[module.file] = a.tree.module_path(m);
    }
    out
}

fn no_path(a: &Analysis, from: &[&str], to: &[&str]) -> Vec<(String, String)> {
    let modules = file_modules(a);
    let mut out = Vec::new();
    for u in &a.uses {
        if !in_any(&modules[u.file], from) {
            continue;
        }
        let Some(&hit) = u
            .reaches
            .iter()
            .find(|&&m| in_any(&a.tree.module_path(m), to))
        else {
            continue;
        };
        let file = &a.tree.files[u.file].rel;
        let hit_file = &a.tree.files[a.tree.modules[hit].file].rel;
        let defined = &a.tree.files[u.defined_in].rel;
        let how = if hit_file == defined {
            format!("defined in {defined}")
        } else {
            format!("through {hit_file}")
        };
        // Keyed by the file that defines what is named where that is inside `to` (the known
        // lists name it), else by the file of the first module of `to` the path walks.
        let defined_inside = u
            .reaches
            .last()
            .is_some_and(|&m| in_any(&a.tree.module_path(m), to));
        let key_file = if defined_inside { defined } else { hit_file };
        out.push((
            format!("{file} -> {key_file}"),
            format!(
                "{file}:{} names `{}`, {how} ({})",
                u.line,
                u.written,
                a.tree.module_path(hit)
            ),
        ));
    }
    out
}

fn circles_over(a: &Analysis, n: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for circle in a.circles().into_iter().filter(|c| c.len() > n) {
        let rel = |f: FileId| a.tree.files[f].rel.as_str();
        let files: Vec<&str> = circle.iter().map(|&f| rel(f)).collect();
        // Each edge inside the circle with the line that draws it, to see which to turn round.
        let mut edges = Vec::new();
        for &f in &circle {
            for (&to, &first) in &a.edges[&f] {
                if circle.contains(&to) {
                    let u = &a.uses[first];
                    edges.push(format!(
                        "    {}:{} -> {} (`{}`)",
                        rel(f),
                        u.line,
                        rel(to),
                        u.written
                    ));
                }
            }
        }
        out.push((
            files.join(", "),
            format!(
                "an import circle of {} files:\n{}",
                circle.len(),
                edges.join("\n")
            ),
        ));
    }
    out
}

fn files_over(dir: &Path, lines: usize, under: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for folder in under {
        for rel in tests_dir::rs_files(dir, folder)? {
            let text =
                std::fs::read_to_string(dir.join(&rel)).map_err(|e| format!("{rel}: {e}"))?;
            let n = text.lines().count();
            if n > lines {
                let message = format!("{rel}: {n} lines; split it along its seams");
                out.push((rel, message));
            }
        }
    }
    Ok(out)
}

fn calls_outside(a: &Analysis, call: &str, only: &[&str]) -> Vec<(String, String)> {
    let modules = file_modules(a);
    let mut out = Vec::new();
    for o in &a.outside {
        let path = o.path.join("::");
        let marked = format!("::{path}").contains(&format!("::{call}"));
        if !marked || in_any(&modules[o.file], only) {
            continue;
        }
        let file = a.tree.files[o.file].rel.clone();
        let message = format!(
            "{file}:{} calls `{path}` outside {}",
            o.line,
            crate_paths(only)
        );
        out.push((file, message));
    }
    out
}

fn public_items(a: &Analysis, under: &[&str]) -> Vec<(String, String)> {
    let modules = file_modules(a);
    let mut out = Vec::new();
    for (f, file) in a.tree.files.iter().enumerate() {
        if !in_any(&modules[f], under) {
            continue;
        }
        for item in &file.ast.items {
            let (vis, ident) = match item {
                syn::Item::Struct(i) => (&i.vis, &i.ident),
                syn::Item::Enum(i) => (&i.vis, &i.ident),
                syn::Item::Union(i) => (&i.vis, &i.ident),
                syn::Item::Type(i) => (&i.vis, &i.ident),
                syn::Item::Trait(i) => (&i.vis, &i.ident),
                syn::Item::Const(i) => (&i.vis, &i.ident),
                syn::Item::Static(i) => (&i.vis, &i.ident),
                syn::Item::Fn(i) => (&i.vis, &i.sig.ident),
                _ => continue,
            };
            if !matches!(vis, syn::Visibility::Public(_)) {
                continue;
            }
            let line = ident.span().start().line;
            let message = format!(
                "{}:{line} defines the public `{ident}` inside {}; define it where public \
                 types live and import it",
                file.rel,
                crate_paths(under)
            );
            out.push((format!("{}: {ident}", file.rel), message));
        }
    }
    out
}

/// The functions of modules in `under` that `over` picks, each with what `says` of it.
fn functions_over(
    a: &Analysis,
    under: &[&str],
    over: impl Fn(&Function) -> bool,
    says: impl Fn(&Function) -> String,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in functions(&a.tree) {
        if !over(&f) || !in_any(&a.tree.module_path(f.module), under) {
            continue;
        }
        let file = &a.tree.files[f.file].rel;
        let message = format!(
            "{file}:{} `{}` has {}; split it into steps that read on their own",
            f.line,
            f.name,
            says(&f)
        );
        out.push((format!("{file}: {}", f.name), message));
    }
    out
}

/// `crate::a, crate::b` for areas `a`, `b`.
fn crate_paths(areas: &[&str]) -> String {
    areas
        .iter()
        .map(|m| format!("crate::{m}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn names_outside(a: &Analysis, prefix: &str, only: &[&str]) -> Vec<(String, String)> {
    let modules = file_modules(a);
    let is_name = |v: &str| {
        v.strip_prefix(prefix).is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
    };
    let mut out = Vec::new();
    for l in a.literals.iter().filter(|l| is_name(&l.value)) {
        if in_any(&modules[l.file], only) {
            continue;
        }
        let file = a.tree.files[l.file].rel.clone();
        let message = format!(
            "{file}:{} names `{}` outside {}",
            l.line,
            l.value,
            crate_paths(only)
        );
        out.push((file, message));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_are_modules_and_their_insides() {
        assert!(in_area("crate::backend", "backend"));
        assert!(in_area("crate::backend::host::x", "backend"));
        assert!(in_area(
            "crate::backend::cuda::driver",
            "backend::cuda::driver"
        ));
        assert!(!in_area("crate::backend_extra", "backend"));
        assert!(!in_area("crate", "backend"));
        assert!(!in_area("crate::core", "backend"));
    }
}

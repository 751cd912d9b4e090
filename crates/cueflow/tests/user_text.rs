//! What users read speaks of cueflow and CUDA, not of the project's history: no page, doc
//! comment, message or printed line says "seed" (the project started from documents it called
//! seeds; "the seeds' pipeline" is the chunked copy → compute → copy pipeline over several
//! streams, and so on).
//!
//! Users read the Markdown of the repository, and in the Rust of `crates/*/src` and
//! `crates/*/examples` the doc comments (rustdoc, `--help`) and string literals (errors,
//! output). Plain `//` comments and identifiers are for the project's own readers and are not
//! checked (a random generator's state may well be called `seed` there). The command-line help
//! is checked as printed by `crates/cueflow-cli/tests/help.rs`.

use std::path::{Path, PathBuf};

/// Words users must not meet, lower case.
const JARGON: &[&str] = &["seed"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            files(&path, ext, out);
        } else if name.ends_with(ext) {
            out.push(path);
        }
    }
}

/// The doc comments and string literals of Rust source `src`, with their line numbers.
fn user_text(src: &str) -> Vec<(usize, String)> {
    let b = src.as_bytes();
    let line_of = |i: usize| 1 + b[..i].iter().filter(|&&c| c == b'\n').count();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |n| i + n);
            if rest.starts_with("///") || rest.starts_with("//!") {
                out.push((line_of(i), src[i + 3..end].to_string()));
            }
            i = end;
        } else if rest.starts_with("/*") {
            i = rest.find("*/").map_or(b.len(), |n| i + n + 2);
        } else if b[i] == b'"' {
            // An ordinary string: up to the first quote that no backslash escapes.
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push((line_of(i), src[i + 1..j.min(b.len())].to_string()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '"', '\n', '\u{..}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                i = rest[3..].find('\'').map_or(b.len(), |n| i + n + 4);
            } else if rest.chars().nth(2) == Some('\'') {
                i += 2 + rest[1..].chars().next().map_or(1, char::len_utf8);
            } else {
                i += 1;
            }
        } else if ident(b[i]) {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let word = &src[start..i];
            if matches!(word, "r" | "br") && matches!(b.get(i), Some(b'"' | b'#')) {
                // A raw string: r"…", r#"…"#.
                let hashes = src[i..].bytes().take_while(|&c| c == b'#').count();
                let open = i + hashes + 1;
                let close = format!("\"{}", "#".repeat(hashes));
                let end = src[open..].find(&close).map_or(b.len(), |n| open + n);
                out.push((line_of(open), src[open..end].to_string()));
                i = end + close.len();
            }
        } else {
            i += src[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

#[test]
fn the_scanner_finds_doc_comments_and_strings_only() {
    let src = r####"
/// doc one
//! doc two
// plain comment: seed
/* block: seed */
fn seed(seed: u64) -> char { let q = '"'; let e = '\''; let l: &'static str = "s\"x";
    let r = r#"raw "quoted""#; let c = b'a'; q }
"####;
    let found: Vec<String> = user_text(src).into_iter().map(|(_, t)| t).collect();
    assert_eq!(found, [" doc one", " doc two", "s\\\"x", "raw \"quoted\""]);
}

#[test]
fn no_user_facing_text_speaks_of_seeds() {
    let root = root();
    let mut markdown = Vec::new();
    files(&root, ".md", &mut markdown);
    let mut rust = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        for dir in ["src", "examples"] {
            files(&krate.path().join(dir), ".rs", &mut rust);
        }
    }
    assert!(markdown.len() > 10 && rust.len() > 100, "{markdown:?}");
    let mut found = Vec::new();
    let mut check = |file: &Path, line: usize, text: &str| {
        let lower = text.to_lowercase();
        for word in JARGON {
            if lower.contains(word) {
                let rel = file.strip_prefix(&root).unwrap_or(file).display();
                found.push(format!("{rel}:{line}: {}", text.trim()));
            }
        }
    };
    for file in &markdown {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            check(file, n + 1, line);
        }
    }
    for file in &rust {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, t) in user_text(&text) {
            check(file, line, &t);
        }
    }
    assert!(
        found.is_empty(),
        "user-facing text speaks of seeds; say what is meant (the chunked copy → compute → copy \
         pipeline, …):\n{}",
        found.join("\n")
    );
}

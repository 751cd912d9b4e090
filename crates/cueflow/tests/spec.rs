//! The specification ships with the crate, and every rule id the project cites is one of its
//! rules.
//!
//! - `docs/spec.md` is the specification; the crate reaches it as `crates/cueflow/docs/spec.md`,
//!   a link to it, so that `cargo package` puts it into the package (a package holds only files
//!   under its own directory) and the rustdoc module `cueflow::spec` can include it. One file to
//!   edit, nothing to keep in step by hand.
//! - A rule id is a word of two capital letters and a number (`MM3`, `GR10`); every such word in
//!   the sources, examples, tests, kernels, scripts and Markdown of the repository must name a
//!   rule of the specification, or be one of the few words of that shape that are no rule
//!   ([`NOT_RULES`]: `FP16` is a number format).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Words shaped like a rule id that are something else.
const NOT_RULES: &[&str] = &[
    "FP8", "FP16", "FP32", "FP64", "BF16", "TF32", // number formats
    "NV18", // an NVLink topology (18 links), as `nvidia-smi topo -m` prints it
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The rule ids of the specification: the `- **ID Title.**` bullets.
fn rules(spec: &str) -> Vec<String> {
    spec.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- **"))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Is `word` shaped like a rule id: two capital letters, then one or two digits?
fn looks_like_a_rule(word: &str) -> bool {
    let b = word.as_bytes();
    (3..=4).contains(&b.len())
        && b[..2].iter().all(u8::is_ascii_uppercase)
        && b[2..].iter().all(u8::is_ascii_digit)
}

/// The words of `text` shaped like a rule id, with their line numbers. Words run over letters,
/// digits and `_`, so `CP4_BYTES` or `cuda_R_16F` hold none.
fn citations(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if looks_like_a_rule(word) {
                out.push((n + 1, word));
            }
        }
    }
    out
}

/// Files of the repository that may cite rules: Rust, CUDA C/C++, shell, TOML and Markdown,
/// outside build output and hidden directories.
fn cited_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
            cited_files(&path, out);
        } else if ["rs", "md", "cu", "cuh", "h", "cpp", "sh", "toml", "py"]
            .iter()
            .any(|ext| name.ends_with(&format!(".{ext}")))
        {
            out.push(path);
        }
    }
}

#[test]
fn every_cited_rule_id_is_a_rule_of_the_specification() {
    let root = workspace();
    let spec = std::fs::read_to_string(root.join("docs/spec.md")).expect("docs/spec.md");
    let rules = rules(&spec);
    assert!(rules.len() > 70, "rules of docs/spec.md: {rules:?}");
    let mut files = vec![root.join("README.md")];
    for dir in ["crates", "docs", "benches", "scripts"] {
        cited_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "{} files", files.len());
    let mut unknown = Vec::new();
    let mut cited = 0;
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (line, word) in citations(&text) {
            cited += 1;
            if !rules.iter().any(|r| r == word) && !NOT_RULES.contains(&word) {
                let rel = file.strip_prefix(&root).unwrap_or(file);
                unknown.push(format!("{}:{line}: {word}", rel.display()));
            }
        }
    }
    assert!(
        cited > 1000,
        "only {cited} citations found: is the scan broken?"
    );
    assert!(
        unknown.is_empty(),
        "rule ids cited but not defined in docs/spec.md (a word that is no rule goes into \
         NOT_RULES of tests/spec.rs):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn rule_ids_are_told_from_other_words() {
    let found: Vec<&str> = citations("MM3, (KN2/ER2) ST4–ST6 GR10: FP16 CP4_X x_CP4 CP444 Cp4 C4")
        .into_iter()
        .map(|(_, w)| w)
        .collect();
    assert_eq!(found, ["MM3", "KN2", "ER2", "ST4", "ST6", "GR10", "FP16"]);
}

#[test]
fn the_crate_ships_the_specification() {
    let root = workspace();
    let spec = std::fs::read_to_string(root.join("docs/spec.md")).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/spec.md");
    let shipped_text = std::fs::read_to_string(&shipped).expect("crates/cueflow/docs/spec.md");
    assert_eq!(
        shipped_text, spec,
        "crates/cueflow/docs/spec.md must be a link to docs/spec.md (ln -sf ../../../docs/spec.md)"
    );

    let out = Command::new(env!("CARGO"))
        .args([
            "package",
            "-p",
            "cueflow",
            "--list",
            "--allow-dirty",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("running cargo package --list");
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo package --list failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        list.lines().any(|l| l == "docs/spec.md"),
        "the package lacks docs/spec.md:\n{list}"
    );
}

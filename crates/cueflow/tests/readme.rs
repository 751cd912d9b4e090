//! The README's "Your own work in the pipeline" snippet is the doc test of `cueflow::pipeline`:
//! this fails when the two drift apart, so the README's code is always code that compiles and
//! runs (hidden `# ` lines of the doc test aside).

use std::path::Path;

/// The first fenced block after the line `heading` in `lines`, without hidden (`# `) lines.
fn block_after(lines: &[String], heading: &str) -> Vec<String> {
    let start = lines
        .iter()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("no line `{heading}`"));
    let mut rest = lines[start..].iter().skip_while(|l| !l.starts_with("```"));
    rest.next().expect("an opening fence");
    rest.take_while(|l| !l.starts_with("```"))
        .filter(|l| !l.starts_with("# "))
        .cloned()
        .collect()
}

#[test]
fn readme_snippet_is_the_doc_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let docs = std::fs::read_to_string(root.join("src/pipeline/mod.rs")).unwrap();
    let readme: Vec<String> = readme.lines().map(str::to_string).collect();
    let docs: Vec<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l).to_string())
        .collect();
    let a = block_after(&readme, "## Your own work in the pipeline");
    let b = block_after(&docs, "# Your own work in the pipeline");
    assert!(a.len() > 20, "{a:#?}");
    assert_eq!(a, b, "README.md and the docs of src/pipeline/mod.rs differ");
}

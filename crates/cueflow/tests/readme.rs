//! The README and the `docs/` pages stay true to the code:
//!
//! - the README stays a newcomer's page (at most 250 lines) with the two commands as they run,
//!   and the test command is the one CI runs;
//! - every Rust example in them compiles and runs: the README and the pages with examples are
//!   doc tests (`markdown_examples` in `src/lib.rs`), and `docs/pipeline.md`'s example is the
//!   doc test of `cueflow::pipeline` itself (hidden `# ` lines aside);
//! - every link between them reaches a file, and a heading where it names one.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The README and every page of `docs/`, as paths relative to the repository.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    pages.sort();
    pages
}

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
fn the_readme_is_short_and_runs_the_two_commands() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; long sections go to docs/"
    );
    for command in [
        "cargo run --release -p cueflow-cli -- demo",
        "cargo test --workspace --release",
    ] {
        assert!(
            readme.contains(&format!("```sh\n{command}\n```")),
            "the README's command `{command}` is missing or changed"
        );
    }
    let ci = read(".ci/run");
    assert!(
        ci.lines()
            .any(|l| l.trim() == "cargo test --workspace --release"),
        ".ci/run no longer runs the README's test command"
    );
}

#[test]
fn the_pipeline_page_is_the_doc_test_of_the_pipeline_module() {
    let page: Vec<String> = read("docs/pipeline.md")
        .lines()
        .map(str::to_string)
        .collect();
    let docs: Vec<String> = read("crates/cueflow/src/pipeline/mod.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l).to_string())
        .collect();
    let a = block_after(&page, "# Your own work in the pipeline");
    let b = block_after(&docs, "# Your own work in the pipeline");
    assert!(a.len() > 20, "{a:#?}");
    assert_eq!(
        a, b,
        "docs/pipeline.md and the docs of src/pipeline/mod.rs differ"
    );
}

#[test]
fn every_rust_example_of_the_readme_and_docs_is_a_doc_test() {
    let lib = read("crates/cueflow/src/lib.rs");
    for page in pages() {
        let text = read(&page);
        let fences: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with("```"))
            .collect();
        assert!(
            fences.len() % 2 == 0,
            "{page}: a fenced block is not closed"
        );
        let openings = fences.iter().step_by(2);
        if !openings.clone().any(|f| f.trim_start() == "```rust") {
            continue;
        }
        if page == "docs/pipeline.md" {
            continue; // the pipeline module's doc test, checked above
        }
        assert!(
            lib.contains(&format!("include_str!(\"../../../{page}\")")),
            "{page} has Rust examples but is not a doc test: list it in markdown_examples of \
             src/lib.rs"
        );
        for f in openings {
            assert!(
                f.trim_start().len() > 3,
                "{page}: a block without a language would be compiled as Rust: `{f}`"
            );
        }
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn links_between_the_pages_reach_their_file_and_heading() {
    assert_eq!(
        anchor("The default: on in debug builds, off in release builds"),
        "the-default-on-in-debug-builds-off-in-release-builds"
    );
    assert_eq!(
        anchor("Other libraries, and `.await`"),
        "other-libraries-and-await"
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        let dir = Path::new(&page).parent().unwrap().to_path_buf();
        for (start, _) in text.match_indices("](") {
            let target = &text[start + 2..];
            let Some(end) = target.find(')') else {
                continue;
            };
            let target = &target[..end];
            if target.starts_with("http") || target.starts_with('#') || target.contains(' ') {
                continue;
            }
            let (file, heading) = target.split_once('#').unwrap_or((target, ""));
            let path = root().join(&dir).join(file);
            checked += 1;
            let Ok(linked) = std::fs::read_to_string(&path) else {
                if !path.exists() {
                    broken.push(format!("{page}: {target}: no such file"));
                }
                continue;
            };
            if !heading.is_empty()
                && !linked
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .any(|h| anchor(h.trim_start_matches('#')) == heading)
            {
                broken.push(format!("{page}: {target}: no such heading"));
            }
        }
    }
    assert!(checked > 20, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

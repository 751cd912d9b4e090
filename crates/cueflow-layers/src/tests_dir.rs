//! The files of a crate's folders, and which files under `tests/` the test targets compile.

use std::collections::BTreeSet;
use std::path::Path;

use crate::tree::{relative, Tree};

/// Every `.rs` file under `dir/folder`, as paths relative to `dir`, sorted; none when the folder
/// does not exist.
pub fn rs_files(dir: &Path, folder: &str) -> Result<Vec<String>, String> {
    fn walk(at: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
        let entries = std::fs::read_dir(at).map_err(|e| format!("{}: {e}", at.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", at.display()))?.path();
            if path.is_dir() {
                walk(&path, out)?;
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
        Ok(())
    }
    let root = dir.join(folder);
    let mut found = Vec::new();
    if root.is_dir() {
        walk(&root, &mut found)?;
    }
    let mut out: Vec<String> = found.iter().map(|p| relative(dir, p)).collect();
    out.sort();
    Ok(out)
}

/// The `.rs` files under `dir/tests` that no test target compiles: Cargo makes a target of
/// each `tests/x.rs` and `tests/x/main.rs`, and a target compiles the files its `mod`
/// declarations reach (`#[path]` included).
pub fn unreached(dir: &Path) -> Result<Vec<String>, String> {
    let files = rs_files(dir, "tests")?;
    let targets = files.iter().filter(|f| {
        let parts: Vec<&str> = f.split('/').collect();
        matches!(parts.as_slice(), ["tests", _] | ["tests", _, "main.rs"])
    });
    let mut reached = BTreeSet::new();
    for target in targets {
        let tree = Tree::load(dir, target, true)?;
        reached.extend(tree.files.into_iter().map(|f| f.rel));
    }
    Ok(files.into_iter().filter(|f| !reached.contains(f)).collect())
}

//! The machine's C++ compiler, found once per process the way the `cc` crate finds one: `CXX`
//! (a program, optionally with arguments, such as `ccache g++`) when set, else the first of
//! `c++`, `g++`, `clang++` on `PATH`, whichever answers `--version`. CUDA C on the host backend
//! (`cuda_c/`) and the kernel worker (`isolate/build.rs`) both compile with it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A C++ compiler that was found.
#[derive(Clone, Debug)]
pub(crate) struct Compiler {
    /// The program.
    pub program: PathBuf,
    /// Arguments `CXX` gave before ours.
    pub pre_args: Vec<String>,
    /// `--version`'s first line.
    pub version: String,
}

/// The compiler, found once per process; `Err` says where it looked.
pub(crate) fn compiler() -> Result<&'static Compiler, String> {
    static FOUND: OnceLock<Result<Compiler, String>> = OnceLock::new();
    FOUND.get_or_init(find).as_ref().map_err(Clone::clone)
}

fn find() -> Result<Compiler, String> {
    let (candidates, looked): (Vec<(PathBuf, Vec<String>)>, String) =
        match std::env::var("CXX").ok().filter(|v| !v.trim().is_empty()) {
            Some(cxx) => {
                let mut words = cxx.split_whitespace().map(str::to_string);
                let prog = words.next().unwrap_or_default();
                let found = on_path(&prog);
                (
                    found
                        .into_iter()
                        .map(|p| (p, words.clone().collect()))
                        .collect(),
                    format!("CXX={cxx}"),
                )
            }
            None => (
                ["c++", "g++", "clang++"]
                    .iter()
                    .filter_map(|n| on_path(n))
                    .map(|p| (p, Vec::new()))
                    .collect(),
                "CXX (unset), then c++, g++ and clang++ on PATH".to_string(),
            ),
        };
    for (program, pre_args) in candidates {
        let out = Command::new(&program)
            .args(&pre_args)
            .arg("--version")
            .output();
        if let Ok(out) = out {
            if out.status.success() {
                let version = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                return Ok(Compiler {
                    program,
                    pre_args,
                    version,
                });
            }
        }
    }
    Err(format!(
        "no C++ compiler was found for running CUDA C on the host backend (looked for {looked}); \
         install g++ or clang++, or set CXX"
    ))
}

/// `name` as a path (when it has a slash) or the first executable `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

//! Where the CUDA headers real kernels include (`cuda_fp16.h`, `cuda_bf16.h`,
//! `cooperative_groups.h`, `cuda/std/*`) are found for NVRTC (KC1), which searches no
//! directory of its own.
//!
//! In order, the first place that has them wins (one toolkit, never a mix of two):
//!
//! 1. `CUEFLOW_CUDA_INCLUDE`: directories separated by `:`, taken as given;
//! 2. `$CUDA_HOME/include`, `$CUDA_PATH/include`, `$CUDA_ROOT/include`;
//! 3. next to the `libnvrtc` that was loaded: a toolkit's `lib64/../include`, or NVRTC's pip
//!    package (`site-packages/nvidia/cu13/{lib,include}` for CUDA 13; for CUDA 12 the
//!    headers are in sibling packages, `nvidia/*/include`, all of which are taken);
//! 4. `/usr/local/cuda/include`, then `/usr/local/cuda-X.Y/include` newest first,
//!    `/opt/cuda/include`, and `/usr/include` where a distribution put `cuda_runtime.h` there.
//!
//! A directory counts when it holds `cuda_runtime.h`, `cuda_fp16.h` or
//! `cooperative_groups.h`. CUDA 13 moved the CCCL headers (`cuda/std/*`, CUB, Thrust) into
//! `include/cccl`, which is added after its parent. Every directory looked at is remembered
//! for the error a failed compile returns.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The toolkit include directories found, and every place looked at.
pub(super) struct Includes {
    pub dirs: Vec<PathBuf>,
    pub looked: Vec<String>,
}

impl Includes {
    /// A line for compile errors: where headers came from, or where they were looked for.
    pub fn describe(&self) -> String {
        if self.dirs.is_empty() {
            format!(
                "no CUDA headers were found (looked in: {}); set CUDA_HOME or \
                 CUEFLOW_CUDA_INCLUDE, or add directories with CompileOptions::include_dir",
                self.looked.join(", ")
            )
        } else {
            format!(
                "CUDA headers searched in: {} (looked in: {})",
                self.dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.looked.join(", ")
            )
        }
    }
}

fn has_headers(d: &Path) -> bool {
    ["cuda_runtime.h", "cuda_fp16.h", "cooperative_groups.h"]
        .iter()
        .any(|h| d.join(h).is_file())
}

/// The toolkit's include directories, found once per process.
pub(super) fn toolkit() -> &'static Includes {
    static FOUND: OnceLock<Includes> = OnceLock::new();
    FOUND.get_or_init(|| find(super::driver::nvrtc::path()))
}

/// Search as the module docs say; `nvrtc` is the path of the loaded libnvrtc.
pub(super) fn find(nvrtc: Option<PathBuf>) -> Includes {
    let mut looked = Vec::new();
    if let Some(v) = crate::config::cuda_include() {
        let dirs: Vec<PathBuf> = std::env::split_paths(&v).collect();
        let name = crate::config::CUDA_INCLUDE.name;
        looked.push(format!("{name}={}", v.to_string_lossy()));
        return Includes { dirs, looked };
    }
    let mut groups: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            groups.push((var.to_string(), vec![PathBuf::from(v).join("include")]));
        }
    }
    if let Some(lib) = nvrtc {
        groups.push((format!("next to {}", lib.display()), beside_library(&lib)));
    }
    let versioned = super::driver::nvrtc::local_toolkits();
    let mut fixed = vec![PathBuf::from("/usr/local/cuda")];
    fixed.extend(versioned);
    fixed.push(PathBuf::from("/opt/cuda"));
    for d in fixed {
        groups.push((String::new(), vec![d.join("include")]));
    }
    groups.push((String::new(), vec![PathBuf::from("/usr/include")]));
    first_group(groups, looked)
}

/// The first of `groups` (why it is looked at, its directories) that holds the CUDA headers:
/// every directory of that group that exists, each followed by its `cccl` subdirectory when it
/// has one. A group counts when one of its directories has the marker headers; the others of
/// the group come with it, because CUDA 12's pip layout splits one toolkit over sibling
/// packages and the one with `cuda/std`, `nv/target`, CUB and Thrust
/// (`nvidia/cuda_cccl/include`) has none of the markers, yet `cooperative_groups.h` and
/// `cuda_fp16.h` include from it.
fn first_group(groups: Vec<(String, Vec<PathBuf>)>, mut looked: Vec<String>) -> Includes {
    for (why, dirs) in groups {
        for d in &dirs {
            looked.push(if why.is_empty() {
                d.display().to_string()
            } else {
                format!("{} ({why})", d.display())
            });
        }
        if dirs.iter().any(|d| has_headers(d)) {
            let mut found = Vec::new();
            for d in dirs.into_iter().filter(|d| d.is_dir()) {
                let cccl = d.join("cccl");
                found.push(d);
                if cccl.is_dir() {
                    found.push(cccl);
                }
            }
            return Includes {
                dirs: found,
                looked,
            };
        }
    }
    Includes {
        dirs: Vec::new(),
        looked,
    }
}

/// Include directories a library at `lib` ships with: `../include` of its directory (a
/// toolkit's `lib64`, CUDA 13's pip `nvidia/cu13/lib`), and for CUDA 12's pip layout
/// (`nvidia/cuda_nvrtc/lib`) every `nvidia/*/include` beside it.
fn beside_library(lib: &Path) -> Vec<PathBuf> {
    let Some(libdir) = lib.parent() else {
        return Vec::new();
    };
    let Some(pkg) = libdir.parent() else {
        return Vec::new();
    };
    let mut v = vec![pkg.join("include")];
    if let Some(nvidia) = pkg.parent() {
        let mut siblings: Vec<PathBuf> = std::fs::read_dir(nvidia)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("include"))
            .filter(|p| p != &pkg.join("include") && p.is_dir())
            .collect();
        siblings.sort();
        if nvidia.file_name().is_some_and(|n| n == "nvidia") {
            v.extend(siblings);
        }
    }
    v
}

/// `(major, minor)` of `/usr/local/cuda-X.Y`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_layouts_are_found_beside_libnvrtc() {
        let root = std::env::temp_dir().join(format!("cueflow-headers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // CUDA 12 wheels: headers in sibling packages.
        let nv = root.join("site-packages/nvidia");
        std::fs::create_dir_all(nv.join("cuda_nvrtc/lib")).unwrap();
        std::fs::create_dir_all(nv.join("cuda_runtime/include")).unwrap();
        std::fs::write(nv.join("cuda_runtime/include/cuda_fp16.h"), "").unwrap();
        let lib = nv.join("cuda_nvrtc/lib/libnvrtc.so.12");
        let dirs = beside_library(&lib);
        assert!(dirs.contains(&nv.join("cuda_runtime/include")), "{dirs:?}");
        // CCCL's package (`cuda/std`, `nv/target`) has none of the marker headers, and the
        // runtime's headers include from it: it is taken with them.
        std::fs::create_dir_all(nv.join("cuda_cccl/include/nv")).unwrap();
        std::fs::write(nv.join("cuda_cccl/include/nv/target"), "").unwrap();
        let dirs = beside_library(&lib);
        let found = first_group(vec![("pip".into(), dirs)], Vec::new()).dirs;
        assert_eq!(
            found,
            [
                nv.join("cuda_cccl/include"),
                nv.join("cuda_runtime/include")
            ],
            "every existing sibling, the nvrtc package's missing include left out"
        );
        // A group without the markers is passed over, whatever else it has.
        let none = first_group(
            vec![("x".into(), vec![nv.join("cuda_cccl/include")])],
            vec![],
        );
        assert!(none.dirs.is_empty() && none.looked.len() == 1);
        // CUDA 13 wheels: one package with lib and include.
        std::fs::create_dir_all(nv.join("cu13/lib")).unwrap();
        std::fs::create_dir_all(nv.join("cu13/include/cccl")).unwrap();
        std::fs::write(nv.join("cu13/include/cooperative_groups.h"), "").unwrap();
        let dirs = beside_library(&nv.join("cu13/lib/libnvrtc.so.13"));
        assert_eq!(dirs[0], nv.join("cu13/include"));
        assert!(has_headers(&dirs[0]));
        assert_eq!(
            super::super::driver::nvrtc::toolkit_version(Path::new("/usr/local/cuda-12.10")),
            (12, 10)
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}

//! The driver layer calls exactly the functions the floor checks for, and the structs it hands
//! the driver have CUDA 12.0's layouts. (That no file outside it calls the driver is a rule of
//! the layer check, `crates/cueflow-layers`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cudarc::driver::sys;

use super::version::{Feature, Func, BASE};

fn cuda_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/backend/cuda")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir)
        .expect("the source tree is there")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The names `cu…`/`nvrtc…` called as `sys::name(` in `text`.
fn sys_calls(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("sys::") {
        let rest = &text[i + 5..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let called = rest[name.len()..].starts_with('(');
        if called && (name.starts_with("cu") || name.starts_with("nvrtc")) {
            out.insert(name);
        }
    }
    out
}

#[test]
fn the_layer_calls_what_the_floor_checks_for() {
    let mut files = Vec::new();
    rust_files(&cuda_dir().join("driver"), &mut files);
    let mut called = BTreeSet::new();
    for f in &files {
        called.extend(sys_calls(&std::fs::read_to_string(f).unwrap()));
    }
    let optional: BTreeSet<String> = Func::ALL.iter().map(|f| f.symbol().to_string()).collect();
    let base: BTreeSet<String> = BASE.iter().map(|s| s.to_string()).collect();
    // cuInit and cuDriverGetVersion are called through the library's own pointers first.
    let unchecked: Vec<&String> = called
        .iter()
        .filter(|c| !base.contains(*c) && !optional.contains(*c))
        .collect();
    assert!(
        unchecked.is_empty(),
        "called but neither in BASE nor a version-gated Func: {unchecked:?}"
    );
    let uncalled: Vec<&String> = base
        .iter()
        .filter(|b| !called.contains(*b) && !["cuInit"].contains(&b.as_str()))
        .collect();
    assert!(
        uncalled.is_empty(),
        "in BASE but never called: {uncalled:?}"
    );
}

#[test]
fn structs_have_the_cuda_12_0_layouts() {
    use std::mem::{offset_of, size_of};
    // cuGraphAddKernelNode_v2's parameters (CUDA 12.0): func, 6 dimensions, shared bytes,
    // kernelParams, extra, kern, ctx.
    assert_eq!(size_of::<sys::CUDA_KERNEL_NODE_PARAMS>(), 72);
    assert_eq!(offset_of!(sys::CUDA_KERNEL_NODE_PARAMS, kernelParams), 40);
    assert_eq!(offset_of!(sys::CUDA_KERNEL_NODE_PARAMS, ctx), 64);
    // CUmemPoolProps: 88 bytes in every version; what CUDA 12.2 and 12.6 named (maxSize,
    // usage) was reserved, must-be-zero space in 12.0.
    assert_eq!(size_of::<sys::CUmemPoolProps>(), 88);
    assert_eq!(offset_of!(sys::CUmemPoolProps, maxSize), 24);
    let p = super::memory::device_pool_props(3);
    assert_eq!((p.maxSize, p.usage), (0, 0));
    assert!(p.reserved.iter().all(|&b| b == 0));
    assert_eq!(size_of::<sys::CUmemLocation>(), 8);
    assert_eq!(size_of::<sys::CUmemAccessDesc>(), 12);
    assert_eq!(size_of::<sys::CUDA_MEM_ALLOC_NODE_PARAMS>(), 120);
    assert_eq!(size_of::<sys::CUDA_MEMCPY3D>(), 200);
    assert_eq!(size_of::<sys::CUDA_MEMSET_NODE_PARAMS>(), 40);
    assert_eq!(size_of::<sys::CUDA_HOST_NODE_PARAMS>(), 16);
    // CUDA 12.3's conditional node parameters and the node-parameter union they go in.
    assert_eq!(size_of::<sys::CUDA_CONDITIONAL_NODE_PARAMS>(), 32);
    assert_eq!(size_of::<sys::CUgraphNodeParams>(), 256);
}

/// The text from the start of the function that contains byte `at` of `text` up to `at`.
fn enclosing_fn(text: &str, at: usize) -> &str {
    let start = text[..at]
        .rfind("\nfn ")
        .or_else(|| text[..at].rfind(" fn "));
    &text[start.unwrap_or(0)..at]
}

#[test]
fn every_optional_function_is_called_behind_a_check_of_the_driver() {
    let mut files = Vec::new();
    rust_files(&cuda_dir().join("driver"), &mut files);
    for f in Func::ALL {
        let call = format!("sys::{}(", f.symbol());
        let mut sites = 0;
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (at, _) in text.match_indices(&call) {
                sites += 1;
                // The check names the function, or a feature that needs it.
                let guard = enclosing_fn(&text, at);
                let by_feature = Feature::ALL
                    .iter()
                    .filter(|x| x.funcs().contains(&f))
                    .any(|x| guard.contains(&format!("Feature::{x:?}")));
                assert!(
                    guard.contains(&format!("Func::{f:?}")) || by_feature,
                    "{} calls {} without checking the driver has it",
                    file.display(),
                    f.symbol()
                );
            }
        }
        assert!(sites > 0, "{} is never called", f.symbol());
    }
}

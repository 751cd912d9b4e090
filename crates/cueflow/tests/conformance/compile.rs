//! KC1–KC3: kernel compilation — options and the toolkit's headers, ahead-of-time loading, and
//! the disk cache of compiled images.

use std::path::PathBuf;

use cueflow::{CompileOptions, Device, Error, Kernel, KernelArgs, LaunchConfig, Stream};

use crate::support::*;

/// A directory of its own for one test run.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "cueflow-conformance-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `out[i] = in[i] * SCALE + OFFSET` where SCALE is a define and OFFSET comes from a header in
/// an include directory; the CUDA side also includes the toolkit headers real kernels include
/// and uses half precision and cooperative groups from them.
const AXPB_CU: &str = r#"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cuda/std/cstdint>
#include "offset.h"
namespace cg = cooperative_groups;
extern "C" __global__ void kc_axpb(const float* in, float* out, unsigned long long n) {
    cg::thread_block block = cg::this_thread_block();
    cuda::std::uint64_t i = (cuda::std::uint64_t)blockIdx.x * blockDim.x + block.thread_rank();
    if (i < n) {
        __half h = __float2half(in[i]);
        out[i] = __half2float(h) * SCALE + OFFSET;
    }
}
"#;

fn axpb_kernel(include: PathBuf) -> Kernel {
    Kernel::new("kc_axpb")
        .host(|b, a| {
            let x = a.input::<f32>(0);
            let y = a.tile_mut::<f32>(1);
            let lo = b.thread_range().start as usize;
            for (j, o) in y.iter_mut().enumerate() {
                *o = x[lo + j] * 3.0 + 0.5;
            }
        })
        .cuda_source(AXPB_CU, "kc_axpb")
        .cuda_options(
            CompileOptions::new()
                .define("SCALE", "3.0f")
                .include_dir(include)
                .std("c++17")
                .fast_math()
                .line_info()
                .max_registers(64),
        )
        .build()
}

/// KC1: CUDA C compiles with defines, an include directory, a language standard, fast math,
/// line info and a register limit, and finds `cuda_fp16.h`, `cuda_bf16.h`,
/// `cooperative_groups.h` and `cuda/std/*` without being told where they are.
pub fn kc1_options_and_toolkit_headers(dev: &Device) {
    let inc = scratch("kc1");
    std::fs::write(inc.join("offset.h"), "#define OFFSET 0.5f\n").unwrap();
    let k = axpb_kernel(inc.clone());
    let s = Stream::new(dev).unwrap();
    let input: Vec<f32> = (0..N).map(|i| (i % 100) as f32).collect();
    let x = upload(dev, &input);
    let y = zeros(dev, N);
    s.launch(
        &k,
        LaunchConfig::for_elements(N, 256),
        KernelArgs::new().read(&x).write(&y).scalar(N as u64),
    )
    .unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    let got = download(&y);
    for (i, (g, x)) in got.iter().zip(&input).enumerate() {
        assert_eq!(*g, x * 3.0 + 0.5, "element {i}");
    }
    let _ = std::fs::remove_dir_all(&inc);
}

/// KC1: a compile error is a typed error with the compiler's log and where headers were looked
/// for; a missing header is one. (The host backend compiles no CUDA C: its kernels run their
/// host implementation, and options are checked the same way on both, see
/// `kc1_bad_options_refused`.)
pub fn kc1_compile_errors_carry_the_log(dev: &Device) {
    if is_host(dev) {
        return;
    }
    let s = Stream::new(dev).unwrap();
    let bad = Kernel::new("kc_syntax")
        .cuda_source(
            "extern \"C\" __global__ void kc_syntax() { this is not C++; }",
            "kc_syntax",
        )
        .build();
    match bad.prepare(dev) {
        Err(Error::Compile { kernel, log }) => {
            assert_eq!(kernel, "kc_syntax");
            assert!(log.contains("error"), "{log}");
            assert!(log.contains("CUDA headers"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let missing = Kernel::new("kc_missing")
        .cuda_source(
            "#include \"no_such_header_cueflow.h\"\nextern \"C\" __global__ void kc_missing() {}",
            "kc_missing",
        )
        .build();
    dev.start_trace().unwrap();
    match s.launch(&missing, LaunchConfig::new(1, 1), KernelArgs::new()) {
        Err(Error::Compile { log, .. }) => {
            assert!(log.contains("no_such_header_cueflow.h"), "{log}");
            assert!(log.contains("looked in"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert_eq!(enqueued(&dev.stop_trace().unwrap()), 0);
    assert_eq!(dev.sticky_error(), None);
}

/// KC1: options the compiler cannot take are refused before anything compiles or is
/// enqueued, on every backend.
pub fn kc1_bad_options_refused(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let bad = [
        CompileOptions::new().define("1BAD", "1"),
        CompileOptions::new().std("c++98"),
        CompileOptions::new().max_registers(0),
        CompileOptions::new().include_dir("/no/such/cueflow/include/dir"),
        CompileOptions::new().option("use_fast_math"),
    ];
    dev.start_trace().unwrap();
    for opts in bad {
        let k = Kernel::new("kc_bad_options")
            .host(|_, _| {})
            .cuda_source("extern \"C\" __global__ void k(float*) {}", "k")
            .cuda_options(opts.clone())
            .build();
        for r in [
            k.prepare(dev),
            s.launch(&k, LaunchConfig::new(1, 32), KernelArgs::new().write(&d)),
        ] {
            match r {
                Err(Error::InvalidOptions { kernel, .. }) => assert_eq!(kernel, "kc_bad_options"),
                other => panic!("{opts:?} gave {other:?}"),
            }
        }
    }
    assert_eq!(enqueued(&dev.stop_trace().unwrap()), 0);
}

/// KC1: a templated kernel launches by its name expression (`nvrtcAddNameExpression`).
pub fn kc1_templated_kernel_by_name_expression(dev: &Device) {
    let src = r#"
template <typename T, int K>
__global__ void scale(T* x, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * (T)K;
}
"#;
    let k = Kernel::new("scale<float, 4>")
        .host(|b, a| {
            for v in a.tile_mut::<f32>(0) {
                *v *= 4.0;
            }
            let _ = b;
        })
        .cuda_source(src, "scale<float, 4>")
        .build();
    k.prepare(dev).unwrap();
    let s = Stream::new(dev).unwrap();
    let d = filled(dev, N, 1.5);
    s.launch(
        &k,
        LaunchConfig::for_elements(N, 128),
        KernelArgs::new().write(&d).scalar(N as u64),
    )
    .unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&d), 6.0);
}

// ---------------------------------------------------------------------------------------------
// KC2 Ahead of time

/// KC2: `Kernel::prepare` compiles and loads before the first launch: errors come from it, and
/// the launches after it use what it loaded (its cost is measured by
/// `examples/kernel_first_launch.rs`, not asserted here).
pub fn kc2_prepare_ahead_of_time(dev: &Device) {
    let inc = scratch("kc2");
    std::fs::write(inc.join("offset.h"), "#define OFFSET 0.5f\n").unwrap();
    let k = axpb_kernel(inc.clone());
    k.prepare(dev).unwrap();
    k.prepare(dev).unwrap(); // idempotent
    let s = Stream::new(dev).unwrap();
    let x = filled(dev, N, 2.0);
    let y = zeros(dev, N);
    for _ in 0..2 {
        s.launch(
            &k,
            LaunchConfig::for_elements(N, 256),
            KernelArgs::new().read(&x).write(&y).scalar(N as u64),
        )
        .unwrap();
    }
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&y), 6.5);
    // A kernel without an implementation for this backend is refused by prepare too.
    // (CUDA C runs on the host backend too, HK1: PTX does not.)
    let other = if is_host(dev) {
        Kernel::new("kc_ptx_only")
            .cuda(cueflow::CudaCode::Ptx {
                code: ".version 7.0\n.target sm_70\n.address_size 64\n".into(),
                entry: "k".into(),
            })
            .build()
    } else {
        Kernel::new("kc_host_only").host(|_, _| {}).build()
    };
    assert!(matches!(other.prepare(dev), Err(Error::Unsupported(_))));
    let _ = std::fs::remove_dir_all(&inc);
}

// ---------------------------------------------------------------------------------------------
// KC3 Cache

/// Set in the child processes of `kc3_cache_across_processes`.
const KC3_CHILD: &str = "CUEFLOW_KC3_CHILD";

/// KC3: a process does not recompile what an earlier process compiled; an edited header is
/// recompiled; a corrupt entry is recompiled, never loaded. Runs children of this test binary
/// against a cache directory of its own. On the host backend nothing is compiled, so nothing
/// may be written to the cache.
pub fn kc3_cache_across_processes(dev: &Device) {
    if let Ok(inc) = std::env::var(KC3_CHILD) {
        // The child: compile and run the kernel once, check the result.
        let k = axpb_kernel(PathBuf::from(inc));
        let s = Stream::new(dev).unwrap();
        let x = filled(dev, N, 1.0);
        let y = zeros(dev, N);
        s.launch(
            &k,
            LaunchConfig::for_elements(N, 256),
            KernelArgs::new().read(&x).write(&y).scalar(N as u64),
        )
        .unwrap();
        s.synchronize().unwrap(); // `download` orders with nothing
        let want: f32 = std::env::var("CUEFLOW_KC3_WANT").unwrap().parse().unwrap();
        assert_all(&download(&y), want);
        return;
    }
    let root = scratch("kc3");
    let (cache, inc) = (root.join("cache"), root.join("include"));
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::write(inc.join("offset.h"), "#define OFFSET 0.5f\n").unwrap();
    let backend = dev.properties().backend;
    let child = |want: f32| {
        let test = format!("{backend}::kc3_cache_across_processes");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(KC3_CHILD, &inc)
            .env("CUEFLOW_KC3_WANT", want.to_string())
            .env("CUEFLOW_KERNEL_CACHE", &cache)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // An entry is its path, its file (inode: a rewrite renames a new file into place) and its
    // bytes; not its modification time, which a load refreshes (the cache's LRU order).
    let entries = || -> Vec<(PathBuf, u64, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(&cache)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                let p = e.path();
                let m = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap());
                let b = std::fs::read(&p).unwrap();
                (p, m, b)
            })
            .collect();
        v.sort();
        v
    };
    child(3.5);
    if is_host(dev) {
        // The host backend runs the kernel's closure, compiling nothing, unless
        // CUEFLOW_HOST_KERNELS=c makes it compile the CUDA C (HK1): then its objects are
        // cached under `host/` by the same rules.
        if !std::env::var("CUEFLOW_HOST_KERNELS").is_ok_and(|v| v == "c") {
            assert!(
                entries().is_empty(),
                "the host backend wrote to the kernel cache"
            );
            let _ = std::fs::remove_dir_all(&root);
            return;
        }
        // As for CUDA entries: the file (inode) and its bytes, not its modification time,
        // which a load refreshes (the cache's LRU order).
        let objects = || -> Vec<(PathBuf, u64, Vec<u8>)> {
            let mut v: Vec<_> = std::fs::read_dir(cache.join("host"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .map(|p| {
                    let m = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap());
                    let b = std::fs::read(&p).unwrap();
                    (p, m, b)
                })
                .collect();
            v.sort();
            v
        };
        let first = objects();
        assert!(
            first
                .iter()
                .any(|(p, ..)| p.extension().is_some_and(|e| e == "so")),
            "no host object was cached"
        );
        child(3.5);
        assert_eq!(objects(), first, "a second process recompiled (KC3)");
        let so = &first
            .iter()
            .find(|(p, ..)| p.extension().is_some_and(|e| e == "so"))
            .unwrap()
            .0;
        std::fs::write(so, b"corrupt").unwrap();
        child(3.5);
        assert_ne!(
            std::fs::read(so).unwrap(),
            b"corrupt",
            "a corrupt entry was kept"
        );
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let first = entries();
    assert!(!first.is_empty(), "the first process stored nothing");
    // A second process loads what the first compiled: nothing is rewritten.
    child(3.5);
    assert_eq!(entries(), first, "the second process recompiled");
    // Editing the header changes the key: a new entry, and the new value.
    std::fs::write(inc.join("offset.h"), "#define OFFSET 1.5f\n").unwrap();
    child(4.5);
    let edited = entries();
    assert_eq!(
        edited.len(),
        first.len() + 1,
        "an edited header was not recompiled"
    );
    // A corrupt entry is recompiled and rewritten, never loaded.
    let mut corrupted = Vec::new();
    for (p, _, b) in &edited {
        let mut bad = b.clone();
        let n = bad.len();
        bad[n - 8] ^= 0xff;
        std::fs::write(p, &bad).unwrap();
        corrupted.push((p.clone(), bad));
    }
    child(4.5);
    let rewritten = entries()
        .iter()
        .filter(|(p, _, b)| corrupted.iter().any(|(q, c)| q == p && c != b))
        .count();
    assert!(rewritten >= 1, "the corrupt entry was not rewritten");
    let _ = std::fs::remove_dir_all(&root);
}

//! Kernel parameter sizes on a GPU: the driver's (CUDA 12.4's `cuFuncGetParamInfo`) and the
//! PTX's (`ptx.rs`, what a driver older than 12.4 gets) agree with the C layout, for
//! `extern "C"` and C++ kernels. Prints `SKIP` without CUDA.

use std::sync::Arc;

use super::super::device::CudaBackend;
use super::super::driver::{self, module as modl, version::Feature};
use crate::backend::contract::kernel::KernelInner;
use crate::types::compile::CudaCode;

const SOURCE: &str = r#"
struct Pair { double a; char b; };        // 16 bytes, 8-aligned
struct Five { int x[5]; };                // 20 bytes
extern "C" __global__ void cf_sizes(float* p, Pair s, int n, char c, double d, Five f,
                                    unsigned short h) {
    if (n == 12345) p[0] = s.a + c + d + f.x[4] + h;
}
__global__ void cf_sizes_cpp(int a, double b) { (void)a; (void)b; }
"#;

fn kernel(entry: &str) -> Arc<KernelInner> {
    Arc::new(KernelInner {
        name: entry.into(),
        host: None,
        cuda: Some(CudaCode::Source {
            code: SOURCE.into(),
            entry: entry.into(),
            options: Default::default(),
        }),
        loaded: Default::default(),
    })
}

#[test]
fn parameter_sizes_from_the_driver_and_from_ptx_agree_with_c() {
    if let Err(why) = driver::library::load().and(driver::nvrtc::load().map(|_| ())) {
        println!("SKIP: {why}");
        return;
    }
    let b = match CudaBackend::open(u64::MAX - 11, 0) {
        Ok(b) => b,
        Err(e) => {
            println!("SKIP: {e}");
            return;
        }
    };
    let sh = b.shared.clone();
    sh.enter().unwrap();
    let from_driver = driver::library::api().supports(Feature::ParamInfo);
    for (entry, want) in [
        ("cf_sizes", vec![8, 16, 4, 1, 8, 20, 2]),
        ("cf_sizes_cpp", vec![4, 8]),
    ] {
        let k = kernel(entry);
        let code = k.cuda.as_ref().unwrap();
        let loaded = sh.modules.load(&k).unwrap();
        // What the launch check (KC4) uses, on any driver.
        assert_eq!(loaded.params.as_deref(), Some(&want[..]), "{entry}");
        // The driver's own sizes where it has them, and the PTX's in any case.
        assert_eq!(modl::param_sizes(loaded.func).is_some(), from_driver);
        if let Some(d) = modl::param_sizes(loaded.func) {
            assert_eq!(d, want, "{entry}: driver");
        }
        // A C++ kernel's module is the one compiled with `&entry` (its mangled name).
        let code = super::cpp_entry(code)
            .filter(|_| entry == "cf_sizes_cpp")
            .unwrap_or_else(|| code.clone());
        let (_, found) = sh.modules.module(&code, entry).unwrap();
        let (name, key) = found.unwrap();
        assert_eq!(name == entry, entry == "cf_sizes", "{name}");
        assert_eq!(sh.modules.ptx_sizes(key, &name), Some(want), "{entry}: PTX");
    }
    println!(
        "parameter sizes agree (driver CUDA {}: {})",
        driver::library::api().version,
        if from_driver {
            "driver and PTX"
        } else {
            "PTX only"
        }
    );
}

/// NVRTC alone (no GPU needed): the cubin's kernels and parameter sizes come with it, from the
/// PTX NVRTC made on the way. Prints `SKIP` without NVRTC.
#[test]
fn a_compiled_cubin_carries_its_kernels_parameter_sizes() {
    if let Err(why) = driver::nvrtc::load() {
        println!("SKIP: {why}");
        return;
    }
    let options = Default::default();
    let job = super::Job::new("cf_sizes", SOURCE, "cf_sizes", &options, (9, 0)).unwrap();
    let e = super::compile(&job).unwrap();
    assert!(e.cubin && job.cubin);
    let want: Vec<(String, Vec<usize>)> = vec![
        ("cf_sizes".into(), vec![8, 16, 4, 1, 8, 20, 2]),
        ("_Z12cf_sizes_cppid".into(), vec![4, 8]),
    ];
    assert_eq!(e.kernels, want);
}

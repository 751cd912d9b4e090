//! The examples' own logic: `03_user_kernel` (a user kernel through the pipeline, serial and
//! `auto`, verified) and `04_two_stage` (two kernels chained through per-stream scratch, `u16`
//! in, `f32` out, verified), at small sizes on the host backend and at 64 MiB on CUDA, where
//! the kernels' CUDA C is compiled by NVRTC and must agree bit for bit with the host reference;
//! `06_multi_gpu` (peer copies and all-reduce, verified) on two host devices; `07_async` (four
//! streams driven from tokio tasks, verified).
//! Each example's `run` returns an error when an output element differs from its reference.
//! Without a GPU the CUDA tests print `SKIP` and pass (`CUEFLOW_REQUIRE_CUDA=1` fails them);
//! on a driver too old for something an example does, the example's `Unsupported` naming the
//! driver version it needs (newer than the device's) is a skip, printed — any other error
//! fails the test.

#[path = "../examples/03_user_kernel.rs"]
#[allow(dead_code)] // the example's `main`
mod user_kernel;

#[path = "../examples/04_two_stage.rs"]
#[allow(dead_code)]
mod two_stage;

#[path = "../examples/06_multi_gpu.rs"]
#[allow(dead_code)]
mod multi_gpu;

#[path = "../examples/09_multi_memory.rs"]
#[allow(dead_code)] // the example's `main`
mod multi_memory;

/// `09_multi_memory` (HM2 portable memory on both devices, HM4 managed prefetch between them,
/// HM6 a kernel reading the peer's memory, GR11 all-reduces captured into one graph per
/// device) measures and verifies on two host devices; its two-GPU run is in
/// `scripts/gpu-multi-check.sh`.
#[test]
fn multi_memory_example_verifies_on_two_host_devices() {
    let devs = Device::open_list("host:2x").unwrap();
    multi_memory::run(&devs, 1, 2, 3).unwrap();
}

#[path = "../examples/08_sgemm.rs"]
#[allow(dead_code)]
mod sgemm;

#[test]
fn sgemm_example_verifies_on_the_host_backend() {
    let dir = std::env::temp_dir().join(format!("cueflow-sgemm-{}", std::process::id()));
    sgemm::run(&Device::host().unwrap(), 48, &dir).unwrap();
    let json = std::fs::read_to_string(dir.join("sgemm_trace.json")).unwrap();
    assert!(
        json.contains("cublasSgemm"),
        "the external operation is in the Chrome trace"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sgemm_example_on_cuda() {
    let Some(dev) = cuda() else { return };
    let dir = std::env::temp_dir().join(format!("cueflow-sgemm-cuda-{}", std::process::id()));
    or_skip("08_sgemm", &dev, sgemm::run(&dev, 512, &dir));
}

#[cfg(feature = "cudarc-interop")]
#[path = "../examples/cudarc_interop.rs"]
#[allow(dead_code)] // the example's `main`
mod cudarc_interop;

/// A cudarc program and the same program on cueflow streams with the sanitizer and a trace
/// agree, and the adopted buffers go back to cudarc (small sizes; the timing is the
/// example's own run).
#[cfg(feature = "cudarc-interop")]
#[test]
fn cudarc_interop_example_on_cuda() {
    let Some(dev) = cuda() else { return };
    let dir = std::env::temp_dir().join(format!("cueflow-cudarc-{}", std::process::id()));
    let Some(o) = or_skip("cudarc_interop", &dev, cudarc_interop::run(256, 4, 1, &dir)) else {
        return;
    };
    assert!(o.is_some(), "CUDA is present: the example runs");
    let json = std::fs::read_to_string(dir.join("cudarc_trace.json")).unwrap();
    assert!(json.contains("sgemm") && json.contains("bias_relu"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[path = "../examples/07_async.rs"]
#[allow(dead_code)]
mod async_example;

use cueflow::Device;

#[test]
fn async_example_keeps_four_streams_busy_and_verifies() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dev = Device::host().unwrap();
    let checked = rt
        .block_on(async_example::four_streams(dev.clone(), 3, 4096))
        .unwrap();
    assert_eq!(checked, 4 * 3 * 4096);
    rt.block_on(async_example::latency(dev, 20)).unwrap();
}

#[test]
fn multi_gpu_example_measures_and_verifies_on_two_host_devices() {
    multi_gpu::run("host:2x", 4).unwrap();
}

/// The `--processes` form's rank body, with the two ranks on threads of this process (the
/// example itself starts one process per rank; the host backend meets either way).
#[test]
fn multi_gpu_example_rank_body_verifies_on_two_host_devices() {
    let devs = Device::open_list("host:2x").unwrap();
    let id = cueflow::Communicator::unique_id(&devs[0]).unwrap();
    std::thread::scope(|s| {
        for (rank, d) in devs.iter().enumerate() {
            let id = &id;
            s.spawn(move || multi_gpu::run_rank(d, id, 2, rank, 1).unwrap());
        }
    });
}

#[test]
fn user_kernel_example_verifies_serial_and_auto() {
    let dev = Device::host().unwrap();
    let o = user_kernel::run(&dev, 100_003, 5, 1).unwrap();
    assert!(o.serial_ms > 0.0 && o.pipelined_ms > 0.0);
    assert!(
        o.streams >= 1 && o.chunks >= o.streams,
        "{}×{}",
        o.streams,
        o.chunks
    );
}

#[test]
fn user_kernel_reference_is_what_the_kernel_computes() {
    // The reference is not the identity: a kernel that did nothing would fail verification.
    let x = user_kernel::input_value(7);
    assert_ne!(user_kernel::reference(x, 5), x);
}

/// `r`'s value; `None` after printing a skip when `r` is an `Unsupported` naming a driver
/// version newer than `dev`'s (the example needs a newer driver); any other error fails.
fn or_skip<T, E: Into<Box<dyn std::error::Error>>>(
    example: &str,
    dev: &Device,
    r: Result<T, E>,
) -> Option<T> {
    let e: Box<dyn std::error::Error> = match r {
        Ok(v) => return Some(v),
        Err(e) => e.into(),
    };
    let needed = e
        .downcast_ref::<cueflow::Error>()
        .and_then(cueflow::Error::needed_driver_version);
    match needed {
        Some(v) if v > dev.properties().driver_version => {
            eprintln!(
                "SKIP {example}: needs CUDA {}.{} ({e})",
                v / 1000,
                v % 1000 / 10
            );
            None
        }
        _ => panic!("{example}: {e}"),
    }
}

/// CUDA device 0, or `None` (after saying why) when there is none and none is required.
fn cuda() -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
            panic!("CUEFLOW_REQUIRE_CUDA=1 but the CUDA backend is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("SKIP cuda: {e}");
            None
        }
    }
}

#[test]
fn user_kernel_example_on_cuda() {
    let Some(dev) = cuda() else { return };
    let Some(o) = or_skip(
        "03_user_kernel",
        &dev,
        user_kernel::run(&dev, 16 << 20, 16, 3),
    ) else {
        return;
    };
    println!(
        "cuda 64 MiB: serial {:.2} ms, auto {}×{} {:.2} ms",
        o.serial_ms, o.streams, o.chunks, o.pipelined_ms
    );
    assert!(o.chunks >= o.streams);
}

#[test]
fn two_stage_example_on_cuda() {
    let Some(dev) = cuda() else { return };
    let Some(ms) = or_skip("04_two_stage", &dev, two_stage::run(&dev, 32 << 20)) else {
        return;
    };
    println!("cuda 64 MiB of u16: {ms:.2} ms");
}

#[test]
fn two_stage_example_verifies() {
    let dev = Device::host().unwrap();
    assert!(two_stage::run(&dev, 50_001).unwrap() > 0.0);
    assert!(two_stage::run(&dev, 3).unwrap() > 0.0); // fewer elements than chunks
}

/// The skip is for an `Unsupported` naming a driver newer than the device's, and for nothing
/// else: another `Unsupported`, one naming a driver the device has, or another error naming a
/// version, still fails.
#[test]
fn only_a_refusal_for_an_older_driver_is_a_skip() {
    let dev = Device::host().unwrap();
    let have = dev.properties().driver_version;
    let needs = |v: u32| {
        format!(
            "graph memory inside external operation `x` in a graph needs a CUDA {}.{} driver or \
             newer (this driver is CUDA {}.{})",
            v / 1000,
            v % 1000 / 10,
            have / 1000,
            have % 1000 / 10
        )
    };
    let newer = cueflow::Error::Unsupported(needs(have + 10));
    assert_eq!(or_skip("t", &dev, Err::<(), _>(newer)), None);
    assert_eq!(or_skip("t", &dev, Ok::<_, cueflow::Error>(7)), Some(7));
    for e in [
        cueflow::Error::Unsupported(needs(have)),
        cueflow::Error::Unsupported("cublasCreate failed: status 3".into()),
        cueflow::Error::Unavailable(needs(have + 10)),
    ] {
        let skip = || or_skip("t", &dev, Err::<(), _>(e.clone()));
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(skip));
        assert!(failed.is_err(), "{e} is no skip");
    }
}

//! Kernel launches checked against what they declare and what they may do: a graph's condition
//! handle outside its graph (GR9, ER3), C++ kernels named as CUDA programs name them (KC1).

use cueflow::{
    CompileOptions, Device, Error, Graph, Kernel, KernelArgs, LaunchConfig, Stream,
    CONDITIONAL_CUDA_H,
};

use crate::support::*;

const CONDITION_SOURCE: &str = r#"
#include "cueflow_conditional.h"
extern "C" __global__ void cf_set_cond(cudaGraphConditionalHandle h, unsigned int v) {
  cudaGraphSetConditional(h, v);
}
extern "C" __global__ void cf_put(unsigned int *out, unsigned int v) { out[0] = v; }
"#;

fn condition_kernel(entry: &str) -> Kernel {
    let opts = CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H);
    let b = Kernel::new(entry)
        .cuda_source(CONDITION_SOURCE, entry)
        .cuda_options(opts);
    match entry {
        "cf_set_cond" => b.host(|_, a| a.set_condition(0, a.scalar(1))),
        _ => b.host(|_, a| a.tile_mut::<u32>(0)[0] = a.scalar(1)),
    }
    .build()
}

// ---------------------------------------------------------------------------------------------
// GR9 with ER3: a condition is its graph's

/// GR9, ER3: a stream launch outside capture given a graph's condition handle is refused at
/// the call with `InvalidArgument` naming the argument, enqueues nothing and poisons nothing
/// (on CUDA the handle means nothing outside its graph: a kernel setting it faults the
/// context), and the graph's condition keeps its value (on the host backend the launch set it).
pub fn gr9_condition_on_a_stream_launch_refused(dev: &Device) {
    let mut g = Graph::new(dev);
    // Starts at 0 and keeps what it is set to (no reset): a stray set would show.
    let h = g.condition(0, false);
    let out = upload(dev, &[0u32]);
    let mut body = Graph::new(dev);
    body.add_kernel(
        &[],
        &condition_kernel("cf_put"),
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&out).scalar(7u32),
    )
    .unwrap();
    g.add_if(&[], &h, &body).unwrap();
    let exec = g.instantiate().unwrap();
    let s = Stream::new(dev).unwrap();
    dev.synchronize().unwrap();
    dev.start_trace().unwrap();
    let r = s.launch(
        &condition_kernel("cf_set_cond"),
        LaunchConfig::new(1, 1),
        KernelArgs::new().condition(&h).scalar(1u32),
    );
    let trace = dev.stop_trace().unwrap();
    match r {
        Err(Error::InvalidArgument { kernel, why }) => {
            assert_eq!(kernel, "cf_set_cond");
            assert!(
                why.contains("argument 0") && why.contains("condition"),
                "{why}"
            );
        }
        other => panic!("a condition on a stream launch was not refused: {other:?}"),
    }
    assert_eq!(enqueued(&trace), 0, "the refused launch enqueued work");
    s.synchronize().unwrap();
    assert_eq!(dev.sticky_error(), None);
    // The condition was never set: the if body does not run.
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(
        download(&out),
        vec![0u32],
        "the condition was set from outside its graph"
    );
}

// ---------------------------------------------------------------------------------------------
// KC1: a C++ kernel by its plain name

/// KC1: a C++ kernel (`__global__` without `extern "C"`, so its symbol is mangled) launches by
/// its plain name, as CUDA programs name it, on every backend — and by `&name` too. Before,
/// the host backend ran it and CUDA failed with "the module has no kernel named".
pub fn kc1_cpp_kernel_by_its_plain_name(dev: &Device) {
    let src = r#"
__device__ float twice(float v) { return 2.0f * v; }
__global__ void cf_cpp_double(float* x, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]);
}
"#;
    let s = Stream::new(dev).unwrap();
    for entry in ["cf_cpp_double", "&cf_cpp_double"] {
        let k = Kernel::new(entry).cuda_source(src, entry).build();
        k.prepare(dev)
            .unwrap_or_else(|e| panic!("entry {entry:?}: {e}"));
        let d = filled(dev, N, 1.5);
        s.launch(
            &k,
            LaunchConfig::for_elements(N, 128),
            KernelArgs::new().write(&d).scalar(N as u64),
        )
        .unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&d), 3.0);
    }
    // A name that is no kernel at all is still a compile error naming it.
    let k = Kernel::new("missing")
        .cuda_source(src, "cf_no_such_kernel")
        .build();
    match k.prepare(dev) {
        Err(Error::Compile { log, .. }) => assert!(log.contains("cf_no_such_kernel"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// HK4 Time limit

/// HK4: on the host backend a CUDA C kernel that never ends, past the device's time limit,
/// has its worker stopped and is the device's sticky fault saying it ran too long; the
/// program goes on, and so does another device and its kernels. CUDA refuses a limit (its
/// kernels cannot be stopped). A limit of zero is refused on every backend.
pub fn hk4_a_kernel_past_the_time_limit_is_a_sticky_fault(dev: &Device) {
    use std::time::{Duration, Instant};
    assert!(matches!(
        dev.set_kernel_timeout(Duration::ZERO),
        Err(Error::NotPermitted { rule: "HK4", .. })
    ));
    if !is_host(dev) {
        match dev.set_kernel_timeout(Duration::from_secs(1)) {
            Err(Error::Unsupported(why)) => assert!(why.contains("HK4"), "{why}"),
            other => panic!("expected Unsupported on CUDA, got {other:?}"),
        }
        return;
    }
    let off = |k: &str| std::env::var(k).is_ok_and(|v| v == "0");
    if off("CUEFLOW_HOST_ARENA") || off("CUEFLOW_HOST_ISOLATE") {
        // CUDA C then runs in this process, where nothing can stop it (HK4 says so).
        eprintln!("SKIP hk4: CUEFLOW_HOST_ARENA=0 or CUEFLOW_HOST_ISOLATE=0 is set");
        return;
    }
    // Spins until its flag is set, which nothing does (volatile: the loop is not removed).
    let src = r#"
extern "C" __global__ void cf_spin(const volatile unsigned* flag, unsigned* out) {
    while (flag[0] == 0) {}
    out[threadIdx.x] = 1;
}
"#;
    let spin = Kernel::new("cf_spin").cuda_source(src, "cf_spin").build();
    spin.prepare(dev).unwrap();
    let limit = Duration::from_millis(300);
    dev.set_kernel_timeout(limit).unwrap();
    let s = Stream::new(dev).unwrap();
    let (flag, out) = (upload(dev, &[0u32]), upload(dev, &[0u32; 32]));
    let t = Instant::now();
    s.launch(
        &spin,
        LaunchConfig::new(4, 32),
        KernelArgs::new().read(&flag).write(&out),
    )
    .unwrap();
    let e = s.synchronize().expect_err("a kernel that never ends");
    let took = t.elapsed();
    match &e {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "cf_spin");
            assert!(detail.contains("ran longer than 300ms"), "{detail}");
        }
        other => panic!("expected a KernelFault, got {other:?}"),
    }
    assert!(took >= limit && took < limit * 20, "stopped after {took:?}");
    // Sticky (ER2): every later call says so.
    assert!(matches!(dev.synchronize(), Err(Error::KernelFault { .. })));
    // Another device, and its CUDA C kernels, go on.
    let other = Device::host_n(7, 0).unwrap();
    let k = Kernel::new("cf_put")
        .cuda_source(CONDITION_SOURCE, "cf_put")
        .cuda_options(CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H))
        .build();
    let s2 = Stream::new(&other).unwrap();
    let x = upload(&other, &[0u32]);
    s2.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&x).scalar(9u32),
    )
    .unwrap();
    s2.synchronize().unwrap();
    assert_eq!(download(&x), vec![9u32]);
}

// ---------------------------------------------------------------------------------------------
// AC7 Declared accesses verified

const DECLARED_SOURCE: &str = r#"
extern "C" __global__ void cf_scribble(float* in, float* out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) { out[i] = in[i] + 1.0f; in[i] = -1.0f; }
}
extern "C" __global__ void cf_add_one(const float* in, float* out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1.0f;
}
"#;

/// AC7: a CUDA C kernel that writes a buffer it was given with `read()` is caught: on the host
/// backend the write faults (the isolated worker maps read-declared arguments read-only) and
/// is the device's sticky fault naming the kernel and the argument; on CUDA, with the
/// sanitizer on, the argument's checksum changes across the kernel and the sanitizer reports
/// the kernel and the argument. Kernels that keep their declarations — reading a buffer, or
/// reading and writing one buffer through a read and a written argument (KC4) — run as
/// before, with nothing reported.
pub fn ac7_a_write_through_a_read_argument_is_reported(dev: &Device) {
    let off = |k: &str| std::env::var(k).is_ok_and(|v| v == "0");
    if is_host(dev) && (off("CUEFLOW_HOST_ARENA") || off("CUEFLOW_HOST_ISOLATE")) {
        eprintln!("SKIP ac7: CUEFLOW_HOST_ARENA=0 or CUEFLOW_HOST_ISOLATE=0 is set");
        return;
    }
    dev.set_sanitize(cueflow::SanitizeMode::Warn);
    let k = |e: &str| Kernel::new(e).cuda_source(DECLARED_SOURCE, e).build();
    let s = Stream::new(dev).unwrap();
    let cfg = LaunchConfig::for_elements(N, 128);
    // Kept declarations: nothing to report.
    let (x, y) = (filled(dev, N, 1.0), zeros(dev, N));
    s.launch(
        &k("cf_add_one"),
        cfg,
        KernelArgs::new().read(&x).write(&y).scalar(N as u64),
    )
    .unwrap();
    s.launch(
        &k("cf_scribble"),
        cfg,
        KernelArgs::new().read(&y).write(&y).scalar(N as u64),
    )
    .unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&y), -1.0);
    assert!(
        dev.sanitizer_lints().is_empty(),
        "{:?}",
        dev.sanitizer_lints()
    );
    // A write through a read argument.
    s.launch(
        &k("cf_scribble"),
        cfg,
        KernelArgs::new().read(&x).write(&y).scalar(N as u64),
    )
    .unwrap();
    let r = s.synchronize();
    if is_host(dev) {
        match r {
            Err(Error::KernelFault { kernel, detail, .. }) => {
                assert_eq!(kernel, "cf_scribble");
                assert!(
                    detail.contains("argument 0") && detail.contains("read-only"),
                    "{detail}"
                );
            }
            other => panic!("expected a KernelFault, got {other:?}"),
        }
    } else {
        r.unwrap();
        let lints = dev.take_sanitizer_lints();
        assert!(
            lints
                .iter()
                .any(|l| l.message.contains("cf_scribble") && l.message.contains("argument 0")),
            "no report of the write: {lints:?}"
        );
    }
}

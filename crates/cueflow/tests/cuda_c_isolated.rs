//! CUDA C on the host backend runs in the device's kernel worker process (SPEC HK3, RL5): a
//! wild or out-of-bounds write in a compiled kernel is the device's sticky fault naming the
//! kernel, and the program's own memory — its other allocations and its Rust heap — is intact.
//! Host backend only (the same kernels fault on a GPU with `CUDA_ERROR_ILLEGAL_ADDRESS`, which
//! `tests/cuda_c/` covers).

use cueflow::{
    Device, DeviceBuffer, Error, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, PinnedFlags,
    Stream,
};

/// A thread writes one element past the end of `buf` (the guard page), and another writes to
/// an address of the Rust heap, given as a number: on a thread of the program the second write
/// would land in the Rust heap; in the worker that address is not mapped.
const WILD: &str = r#"
extern "C" __global__ void oob_writer(int* buf, unsigned n, unsigned long long heap)
{
    if (threadIdx.x == 0) ((volatile int*)(uintptr_t)heap)[0] = 0x0badf00d;
    __syncthreads();
    buf[n + threadIdx.x] = 0x0badf00d;
}

extern "C" __global__ void bump(unsigned* count)
{
    if (threadIdx.x == 0) count[0] += 1;
}

extern "C" __global__ void spin(int* out, unsigned rounds)
{
    volatile unsigned x = 0;
    for (unsigned i = 0; i < rounds; ++i) x = x + i;
    out[threadIdx.x] = (int)x;
}
"#;

fn c_kernel(name: &str) -> Kernel {
    Kernel::new(name).cuda_source(WILD, name).build()
}

fn upload<T: bytemuck::Pod>(s: &Stream, data: &[T]) -> DeviceBuffer<T> {
    let d = DeviceBuffer::<T>::new(s.device(), data.len()).unwrap();
    s.write_pageable(&d, data).unwrap();
    d
}

/// Whether this process runs CUDA C in a worker (the arena is on and isolation not turned
/// off); else the test has nothing to check and says so.
fn isolated() -> bool {
    let off = |k: &str| std::env::var(k).is_ok_and(|v| v == "0");
    if off("CUEFLOW_HOST_ARENA") || off("CUEFLOW_HOST_ISOLATE") {
        eprintln!("SKIP isolation: CUEFLOW_HOST_ARENA=0 or CUEFLOW_HOST_ISOLATE=0 is set");
        return false;
    }
    true
}

/// HK3/KN2 (the issue's evidence): an out-of-bounds write in a kernel given only as CUDA C
/// gives a sticky `KernelFault` naming the kernel; the program's other allocations and a Rust
/// heap pattern are intact, and another device goes on working.
#[test]
fn hk3_out_of_bounds_write_faults_and_leaves_the_program_intact() {
    if !isolated() {
        return;
    }
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let k = c_kernel("oob_writer");
    if let Err(e) = k.prepare(&dev) {
        eprintln!("SKIP: no C++ compiler for CUDA C on the host backend: {e}");
        return;
    }
    let pattern: Vec<u32> = (0..4096u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let heap: Box<[u32]> = pattern.clone().into_boxed_slice();
    let before = upload(&s, &pattern);
    // 64 ints: 256 bytes, so element 64 is the guard page (A2).
    let buf = upload(&s, &[7i32; 64]);
    let after = upload(&s, &pattern);
    s.synchronize().unwrap();
    s.launch(
        &k,
        LaunchConfig::new(1, 32),
        KernelArgs::new()
            .write(&buf)
            .scalar(64u32)
            .scalar(heap.as_ptr() as u64),
    )
    .unwrap();
    let e = s.synchronize().unwrap_err();
    match &e {
        Error::KernelFault { kernel, .. } => assert_eq!(kernel, "oob_writer", "{e}"),
        other => panic!("expected a kernel fault, got {other}"),
    }
    // Sticky (ER2).
    assert!(matches!(s.synchronize(), Err(Error::KernelFault { .. })));
    // The Rust heap is intact, and so are the program's other allocations (read raw: the
    // device is poisoned, so its streams refuse copies).
    assert!(heap[..] == pattern[..], "the Rust heap was written");
    for b in [&before, &after] {
        // SAFETY: the device is poisoned and idle; nothing writes these bytes any more.
        let got =
            unsafe { std::slice::from_raw_parts(b.device_addr() as usize as *const u32, 4096) };
        assert!(got == &pattern[..], "another allocation was written");
    }
    // Another device works, its CUDA C kernels too (a fresh worker).
    let d2 = Device::host().unwrap();
    let s2 = Stream::new(&d2).unwrap();
    let out = upload(&s2, &[0i32; 4]);
    s2.launch(
        &c_kernel("spin"),
        LaunchConfig::new(1, 4),
        KernelArgs::new().write(&out).scalar(3u32),
    )
    .unwrap();
    let mut got = [0i32; 4];
    s2.read_pageable(&mut got, &out).unwrap();
    assert_eq!(got, [3; 4]);
}

/// RL5: a launch running beside the one that crashed the shared worker does not name itself:
/// the sticky fault names the kernel that crashed it, whichever launch reported first.
#[test]
fn rl5_a_crash_names_the_culprit_not_a_bystander() {
    if !isolated() {
        return;
    }
    let dev = Device::host_with_workers(2).unwrap();
    let a = Stream::new(&dev).unwrap();
    let b = Stream::new(&dev).unwrap();
    let spin = c_kernel("spin");
    let bad = c_kernel("oob_writer");
    if let Err(e) = spin.prepare(&dev).and_then(|_| bad.prepare(&dev)) {
        eprintln!("SKIP: no C++ compiler for CUDA C on the host backend: {e}");
        return;
    }
    let out = upload(&a, &[0i32; 1]);
    let buf = upload(&b, &[0i32; 64]);
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    // The bystander spins for a while; the culprit crashes meanwhile.
    a.launch(
        &spin,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&out).scalar(400_000_000u32),
    )
    .unwrap();
    b.launch(
        &bad,
        LaunchConfig::new(1, 32),
        KernelArgs::new().write(&buf).scalar(64u32).scalar(0x10u64),
    )
    .unwrap();
    let e = a.synchronize().unwrap_err();
    match &e {
        Error::KernelFault { kernel, .. } => assert_eq!(kernel, "oob_writer", "{e}"),
        other => panic!("expected a kernel fault, got {other}"),
    }
    assert!(matches!(b.synchronize(), Err(Error::KernelFault { .. })));
}

/// R5 (several queued launches to a request) with HK3/RL5: a crash in the middle of a
/// stream's queued launches is the fault of the launch that made it — the launches before it
/// ran, the ones after it did not — however the worker was handed them.
#[test]
fn r5_a_crash_among_queued_launches_names_it_and_stops_there() {
    if !isolated() {
        return;
    }
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let (spin, bump, bad) = (c_kernel("spin"), c_kernel("bump"), c_kernel("oob_writer"));
    if let Err(e) = [&spin, &bump, &bad]
        .iter()
        .try_for_each(|k| k.prepare(&dev))
    {
        eprintln!("SKIP: no C++ compiler for CUDA C on the host backend: {e}");
        return;
    }
    let mapped = PinnedFlags {
        mapped: true,
        ..Default::default()
    };
    let mut count = PinnedBuffer::<u32>::with_flags(&dev, 1, mapped).unwrap();
    count.write().unwrap()[0] = 0;
    let out = upload(&s, &[0i32; 1]);
    let buf = upload(&s, &[0i32; 64]);
    s.synchronize().unwrap();
    // The spin keeps the worker busy while the rest is queued behind it.
    let one = LaunchConfig::new(1, 32);
    s.launch(
        &spin,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&out).scalar(20_000_000u32),
    )
    .unwrap();
    let bumps = |n: usize, count: &mut PinnedBuffer<u32>| {
        for _ in 0..n {
            s.launch(&bump, one, KernelArgs::new().write_mapped(count))
                .unwrap();
        }
    };
    bumps(5, &mut count);
    s.launch(
        &bad,
        one,
        KernelArgs::new().write(&buf).scalar(64u32).scalar(0x10u64),
    )
    .unwrap();
    bumps(5, &mut count);
    let e = s.synchronize().unwrap_err();
    match &e {
        Error::KernelFault { kernel, .. } => assert_eq!(kernel, "oob_writer", "{e}"),
        other => panic!("expected a kernel fault, got {other}"),
    }
    // SAFETY: the stream stopped at the fault; nothing runs on the device any more.
    let ran = unsafe { count.as_slice_unchecked() }[0];
    assert_eq!(
        ran, 5,
        "the five launches before the crash ran, the five after it did not"
    );
}

/// KC3/HK3: a kernel compiled without the disk cache (`CompileOptions::no_disk_cache`) runs in
/// the worker too: its object stays where it was built for the life of the process, since the
/// worker process opens it by path.
#[test]
fn hk3_uncached_objects_run_in_the_worker() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let k = Kernel::new("spin")
        .cuda_source(WILD, "spin")
        .cuda_options(cueflow::CompileOptions::new().no_disk_cache())
        .build();
    if let Err(e) = k.prepare(&dev) {
        eprintln!("SKIP: no C++ compiler for CUDA C on the host backend: {e}");
        return;
    }
    let out = upload(&s, &[0i32; 8]);
    s.launch(
        &k,
        LaunchConfig::new(1, 8),
        KernelArgs::new().write(&out).scalar(4u32),
    )
    .unwrap();
    let mut got = [0i32; 8];
    s.read_pageable(&mut got, &out).unwrap();
    assert_eq!(got, [6; 8]);
}

/// HK4 from the environment: `CUEFLOW_KERNEL_TIMEOUT_MS` gives every host device of the
/// process a kernel time limit; a kernel that never ends is stopped and is the device's
/// sticky fault. Runs in a child process (the variable is read when a device opens).
#[test]
fn hk4_the_time_limit_from_the_environment_stops_a_kernel() {
    if !isolated() {
        return;
    }
    const CHILD: &str = "CUEFLOW_HK4_ENV_CHILD";
    if std::env::var(CHILD).is_ok() {
        let dev = Device::host().unwrap();
        let s = Stream::new(&dev).unwrap();
        let out = upload(&s, &[0i32; 32]);
        // u32::MAX rounds of a volatile loop: far longer than the limit.
        s.launch(
            &c_kernel("spin"),
            LaunchConfig::new(1, 32),
            KernelArgs::new().write(&out).scalar(u32::MAX),
        )
        .unwrap();
        match s.synchronize() {
            Err(Error::KernelFault { kernel, detail, .. }) => {
                assert_eq!(kernel, "spin");
                assert!(detail.contains("ran longer than 200ms"), "{detail}");
            }
            other => panic!("expected a KernelFault, got {other:?}"),
        }
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "hk4_the_time_limit_from_the_environment_stops_a_kernel",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("CUEFLOW_KERNEL_TIMEOUT_MS", "200")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! Defects the program fuzzer (`tests/fuzz/`, `tests/differential_fuzz.rs`) found, each
//! shrunk to a minimal program written with the public API. A test of a defect not fixed yet
//! is `#[ignore = "fuzz-found: …"]`; run those with `cargo test --test fuzz_found --
//! --ignored`. Each says what the fuzzer saw, what should happen and what does.

use cueflow::{
    kernels, Device, DeviceBuffer, Event, Graph, GraphNodeId, Kernel, KernelArgs, LaunchConfig,
    Stream,
};

const ADD_ONE: &str = r#"
extern "C" __global__ void add_one(float* dst, const float* src, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] + 1.0f;
}
"#;

/// Three device buffers of `dev`, zeroed and synchronized.
fn zeroed(dev: &Device) -> cueflow::Result<Vec<DeviceBuffer<f32>>> {
    let setup = Stream::new(dev)?;
    let bufs = (0..3)
        .map(|_| {
            let b = DeviceBuffer::<f32>::new(dev, 64)?;
            kernels::fill(&setup, &b, 0.0)?;
            Ok(b)
        })
        .collect::<cueflow::Result<Vec<_>>>()?;
    setup.synchronize()?;
    Ok(bufs)
}

/// One try of [`graph_with_a_wait_node_after_a_cross_device_wait_runs_its_c_kernel_on_its_device`]:
/// the kernel's result.
fn wait_node_after_cross_device_wait(add: &Kernel) -> cueflow::Result<f32> {
    let (d0, d1) = (Device::host_n(0, 2)?, Device::host_n(1, 2)?);
    let (b0, b1) = (zeroed(&d0)?, zeroed(&d1)?);
    let (s0, s1) = (Stream::new(&d0)?, Stream::new(&d1)?);
    // Device 0 has work pending when device 1's stream waits for it.
    s0.copy_d2d(&b0[2], &b0[1])?;
    let e = s0.record()?;
    let mut g = Graph::new(&d1);
    let never = Event::new(&d1)?;
    let wait: GraphNodeId = g.add_event_wait(&[], &never)?;
    let args = KernelArgs::new()
        .write(&b1[0].slice(48..64)?)
        .read(&b1[1].slice(0..16)?)
        .scalar(16u32);
    g.add_kernel(&[wait], add, LaunchConfig::for_elements(16, 16), args)?;
    let exec = g.instantiate()?;
    s1.wait_event(&e)?;
    exec.launch(&s1)?;
    d0.synchronize()?;
    d1.synchronize()?;
    let mut out = vec![0f32; 64];
    s1.read_pageable(&mut out, &b1[0])?;
    Ok(out[48])
}

/// Found by `fuzz_two_devices_full_ordering_by_events` (host backend, graphs and several
/// devices): a graph of device 1 with an event wait node, launched on a stream that waits on
/// an event of device 0 whose work is still pending, runs its CUDA C kernel where device 1's
/// memory is not mapped: the kernel faults with "illegal address" on its own device's
/// buffer, and the device is poisoned. Expected: 1.0 on every try. Seen: a `KernelFault`
/// (`illegal address: access to 0x…`) in most tries.
#[test]
#[ignore = "fuzz-found: a graph with an event wait node, launched after a cross-device wait, faults in its CUDA C kernel"]
fn graph_with_a_wait_node_after_a_cross_device_wait_runs_its_c_kernel_on_its_device() {
    let add = Kernel::new("add_one")
        .cuda_source(ADD_ONE, "add_one")
        .build();
    for i in 0..20 {
        let got = wait_node_after_cross_device_wait(&add);
        assert!(
            matches!(got, Ok(v) if v == 1.0),
            "try {i}: expected 1.0, got {got:?}"
        );
    }
}

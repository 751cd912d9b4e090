//! The two-device samples of the two-GPU issue (simpleMultiGPU, cudaOpenMP) on two host devices,
//! with their CUDA C alone on the host backend where a C++ compiler is present, and on two GPUs
//! when present.

mod common;

use common::{cuda_count, run_sample};

fn on_two_devices(exe: &str) {
    run_sample(exe, "host:2x", &[], &[]);
    if cuda_count() >= 2 {
        run_sample(exe, "cuda:0,cuda:1", &[], &[]);
    } else {
        eprintln!("SKIP cuda: two GPUs are needed, found {}", cuda_count());
    }
}

/// MD1/MD2: a reduction split over the devices, each on its own stream, asynchronously.
#[test]
fn simple_multi_gpu_md1_md2() {
    on_two_devices(env!("CARGO_BIN_EXE_simple_multi_gpu"));
}

/// MD1: one host thread per device, synchronous copies and a kernel on each device's legacy
/// stream.
#[test]
fn cuda_open_mp_md1_st4() {
    on_two_devices(env!("CARGO_BIN_EXE_cuda_open_mp"));
}

/// MD2, HM6: a kernel on one device reads another device's stream-ordered memory after a
/// cross-device event wait, and that memory is freed on the reading device's stream.
#[test]
fn stream_ordered_allocation_p2p_md2_hm6() {
    on_two_devices(env!("CARGO_BIN_EXE_stream_ordered_allocation_p2p"));
}

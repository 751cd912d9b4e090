//! The memory samples (issue 19): each port runs as a user would run it, on the host backend
//! (two-device ones on `host:2x`) and on CUDA when a GPU is present.

mod common;

use common::{cuda_count, cuda_present, run_sample};

fn on_every_backend(exe: &str, args: &[&str]) {
    run_sample(exe, "host", args, &[]);
    if cuda_present() {
        run_sample(exe, "cuda:0", args, &[]);
    }
}

fn on_two_devices(exe: &str, args: &[&str]) {
    run_sample(exe, "host:2x", args, &[]);
    if cuda_count() >= 2 {
        run_sample(exe, "cuda:0,cuda:1", args, &[]);
    } else {
        eprintln!("SKIP cuda: fewer than two GPUs");
    }
}

#[test]
fn simple_zero_copy_allocated_mapped() {
    on_every_backend(env!("CARGO_BIN_EXE_simple_zero_copy"), &[]);
}

#[test]
fn simple_zero_copy_registered_mapped() {
    on_every_backend(
        env!("CARGO_BIN_EXE_simple_zero_copy"),
        &["--use_generic_memory"],
    );
}

#[test]
fn simple_streams_registered_memory() {
    on_every_backend(env!("CARGO_BIN_EXE_simple_streams"), &[]);
}

#[test]
fn simple_streams_pinned_memory_and_sync_methods() {
    let exe = env!("CARGO_BIN_EXE_simple_streams");
    on_every_backend(exe, &["--use_cuda_malloc_host", "--sync_method=0"]);
    run_sample(
        exe,
        "host",
        &["--use_generic_memory", "--sync_method=1"],
        &[],
    );
}

#[test]
fn stream_ordered_allocation_release_threshold_and_statistics() {
    on_every_backend(env!("CARGO_BIN_EXE_stream_ordered_allocation"), &[]);
}

#[test]
fn simple_p2p_kernels_read_the_peers_memory() {
    on_two_devices(env!("CARGO_BIN_EXE_simple_p2p"), &[]);
}

#[test]
fn simple_callback_portable_memory_over_devices() {
    on_two_devices(env!("CARGO_BIN_EXE_simple_callback"), &[]);
    on_every_backend(env!("CARGO_BIN_EXE_simple_callback"), &[]);
}

#[test]
fn unified_memory_streams_managed_memory_attach_and_threads() {
    on_every_backend(env!("CARGO_BIN_EXE_unified_memory_streams"), &[]);
}

/// HK1: every memory sample runs on the host backend from its CUDA C kernels alone
/// (`CUEFLOW_HOST_KERNELS=c`). Launches over registered memory (`--use_generic_memory`,
/// simpleStreams' default) run in the program's process (HK3 cannot isolate the program's own
/// pages: docs/host-cuda-c.md); the rest run in the kernel worker process.
#[test]
fn hk1_memory_samples_from_cuda_c_on_the_host() {
    use common::run_sample_c;
    let zero_copy = env!("CARGO_BIN_EXE_simple_zero_copy");
    run_sample_c(zero_copy, "host", &[]);
    run_sample_c(zero_copy, "host", &["--use_generic_memory"]);
    run_sample_c(env!("CARGO_BIN_EXE_simple_streams"), "host", &[]);
    run_sample_c(
        env!("CARGO_BIN_EXE_simple_streams"),
        "host",
        &["--use_cuda_malloc_host", "--sync_method=0"],
    );
    run_sample_c(env!("CARGO_BIN_EXE_stream_ordered_allocation"), "host", &[]);
    run_sample_c(env!("CARGO_BIN_EXE_simple_p2p"), "host:2x", &[]);
    run_sample_c(
        env!("CARGO_BIN_EXE_stream_ordered_allocation_p2p"),
        "host:2x",
        &[],
    );
    run_sample_c(env!("CARGO_BIN_EXE_simple_callback"), "host:2x", &[]);
}

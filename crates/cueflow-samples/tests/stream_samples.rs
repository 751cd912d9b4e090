//! The stream samples — asyncAPI, concurrentKernels, simpleHyperQ, StreamPriorities,
//! simpleMultiCopy — run as a user runs them: on the host backend always, on the first GPU
//! when present. Each binary checks what the original checks (results exact; on a GPU also the
//! concurrency, priority or overlap the original demonstrates) and exits non-zero otherwise.
//! Rules exercised: ST1–ST4 (legacy stream and blocking streams), ST7 (priorities), CP2
//! (asynchronous copies through pinned memory), EV4 (`wait_event`), EV6 (timing), EV7
//! (timing-off events), ST8/EV5 (event polling), DV1 (clock rate, compute capability,
//! `concurrentKernels`), KC1 (`cooperative_groups.h`), KC2 (`Kernel::prepare`).

mod common;

use common::{cuda_present, run_sample};

fn both(exe: &str, args: &[&str]) {
    let out = run_sample(exe, "host", args, &[]);
    print!("{out}");
    if cuda_present() {
        let out = run_sample(exe, "cuda:0", args, &[]);
        print!("{out}");
    }
}

#[test]
fn async_api_st3_ev5_ev6() {
    both(env!("CARGO_BIN_EXE_async_api"), &[]);
}

#[test]
fn concurrent_kernels_ev4_ev7_dv1() {
    both(env!("CARGO_BIN_EXE_concurrent_kernels"), &[]);
}

/// A smaller run on the host too: one stream, and an odd count past one warp's reach.
#[test]
fn concurrent_kernels_other_counts() {
    let exe = env!("CARGO_BIN_EXE_concurrent_kernels");
    for n in ["--nkernels=1", "--nkernels=3"] {
        run_sample(exe, "host", &[n], &[]);
    }
}

#[test]
fn simple_hyper_q_st4_dv1() {
    both(env!("CARGO_BIN_EXE_simple_hyper_q"), &[]);
}

/// More counts than the sum kernel's 32 threads, and a single stream.
#[test]
fn simple_hyper_q_other_counts() {
    let exe = env!("CARGO_BIN_EXE_simple_hyper_q");
    for n in ["--nstreams=1", "--nstreams=40"] {
        run_sample(exe, "host", &[n], &[]);
    }
}

#[test]
fn stream_priorities_st7_ev6() {
    both(env!("CARGO_BIN_EXE_stream_priorities"), &[]);
}

#[test]
fn simple_multi_copy_cp2_st4_ev5() {
    both(env!("CARGO_BIN_EXE_simple_multi_copy"), &[]);
}

/// HK1: every stream sample runs on the host backend from its CUDA C kernels alone
/// (`CUEFLOW_HOST_KERNELS=c`; `clock()`/`clock64()` tick at the host device's clock rate,
/// cooperative groups from the prelude).
#[test]
fn hk1_stream_samples_from_cuda_c_on_the_host() {
    use common::run_sample_c;
    run_sample_c(env!("CARGO_BIN_EXE_async_api"), "host", &[]);
    run_sample_c(env!("CARGO_BIN_EXE_concurrent_kernels"), "host", &[]);
    run_sample_c(
        env!("CARGO_BIN_EXE_concurrent_kernels"),
        "host",
        &["--nkernels=3"],
    );
    run_sample_c(env!("CARGO_BIN_EXE_simple_hyper_q"), "host", &[]);
    run_sample_c(env!("CARGO_BIN_EXE_stream_priorities"), "host", &[]);
    run_sample_c(env!("CARGO_BIN_EXE_simple_multi_copy"), "host", &[]);
    run_sample_c(
        env!("CARGO_BIN_EXE_simple_hyper_q"),
        "host",
        &["--nstreams=40"],
    );
}

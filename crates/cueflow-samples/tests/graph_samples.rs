//! The graph samples (issue 20: GR8–GR11), each run as a user would: on the host backend
//! always, on CUDA when a GPU is present.

mod common;

use common::{cuda_present, run_sample};

fn on_every_backend(exe: &str, args: &[&str]) {
    run_sample(exe, "host", args, &[]);
    if cuda_present() {
        run_sample(exe, "cuda:0", args, &[]);
    }
}

/// simpleCudaGraphs: a graph built node by node and one captured from three streams, each
/// cloned and launched (GR8, GR1, GR3); every launch's host node sees the right sum.
#[test]
fn simple_cuda_graphs() {
    on_every_backend(env!("CARGO_BIN_EXE_simple_cuda_graphs"), &[]);
}

/// jacobiCudaGraphs: kernel node arguments set per launch on a built graph (GR8, GR6), a
/// captured graph updated per iteration (GR6), and plain streams — all three methods, each
/// also alone as the original's `-gpumethod` runs it.
#[test]
fn jacobi_cuda_graphs() {
    let exe = env!("CARGO_BIN_EXE_jacobi_cuda_graphs");
    let out = run_sample(exe, "host", &[], &[]);
    assert_eq!(out.matches("GPU error").count(), 3, "{out}");
    for m in ["-gpumethod=0", "-gpumethod=1", "-gpumethod=2"] {
        let out = run_sample(exe, "host", &[m], &[]);
        assert_eq!(out.matches("GPU error").count(), 1, "{out}");
    }
    if cuda_present() {
        run_sample(exe, "cuda:0", &[], &[]);
    }
}

/// graphMemoryNodes, all six parts: stream-ordered allocation on two streams, a captured and a
/// built graph with memory nodes (GR7, GR8), and the result handed out by the graph (GR10) and
/// freed after the launch, by a stream, and by another graph's free node.
#[test]
fn graph_memory_nodes() {
    on_every_backend(env!("CARGO_BIN_EXE_graph_memory_nodes"), &[]);
}

/// graphMemoryFootprint, all four parts: graph memory reused within a graph and across graphs
/// on one stream, not across streams running at once, kept while handed out (GR10), with the
/// footprint and trims of GR12; each graph's allocation has its own address (its check).
#[test]
fn graph_memory_footprint() {
    on_every_backend(env!("CARGO_BIN_EXE_graph_memory_footprint"), &[]);
}

/// graphConditionalNodes, all five graphs: if, do-while (body captured), a while loop added
/// to a capture, if/else and switch (GR9); each launch's kernels are checked by name.
#[test]
fn graph_conditional_nodes() {
    on_every_backend(env!("CARGO_BIN_EXE_graph_conditional_nodes"), &[]);
}

/// HK1: every graph sample runs on the host backend from its CUDA C kernels alone
/// (`CUEFLOW_HOST_KERNELS=c`; `cudaGraphSetConditional` from the prelude for the conditional
/// nodes, GR9).
#[test]
fn hk1_graph_samples_from_cuda_c_on_the_host() {
    use common::run_sample_c;
    run_sample_c(env!("CARGO_BIN_EXE_simple_cuda_graphs"), "host", &[]);
    // One method (3.5 s from C on 2 cores; the three of the default run take 11 s).
    run_sample_c(
        env!("CARGO_BIN_EXE_jacobi_cuda_graphs"),
        "host",
        &["-gpumethod=0"],
    );
    run_sample_c(env!("CARGO_BIN_EXE_graph_memory_nodes"), "host", &[]);
    run_sample_c(env!("CARGO_BIN_EXE_graph_conditional_nodes"), "host", &[]);
}

/// cudaGraphsPerfScaling: capture, instantiation, first and repeat launches in an idle and a
/// busy stream, and an upload off the critical path, of a fork/join graph of empty kernels;
/// the busy stream is held by a kernel that spins on a `HostFlag` the host sets (HM7), and the
/// port checks that the flag releases it, and each graph's kernel count. The default run and
/// one of 4 chains with a root node, averaged over two lengths.
#[test]
fn graphs_perf_scaling() {
    let exe = env!("CARGO_BIN_EXE_graphs_perf_scaling");
    on_every_backend(exe, &[]);
    on_every_backend(exe, &["5", "2", "10", "4", "1", "10", "20"]);
}

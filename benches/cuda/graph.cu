// Raw CUDA graph reference: N tiny kernels launched one by one against the same N kernels
// replayed as one graph, per kernel, so that cueflow's graph replay can be compared with the
// runtime's in the same run on the same machine (`cueflow bench` prints both).
//
// Measured (each the median over `reps` timed repetitions after `warmup` untimed ones; device
// time between two events recorded on the launching stream, divided by N):
//   individual  N x cf_empty<<<1,1,0,s>>>()
//   graph       one cudaGraphLaunch of a graph of N cf_empty nodes in a chain (stream capture)
//   graph_nodes the same chain built node by node with cudaGraphAddKernelNode (as cueflow does)
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o graph graph.cu
// Usage:  graph [--nodes N] [--reps R]
// Output: a table and one line per measurement:
//   RESULT graph name=<individual|graph> nodes=N us_per_kernel=<median> min=<..> max=<..>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return (v.size() % 2) ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int main(int argc, char** argv)
{
    int nodes = 1000, reps = 21, warmup = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--nodes")) nodes = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: graph [--nodes N] [--reps R]\n");
            return 2;
        }
    }
    CK(cudaSetDevice(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));

    // The graph: N empty kernels captured on `s` (a chain, as stream capture makes it).
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < nodes; ++i) cf_empty<<<1, 1, 0, s>>>();
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiateWithFlags(&exec, graph, 0));

    // The same chain built with the node API.
    cudaGraph_t graph2;
    cudaGraphExec_t exec2;
    CK(cudaGraphCreate(&graph2, 0));
    cudaGraphNode_t prev = nullptr;
    for (int i = 0; i < nodes; ++i) {
        cudaKernelNodeParams p = {};
        p.func = reinterpret_cast<void*>(&cf_empty);
        p.gridDim = dim3(1);
        p.blockDim = dim3(1);
        p.kernelParams = nullptr;
        cudaGraphNode_t n;
        CK(cudaGraphAddKernelNode(&n, graph2, prev ? &prev : nullptr, prev ? 1 : 0, &p));
        prev = n;
    }
    CK(cudaGraphInstantiateWithFlags(&exec2, graph2, 0));

    auto time = [&](cudaGraphExec_t as_graph) {
        std::vector<double> v;
        for (int r = 0; r < warmup + reps; ++r) {
            CK(cudaEventRecord(a, s));
            if (as_graph) {
                CK(cudaGraphLaunch(as_graph, s));
            } else {
                for (int i = 0; i < nodes; ++i) cf_empty<<<1, 1, 0, s>>>();
                CK(cudaGetLastError());
            }
            CK(cudaEventRecord(b, s));
            CK(cudaEventSynchronize(b));
            float ms = 0.0f;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (r >= warmup) v.push_back(ms * 1000.0 / nodes);
        }
        return v;
    };
    std::vector<double> ind = time(nullptr), gr = time(exec), gr2 = time(exec2);
    std::printf("# cueflow CUDA reference: %d empty kernels, launched one by one vs one graph\n",
                nodes);
    for (auto& [name, v] : {std::make_pair("individual", ind), std::make_pair("graph", gr),
                            std::make_pair("graph_nodes", gr2)}) {
        std::printf("RESULT graph name=%s nodes=%d us_per_kernel=%.4f min=%.4f max=%.4f\n", name,
                    nodes, median(v), *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()));
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaGraphExecDestroy(exec2));
    CK(cudaGraphDestroy(graph2));
    CK(cudaStreamDestroy(s));
    return 0;
}

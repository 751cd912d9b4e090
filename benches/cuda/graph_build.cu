// Raw CUDA reference for graphs built node by node and conditional nodes (issue 20), to set
// beside cueflow's `graph_build` example in the same run on the same machine:
//   instantiate   host time of cudaGraphInstantiate for a chain of N cf_empty kernel nodes
//                 built with cudaGraphAddKernelNode (median, microseconds)
//   build_instantiate  host time of building that chain (cudaGraphCreate, N
//                 cudaGraphAddKernelNode) and instantiating it, together
//   replay        device time of one launch of that graph per node (events on the stream)
//   while_iter    a graph holding one while node whose body is one kernel that counts to N
//                 and then clears the condition: device time per iteration
//   body_launches the same body (one kernel) captured as its own graph and launched N times
//                 from the host: device time per launch
// Each is the median over `reps` timed repetitions after `warmup` untimed ones. Needs CUDA
// 12.4+ (conditional nodes).
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o graph_build graph_build.cu
// Usage:  graph_build [--nodes N] [--reps R]
// Output: RESULT graph_build name=<..> nodes=N us=<median> min=<..> max=<..>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"

// One loop iteration: count, and clear the condition when the count reaches `n`.
extern "C" __global__ void gb_loop_step(unsigned int* count, cudaGraphConditionalHandle h,
                                        unsigned int n)
{
    if (++count[0] >= n) cudaGraphSetConditional(h, 0);
}

// The same step without a condition (the captured body launched from the host).
extern "C" __global__ void gb_step(unsigned int* count) { ++count[0]; }

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return (v.size() % 2) ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

static void result(const char* name, int nodes, const std::vector<double>& v)
{
    std::printf("RESULT graph_build name=%s nodes=%d us=%.4f min=%.4f max=%.4f\n", name, nodes,
                median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
}

int main(int argc, char** argv)
{
    int nodes = 1000, reps = 21, warmup = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--nodes")) nodes = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: graph_build [--nodes N] [--reps R]\n");
            return 2;
        }
    }
    CK(cudaSetDevice(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    auto device_us = [&](auto&& enqueue, double per) {
        std::vector<double> v;
        for (int r = 0; r < warmup + reps; ++r) {
            CK(cudaEventRecord(a, s));
            enqueue();
            CK(cudaEventRecord(b, s));
            CK(cudaEventSynchronize(b));
            float ms = 0.0f;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (r >= warmup) v.push_back(ms * 1000.0 / per);
        }
        return v;
    };

    // A chain of N kernel nodes, built node by node.
    auto build = [&] {
        cudaGraph_t g;
        CK(cudaGraphCreate(&g, 0));
        cudaGraphNode_t prev = nullptr;
        for (int i = 0; i < nodes; ++i) {
            cudaKernelNodeParams p = {};
            p.func = reinterpret_cast<void*>(&cf_empty);
            p.gridDim = dim3(1);
            p.blockDim = dim3(1);
            cudaGraphNode_t n;
            CK(cudaGraphAddKernelNode(&n, g, prev ? &prev : nullptr, prev ? 1 : 0, &p));
            prev = n;
        }
        return g;
    };
    cudaGraph_t chain = build();
    // Building and instantiating together: what a graph built node by node costs before its
    // first launch (cueflow's instantiate builds the driver's graph from its own nodes).
    std::vector<double> both;
    for (int r = 0; r < warmup + reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        cudaGraph_t g = build();
        cudaGraphExec_t e;
        CK(cudaGraphInstantiateWithFlags(&e, g, 0));
        auto t1 = std::chrono::steady_clock::now();
        if (r >= warmup) both.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        CK(cudaGraphExecDestroy(e));
        CK(cudaGraphDestroy(g));
    }
    result("build_instantiate", nodes, both);
    std::vector<double> inst;
    cudaGraphExec_t exec = nullptr;
    for (int r = 0; r < warmup + reps; ++r) {
        if (exec) CK(cudaGraphExecDestroy(exec));
        auto t0 = std::chrono::steady_clock::now();
        CK(cudaGraphInstantiateWithFlags(&exec, chain, 0));
        auto t1 = std::chrono::steady_clock::now();
        if (r >= warmup) inst.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    result("instantiate", nodes, inst);
    result("replay", nodes, device_us([&] { CK(cudaGraphLaunch(exec, s)); }, nodes));

    // A while node of one kernel, N iterations.
    unsigned int* count;
    CK(cudaMalloc(&count, sizeof(unsigned int)));
    cudaGraph_t loop;
    CK(cudaGraphCreate(&loop, 0));
    cudaGraphConditionalHandle h;
    CK(cudaGraphConditionalHandleCreate(&h, loop, 1, cudaGraphCondAssignDefault));
    cudaGraphNode_t reset;
    cudaMemsetParams m = {};
    m.dst = count;
    m.value = 0;
    m.elementSize = 4;
    m.width = 1;
    m.height = 1;
    CK(cudaGraphAddMemsetNode(&reset, loop, nullptr, 0, &m));
    cudaGraphNodeParams cp = {cudaGraphNodeTypeConditional};
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    cudaGraphNode_t cond;
    CK(cudaGraphAddNode(&cond, loop, &reset, nullptr, 1, &cp));
    {
        unsigned int n = nodes;
        void* args[3] = {&count, &h, &n};
        cudaKernelNodeParams p = {};
        p.func = reinterpret_cast<void*>(&gb_loop_step);
        p.gridDim = dim3(1);
        p.blockDim = dim3(1);
        p.kernelParams = args;
        cudaGraphNode_t k;
        CK(cudaGraphAddKernelNode(&k, cp.conditional.phGraph_out[0], nullptr, 0, &p));
    }
    cudaGraphExec_t loop_exec;
    CK(cudaGraphInstantiateWithFlags(&loop_exec, loop, 0));
    result("while_iter", nodes, device_us([&] { CK(cudaGraphLaunch(loop_exec, s)); }, nodes));
    unsigned int got = 0;
    CK(cudaMemcpy(&got, count, sizeof got, cudaMemcpyDeviceToHost));
    if (got != (unsigned int)nodes) {
        std::fprintf(stderr, "while loop counted %u, expected %d\n", got, nodes);
        return 1;
    }

    // The body captured as its own graph, launched N times from the host.
    cudaGraph_t body;
    cudaGraphExec_t body_exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    gb_step<<<1, 1, 0, s>>>(count);
    CK(cudaStreamEndCapture(s, &body));
    CK(cudaGraphInstantiateWithFlags(&body_exec, body, 0));
    result("body_launches", nodes, device_us([&] {
               for (int i = 0; i < nodes; ++i) CK(cudaGraphLaunch(body_exec, s));
           }, nodes));
    // The same launches timed on the host: what enqueuing one costs the calling thread.
    std::vector<double> host;
    for (int r = 0; r < warmup + reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < nodes; ++i) CK(cudaGraphLaunch(body_exec, s));
        auto t1 = std::chrono::steady_clock::now();
        CK(cudaStreamSynchronize(s));
        if (r >= warmup)
            host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / nodes);
    }
    result("body_launches_host", nodes, host);

    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphExecDestroy(loop_exec));
    CK(cudaGraphExecDestroy(body_exec));
    CK(cudaGraphDestroy(chain));
    CK(cudaGraphDestroy(loop));
    CK(cudaGraphDestroy(body));
    CK(cudaFree(count));
    CK(cudaStreamDestroy(s));
    return 0;
}

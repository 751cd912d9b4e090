// Stress of the two driver paths automatic graphs and dropped graphs use while a launch is still
// running, in raw CUDA C++ (known-gaps.md: an unexplained `Xid 13 ... SKEDCHECK22_INVALIDATE_
// ACTIVE_QMD` fault in long differential-fuzzer runs with automatic graphs on):
//
//   destroy  capture a fork/join graph of kernels over two streams, instantiate it, launch it,
//            and destroy the exec and the graph at once, while the launch runs (the driver frees
//            them "asynchronously on completion"), over and over;
//   update   one exec of the same graph, its kernel nodes given a new scalar
//            (cudaGraphExecKernelNodeSetParams) before every launch, while the launches before
//            it still run.
//
// Every kernel adds its scalar to every element of one buffer; at each synchronization (every
// 256 iterations) the buffer must hold what the launches added (exact: small integers in
// floats). Exit 1 on any error or wrong value.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o exec_inflight_stress exec_inflight_stress.cu
// Usage:  exec_inflight_stress <destroy|update> [seconds (default 60)]
// Output: RESULT exec_inflight_stress mode=<mode> iterations=<n> seconds=<s> ok

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

static const int N = 256;
static const int NODES = 6; // kernels per graph: two per branch, one fork, one join

extern "C" __global__ void stress_add(float* p, float v, long long spin)
{
    long long start = clock64();
    while (clock64() - start < spin) {
    }
    p[threadIdx.x] += v;
}

int main(int argc, char** argv)
{
    const char* mode = argc > 1 ? argv[1] : "destroy";
    double seconds = argc > 2 ? std::atof(argv[2]) : 60.0;
    bool destroy = std::strcmp(mode, "destroy") == 0;
    if (!destroy && std::strcmp(mode, "update") != 0) {
        std::fprintf(stderr, "usage: exec_inflight_stress <destroy|update> [seconds]\n");
        return 2;
    }
    cudaStream_t s[2];
    for (auto& x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    float *a, *b;
    CK(cudaMalloc(&a, N * sizeof(float)));
    CK(cudaMalloc(&b, N * sizeof(float)));
    CK(cudaMemset(a, 0, N * sizeof(float)));
    CK(cudaMemset(b, 0, N * sizeof(float)));
    const long long spin = 20000; // ~10 us a kernel at ~2 GHz

    // The graph: s0 adds v to a, forks s1; each stream adds twice (a on s0, b on s1); s0 joins
    // s1 and adds v to b. Per launch: a += 3v, b += 3v.
    auto capture = [&](float v) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal));
        stress_add<<<1, N, 0, s[0]>>>(a, v, spin);
        CK(cudaEventRecord(fork, s[0]));
        CK(cudaStreamWaitEvent(s[1], fork, 0));
        stress_add<<<1, N, 0, s[0]>>>(a, v, spin);
        stress_add<<<1, N, 0, s[1]>>>(b, v, spin);
        stress_add<<<1, N, 0, s[0]>>>(a, v, spin);
        stress_add<<<1, N, 0, s[1]>>>(b, v, spin);
        CK(cudaEventRecord(join, s[1]));
        CK(cudaStreamWaitEvent(s[0], join, 0));
        stress_add<<<1, N, 0, s[0]>>>(b, v, spin);
        CK(cudaStreamEndCapture(s[0], &g));
        return g;
    };
    cudaGraph_t kept = capture(1.0f);
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, kept, 0));
    size_t count = 0;
    CK(cudaGraphGetNodes(kept, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CK(cudaGraphGetNodes(kept, nodes.data(), &count));
    std::vector<cudaGraphNode_t> kernels;
    for (auto n : nodes) {
        cudaGraphNodeType t;
        CK(cudaGraphNodeGetType(n, &t));
        if (t == cudaGraphNodeTypeKernel) kernels.push_back(n);
    }
    if (kernels.size() != NODES) {
        std::fprintf(stderr, "expected %d kernel nodes, found %zu\n", NODES, kernels.size());
        return 1;
    }

    double expect = 0.0; // what each element of a and of b holds
    std::vector<float> host(N);
    auto check = [&](long it) {
        CK(cudaStreamSynchronize(s[0]));
        CK(cudaStreamSynchronize(s[1]));
        for (float* p : {a, b}) {
            CK(cudaMemcpy(host.data(), p, N * sizeof(float), cudaMemcpyDeviceToHost));
            for (int i = 0; i < N; ++i) {
                if (host[i] != (float)expect) {
                    std::fprintf(stderr, "iteration %ld: element %d is %f, expected %f\n", it, i,
                                 host[i], expect);
                    std::exit(1);
                }
            }
        }
        // Keep the values small and exact.
        CK(cudaMemset(a, 0, N * sizeof(float)));
        CK(cudaMemset(b, 0, N * sizeof(float)));
        expect = 0.0;
    };
    auto t0 = std::chrono::steady_clock::now();
    long it = 0;
    for (;; ++it) {
        double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (elapsed >= seconds) break;
        float v = (float)(1 + it % 3);
        if (destroy) {
            cudaGraph_t g = capture(v);
            cudaGraphExec_t e;
            CK(cudaGraphInstantiate(&e, g, 0));
            CK(cudaGraphLaunch(e, s[0]));
            CK(cudaGraphExecDestroy(e)); // while it runs
            CK(cudaGraphDestroy(g));
        } else {
            for (auto n : kernels) {
                cudaKernelNodeParams p;
                CK(cudaGraphKernelNodeGetParams(n, &p));
                void* args[3] = {p.kernelParams[0], &v, p.kernelParams[2]};
                p.kernelParams = args;
                CK(cudaGraphExecKernelNodeSetParams(exec, n, &p)); // while earlier launches run
            }
            CK(cudaGraphLaunch(exec, s[0]));
        }
        expect += 3.0 * v;
        CK(cudaPeekAtLastError());
        if (it % 256 == 255) check(it);
    }
    check(it);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(kept));
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("RESULT exec_inflight_stress mode=%s iterations=%ld seconds=%.1f ok\n", mode, it,
                elapsed);
    return 0;
}

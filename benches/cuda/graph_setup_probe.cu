// Whether how a program sets up its context, stream, kernel and graph decides the device time
// of a launch-bound graph (1,000 one-block cf_scale_f32 nodes, `auto_graph.cu`'s tiny graph):
// the raw program's takes ~877 µs until its fork/join program ran and ~1,050 µs after
// (`graph_after_launches_probe.cu`), cueflow's ~877 µs in a fresh process and ~1,055 µs in the
// example's rounds. Each variant
// builds the graph its way in a fresh process and prints the device time of its launches
// (events around one launch, median of 21 after 5 warm-up launches).
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o graph_setup_probe graph_setup_probe.cu \
//           -lcuda -lnvrtc
// Usage:  graph_setup_probe VARIANT   (one per process; see `main` for the list)
// Output: SETUP <variant> graph_gpu_us=<median>

#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"
#include "graph_timing.h"

static const int KERNELS = 1000;
static const unsigned long long N = 256;

#define CU(call)                                                                               \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                              \
            const char* n_ = nullptr;                                                          \
            cuGetErrorName(r_, &n_);                                                           \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, n_);     \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

// cf_scale_f32 compiled at run time by NVRTC to a cubin for sm_90, as cueflow builds its
// built-in kernels.
static CUfunction nvrtc_scale()
{
    const char* src = "extern \"C\" __global__ void cf_scale_f32(float* d, float f, "
                      "unsigned long long n) { unsigned long long i = blockIdx.x * "
                      "(unsigned long long)blockDim.x + threadIdx.x; if (i < n) d[i] *= f; }";
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, src, "scale.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) std::exit(1);
    const char* opts[] = {"--gpu-architecture=sm_90"};
    if (nvrtcCompileProgram(p, 1, opts) != NVRTC_SUCCESS) {
        std::fprintf(stderr, "nvrtc compile failed\n");
        std::exit(1);
    }
    size_t n = 0;
    nvrtcGetCUBINSize(p, &n);
    std::vector<char> cubin(n);
    nvrtcGetCUBIN(p, cubin.data());
    CUmodule m;
    CU(cuModuleLoadData(&m, cubin.data()));
    CUfunction f;
    CU(cuModuleGetFunction(&f, m, "cf_scale_f32"));
    return f;
}

int main(int argc, char** argv)
{
    const std::string v = argc > 1 ? argv[1] : "base";
    if (v == "spin") CK(cudaSetDeviceFlags(cudaDeviceScheduleSpin));
    if (v == "blocking_sync") CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    cudaStream_t s, c;
    if (v == "prio_high" || v == "prio_low") {
        int lo = 0, hi = 0;
        CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        int p = v == "prio_high" ? hi : lo;
        CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, p));
        CK(cudaStreamCreateWithPriority(&c, cudaStreamNonBlocking, p));
    } else if (v == "blocking_streams") {
        CK(cudaStreamCreate(&s));
        CK(cudaStreamCreate(&c));
    } else {
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    }
    // `extra_streams` (and `es_*`): more streams, each created and used once, as a library's
    // helper streams would be: `es_create` eight created only, `es_record` each records an
    // event, `extra_streams` and `es_then_fork` the graph's stream waits for each record too,
    // `es_wait1` one such stream, `es_wait16` sixteen, `es_n N` N created only, `es_after` eight after the
    // instantiation; `wait_other`: the graph's stream waits for a record of the capture stream.
    // `*_then_fork`: measured again after what moves the raw program into its slower state.
    auto extra = [&](int count, bool record, bool wait) {
        for (int i = 0; i < count; ++i) {
            cudaStream_t o;
            CK(cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking));
            cudaEvent_t e;
            CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            if (record) CK(cudaEventRecord(e, o));
            if (wait) CK(cudaStreamWaitEvent(s, e, 0));
        }
    };
    if (v == "extra_streams" || v == "es_then_fork") extra(8, true, true);
    if (v == "es_create") extra(8, false, false);
    if (v == "es_record") extra(8, true, false);
    if (v == "es_wait1") extra(1, true, true);
    if (v == "es_wait16") extra(16, true, true);
    if (v == "es_n") extra(argc > 2 ? std::atoi(argv[2]) : 0, false, false);
    if (v == "wait_other") {
        // The graph's stream waits for a record of the capture stream (no new stream).
        cudaEvent_t e;
        CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        CK(cudaEventRecord(e, c));
        CK(cudaStreamWaitEvent(s, e, 0));
    }
    float* d;
    CK(cudaMalloc(&d, N * sizeof(float)));
    CK(cudaMemset(d, 0, N * sizeof(float)));
    float f = 1.0f;
    unsigned long long n = N;
    void* params[] = {&d, &f, &n};
    cudaGraph_t g;
    if (v == "nodes" || v == "nvrtc_nodes") {
        // Built node by node with the driver API, each depending on the one before.
        CU(cuGraphCreate(&g, 0));
        CUfunction fn;
        if (v == "nvrtc_nodes") fn = nvrtc_scale();
        else CK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&fn), (void*)cf_scale_f32));
        CUDA_KERNEL_NODE_PARAMS kp;
        std::memset(&kp, 0, sizeof kp);
        kp.func = fn;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = 256;
        kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = params;
        CUgraphNode prev = nullptr;
        for (int k = 0; k < KERNELS; ++k) {
            CUgraphNode node;
            CU(cuGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &kp));
            prev = node;
        }
    } else {
        CUfunction fn = nullptr;
        if (v == "nvrtc") fn = nvrtc_scale();
        CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < KERNELS; ++k) {
            if (fn) CU(cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, c, params, nullptr));
            else cf_scale_f32<<<1, 256, 0, c>>>(d, 1.0f, N);
        }
        CK(cudaStreamEndCapture(c, &g));
    }
    cudaGraphExec_t exec;
    unsigned long long flags = v == "autofree" ? cudaGraphInstantiateFlagAutoFreeOnLaunch : 0;
    CK(cudaGraphInstantiateWithFlags(&exec, g, flags));
    if (v == "upload") CK(cudaGraphUpload(exec, s));
    if (v == "es_after") extra(8, true, true);
    if (std::getenv("PROBE_LAUNCH_ON_CAPTURE_STREAM")) s = c; // the stream it was captured on
    auto gpu_us = [&]() { return graph_launch_gpu_us(exec, s, 21, 5); };
    double first = gpu_us();
    if (v == "es_then_fork" || v == "base_then_fork") {
        // What moves the raw program into its slower state (graph_after_launches_probe.cu):
        // 1,000 plain launches on the graph's stream, then a fork into three streams running
        // kernels at once, joined back.
        for (int k = 0; k < KERNELS; ++k) cf_scale_f32<<<1, 256, 0, s>>>(d, 1.0f, N);
        CK(cudaStreamSynchronize(s));
        float* x;
        CK(cudaMalloc(&x, 4 * 4096 * sizeof(float)));
        CK(cudaMemset(x, 0, 4 * 4096 * sizeof(float)));
        cudaEvent_t ev[4];
        cudaStream_t st[4] = {s, 0, 0, 0};
        for (int i = 0; i < 4; ++i) {
            if (i > 0) CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
            CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
        }
        CK(cudaEventRecord(ev[0], s));
        for (int i = 1; i < 4; ++i) {
            CK(cudaStreamWaitEvent(st[i], ev[0], 0));
            cf_scale_f32<<<16, 256, 0, st[i]>>>(x + i * 4096, 1.0f, 4096);
            cf_scale_f32<<<16, 256, 0, st[i]>>>(x + i * 4096, 1.0f, 4096);
            CK(cudaEventRecord(ev[i], st[i]));
            CK(cudaStreamWaitEvent(s, ev[i], 0));
        }
        CK(cudaStreamSynchronize(s));
        std::printf("SETUP %s before_fork graph_gpu_us=%.1f\n", v.c_str(), first);
        first = gpu_us();
    }
    std::vector<float> back(N);
    CK(cudaMemcpy(back.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (float x : back) {
        if (x != 0.0f) {
            std::fprintf(stderr, "wrong value %f\n", x);
            return 1;
        }
    }
    std::printf("SETUP %s graph_gpu_us=%.1f\n", v.c_str(), first);
    return 0;
}

// Raw CUDA reference for cueflow's graphs_perf_scaling sample (crates/cueflow-samples): the same
// steps over the same fork/join graph of empty kernels, timed the same way and printed in the
// same CSV columns (averaged over trials, as the sample's output format 5), so that
// scripts/gpu-graph-scaling.sh can set cueflow and raw CUDA side by side in one run.
//
// The graph: `width` chains of `length` empty kernels, forked from stream 0 by an event and
// joined back into it (with `pattern` 1, one more kernel before the fork), captured. Per trial:
// capture; instantiate; first launch (API time, and total to a synchronize); a repeat launch;
// then, on fresh instantiations, a first and a repeat launch into a stream held by a kernel
// spinning on a latch in mapped memory that the host sets once the launch is enqueued (device
// time between two events around the launch, and whether the latch came too late); an upload
// on a second stream while both streams are held.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o graphs_perf_scaling graphs_perf_scaling.cu
// Usage:  graphs_perf_scaling TRIALS LENGTH WIDTH PATTERN STRIDE MAX_LENGTH

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

__global__ void gps_empty() {}

__global__ void gps_hold(long long timeout_ns, unsigned* timed_out, volatile unsigned* latch)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < timeout_ns && *latch == 0);
    *timed_out = *latch == 0;
}

// Mapped words the host and the holding kernels share.
struct Shared {
    unsigned latch[2];
    unsigned timed_out[2];
};

static double since_us(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

struct Bench {
    std::vector<cudaStream_t> s;
    cudaEvent_t fork, t0, t1;
    Shared* sh;

    void hold(int stream, long long ns, int which)
    {
        gps_hold<<<1, 1, 0, s[stream]>>>(ns, &sh->timed_out[which], &sh->latch[which]);
        CK(cudaGetLastError());
    }

    float device_us()
    {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        return ms * 1000.0f;
    }

    cudaGraph_t capture(int length, int width, bool root)
    {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeGlobal));
        if (root) gps_empty<<<1, 1, 0, s[0]>>>();
        CK(cudaEventRecord(fork, s[0]));
        for (int i = 1; i < width; i++) CK(cudaStreamWaitEvent(s[i], fork, 0));
        for (int i = 0; i < width; i++)
            for (int j = 0; j < length; j++) gps_empty<<<1, 1, 0, s[i]>>>();
        for (int i = 1; i < width; i++) {
            CK(cudaEventRecord(fork, s[i]));
            CK(cudaStreamWaitEvent(s[0], fork, 0));
        }
        CK(cudaStreamEndCapture(s[0], &g));
        return g;
    }

    // One trial: the metrics in the sample's order.
    std::vector<double> trial(int length, int width, bool root)
    {
        std::vector<double> m;
        auto t = std::chrono::steady_clock::now();
        cudaGraph_t g = capture(length, width, root);
        m.push_back(since_us(t));
        cudaGraphExec_t e;
        t = std::chrono::steady_clock::now();
        CK(cudaGraphInstantiate(&e, g, 0));
        m.push_back(since_us(t));
        for (int k = 0; k < 2; k++) {
            t = std::chrono::steady_clock::now();
            CK(cudaGraphLaunch(e, s[0]));
            m.push_back(since_us(t));
            CK(cudaStreamSynchronize(s[0]));
            m.push_back(since_us(t));
        }
        CK(cudaGraphExecDestroy(e));
        CK(cudaGraphInstantiate(&e, g, 0));
        const long long nodes = (long long)length * width;
        for (int k = 0; k < 2; k++) {
            hold(0, 4000 + 500 * nodes, 0);
            CK(cudaEventRecord(t0, s[0]));
            CK(cudaGraphLaunch(e, s[0]));
            CK(cudaEventRecord(t1, s[0]));
            sh->latch[0] = 1;
            CK(cudaStreamSynchronize(s[0]));
            m.push_back(device_us());
            m.push_back(sh->timed_out[0]);
            sh->latch[0] = 0;
        }
        CK(cudaGraphExecDestroy(e));
        CK(cudaGraphInstantiate(&e, g, 0));
        hold(0, 4000 + 1000 * nodes, 1);
        hold(1, 2000 + 500 * nodes, 0);
        gps_empty<<<1, 1, 0, s[1]>>>();
        CK(cudaEventRecord(t0, s[0]));
        t = std::chrono::steady_clock::now();
        CK(cudaGraphUpload(e, s[1]));
        double upload_api = since_us(t);
        CK(cudaEventRecord(fork, s[1]));
        CK(cudaEventRecord(t1, s[0]));
        gps_empty<<<1, 1, 0, s[1]>>>();
        sh->latch[0] = 1;
        CK(cudaStreamWaitEvent(s[0], fork, 0));
        CK(cudaGraphLaunch(e, s[0]));
        CK(cudaEventSynchronize(fork));
        sh->latch[1] = 1;
        CK(cudaStreamSynchronize(s[0]));
        m.push_back(upload_api);
        m.push_back(device_us());
        m.push_back(sh->timed_out[0]);
        sh->latch[0] = sh->latch[1] = 0;
        CK(cudaGraphExecDestroy(e));
        CK(cudaGraphDestroy(g));
        return m;
    }
};

int main(int argc, char** argv)
{
    auto arg = [&](int i, int d) { return argc > i ? std::atoi(argv[i]) : d; };
    const int trials = arg(1, 1), length0 = arg(2, 20), width = arg(3, 1), pattern = arg(4, 0);
    const int stride = arg(5, 1), max_length = std::max(arg(6, length0), length0);
    if (trials < 1 || length0 < 1 || width < 1 || stride < 1 || pattern < 0 || pattern > 1) {
        std::fprintf(stderr, "usage: graphs_perf_scaling TRIALS LENGTH WIDTH PATTERN STRIDE MAX\n");
        return 2;
    }
    Bench b;
    CK(cudaFree(0));
    CK(cudaHostAlloc(&b.sh, sizeof(Shared), cudaHostAllocMapped));
    *b.sh = Shared{};
    b.s.resize(std::max(width, 2));
    for (auto& st : b.s) CK(cudaStreamCreate(&st));
    CK(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
    CK(cudaEventCreate(&b.t0));
    CK(cudaEventCreate(&b.t1));
    for (int i = 0; i < width; i++) gps_empty<<<1, 1, 0, b.s[i]>>>();
    CK(cudaStreamSynchronize(b.s[0]));
    b.trial(length0, width, pattern == 1);  // warm-up, as the sample's first trial
    std::printf("length, width, pattern, capture, instantiation, first_launch_api, "
                "first_launch_total, repeat_launch_api, repeat_launch_total, first_launch_device, "
                "blockingKernelTimeoutDetected, repeat_launch_device, "
                "blockingKernelTimeoutDetected, upload_api_time, upload_device_time, "
                "blockingKernelTimeoutDetected, \n");
    for (int length = length0; length <= max_length; length += stride) {
        std::vector<double> total;
        for (int t = 0; t < trials; t++) {
            std::vector<double> m = b.trial(length, width, pattern == 1);
            if (total.empty()) total.assign(m.size(), 0.0);
            for (size_t i = 0; i < m.size(); i++) total[i] += m[i];
        }
        std::printf("%d, %d, %d, ", length, width, pattern);
        for (double v : total) std::printf("%0.3f, ", v / trials);
        std::printf("\n");
    }
    CK(cudaFreeHost(b.sh));
    return 0;
}

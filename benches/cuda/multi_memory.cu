// Raw CUDA C++ / NCCL reference for the two-GPU memory and graph work (issue "Two GPUs"),
// measured the way crates/cueflow/examples/09_multi_memory.rs measures cueflow, so the two print
// comparable lines:
//
//   peer_read     a kernel on GPU 0 reads a buffer of GPU 1 (peer access enabled) and writes the
//                 sum of each 16-byte vector to GPU 0 memory: GB/s = bytes read / time
//   portable_h2d  one cudaHostAllocPortable buffer; GPU 0 and GPU 1 each copy all of it to their
//                 own memory at the same time, each on its own stream: GB/s = 2 * bytes / time
//   managed_p2p   a cudaMallocManaged buffer prefetched GPU 0 -> GPU 1 -> GPU 0 ...:
//                 GB/s = bytes / time of one prefetch (only where concurrentManagedAccess is 1)
//   allreduce     ncclAllReduce (sum, f32) from both GPUs' streams, `iters` calls enqueued per
//                 batch; allreduce_graph: the same `iters` calls captured once per GPU into a graph
//                 (cudaStreamBeginCapture, global mode) and launched per batch: us = time / call
//
// Every figure: 3 warm-up runs, then the median of `reps` runs timed with events (the longest
// GPU's for the two-GPU ops). Each op's result is checked; a mismatch exits 1.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -I$NCCL/include -o multi_memory multi_memory.cu \
//           -L$NCCL/lib -l:libnccl.so.2
// Usage:  multi_memory [--mib M] [--reps R] [--iters I]      (NCCL_NVLS_ENABLE=0 in the environment)
// Output: RESULT multi_memory op=<...> bytes=B us=<median> gbps=<GB/s>

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

#define NK(call)                                                                               \
    do {                                                                                       \
        ncclResult_t nk_ = (call);                                                             \
        if (nk_ != ncclSuccess) {                                                              \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                         ncclGetErrorString(nk_));                                             \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// out[i] = x + y + z + w of in[i]: every byte of `in` is read once over the bus.
__global__ void sum4(const float4* __restrict__ in, float* __restrict__ out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = in[i];
        out[i] = v.x + v.y + v.z + v.w;
    }
}

__global__ void fill(float* p, size_t n, float base)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        p[i] = base + (float)(i % 1024);
    }
}

static void result(const char* op, size_t bytes, double ms, double gb_bytes)
{
    std::printf("RESULT multi_memory op=%s bytes=%zu us=%.2f gbps=%.1f\n", op, bytes, ms * 1e3,
                gb_bytes / (ms * 1e-3) / 1e9);
}

// Time `body` on GPU 0's stream `s0` (and, for two-GPU ops, GPU 1's `s1`): events around it on
// each, the longer of the two.
template <class F>
static double time_ms(cudaStream_t s0, cudaStream_t s1, int reps, F body)
{
    cudaEvent_t a0, b0, a1, b1;
    CK(cudaSetDevice(0));
    CK(cudaEventCreate(&a0));
    CK(cudaEventCreate(&b0));
    CK(cudaSetDevice(1));
    CK(cudaEventCreate(&a1));
    CK(cudaEventCreate(&b1));
    std::vector<double> t;
    for (int r = 0; r < reps + 3; ++r) {
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(a0, s0));
        CK(cudaSetDevice(1));
        CK(cudaEventRecord(a1, s1));
        body();
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(b0, s0));
        CK(cudaSetDevice(1));
        CK(cudaEventRecord(b1, s1));
        CK(cudaEventSynchronize(b0));
        CK(cudaEventSynchronize(b1));
        float m0 = 0, m1 = 0;
        CK(cudaEventElapsedTime(&m0, a0, b0));
        CK(cudaEventElapsedTime(&m1, a1, b1));
        if (r >= 3) t.push_back(std::max(m0, m1));
    }
    CK(cudaEventDestroy(a0));
    CK(cudaEventDestroy(b0));
    CK(cudaEventDestroy(a1));
    CK(cudaEventDestroy(b1));
    return median(t);
}

int main(int argc, char** argv)
{
    size_t mib = 256;
    int reps = 11, iters = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--mib")) mib = std::strtoull(argv[i + 1], nullptr, 10);
        else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    }
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count < 2) {
        std::fprintf(stderr, "needs two GPUs, found %d\n", count);
        return 1;
    }
    const size_t bytes = mib << 20, n4 = bytes / 16, nf = bytes / 4;
    cudaStream_t s[2];
    float* dev[2];
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
        CK(cudaMalloc(&dev[d], bytes));
    }
    int failures = 0;

    // peer_read: GPU 0's kernel reads GPU 1's buffer.
    int can = 0;
    CK(cudaDeviceCanAccessPeer(&can, 0, 1));
    if (can) {
        CK(cudaSetDevice(0));
        CK(cudaDeviceEnablePeerAccess(1, 0));
        CK(cudaSetDevice(1));
        fill<<<1024, 256, 0, s[1]>>>(dev[1], nf, 1.0f);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s[1]));
        CK(cudaSetDevice(0));
        double ms = time_ms(s[0], s[1], reps, [&] {
            CK(cudaSetDevice(0));
            sum4<<<132 * 8, 256, 0, s[0]>>>(reinterpret_cast<const float4*>(dev[1]), dev[0], n4);
        });
        CK(cudaGetLastError());
        std::vector<float> got(4);
        CK(cudaMemcpy(got.data(), dev[0], 16, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 4; ++i) {
            float want = 0;
            for (int k = 0; k < 4; ++k) want += 1.0f + (float)((4 * i + k) % 1024);
            if (got[i] != want) {
                std::fprintf(stderr, "peer_read: out[%d] = %f, expected %f\n", i, got[i], want);
                ++failures;
            }
        }
        result("peer_read", bytes, ms, (double)bytes);
    } else {
        std::printf("SKIP peer_read: cudaDeviceCanAccessPeer(0, 1) = 0\n");
    }

    // portable_h2d: one portable pinned buffer, both GPUs copy all of it at once.
    float* host = nullptr;
    CK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
    for (size_t i = 0; i < nf; ++i) host[i] = (float)(i % 4096);
    {
        double ms = time_ms(s[0], s[1], reps, [&] {
            for (int d = 0; d < 2; ++d) {
                CK(cudaSetDevice(d));
                CK(cudaMemcpyAsync(dev[d], host, bytes, cudaMemcpyHostToDevice, s[d]));
            }
        });
        for (int d = 0; d < 2; ++d) {
            float last = 0;
            CK(cudaSetDevice(d));
            CK(cudaMemcpy(&last, dev[d] + nf - 1, 4, cudaMemcpyDeviceToHost));
            if (last != (float)((nf - 1) % 4096)) {
                std::fprintf(stderr, "portable_h2d: GPU %d got %f\n", d, last);
                ++failures;
            }
        }
        result("portable_h2d", bytes, ms, 2.0 * bytes);
    }
    CK(cudaFreeHost(host));

    // managed_p2p: prefetch a managed buffer between the GPUs.
    int cma = 0;
    CK(cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, 0));
    if (cma) {
        float* m = nullptr;
        CK(cudaMallocManaged(&m, bytes));
        for (size_t i = 0; i < nf; ++i) m[i] = (float)(i % 777);
        cudaMemLocation loc[2] = {{cudaMemLocationTypeDevice, 0}, {cudaMemLocationTypeDevice, 1}};
        CK(cudaSetDevice(0));
        CK(cudaMemPrefetchAsync(m, bytes, loc[0], 0, s[0]));
        CK(cudaStreamSynchronize(s[0]));
        int at = 0;
        std::vector<double> t;
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        for (int r = 0; r < reps + 3; ++r) {
            int to = 1 - at;
            CK(cudaSetDevice(0));
            CK(cudaEventRecord(a, s[0]));
            CK(cudaMemPrefetchAsync(m, bytes, loc[to], 0, s[0]));
            CK(cudaEventRecord(b, s[0]));
            CK(cudaEventSynchronize(b));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (r >= 3) t.push_back(ms);
            at = to;
        }
        CK(cudaMemPrefetchAsync(m, bytes, cudaMemLocation{cudaMemLocationTypeHost, 0}, 0, s[0]));
        CK(cudaStreamSynchronize(s[0]));
        if (m[nf - 1] != (float)((nf - 1) % 777)) {
            std::fprintf(stderr, "managed_p2p: last element %f\n", m[nf - 1]);
            ++failures;
        }
        result("managed_p2p", bytes, median(t), (double)bytes);
        CK(cudaEventDestroy(a));
        CK(cudaEventDestroy(b));
        CK(cudaFree(m));
    } else {
        std::printf("SKIP managed_p2p: concurrentManagedAccess = 0\n");
    }

    // allreduce from streams, then the same calls captured into one graph per GPU.
    ncclComm_t comm[2];
    int devs[2] = {0, 1};
    NK(ncclCommInitAll(comm, 2, devs));
    const size_t ar_bytes = std::min<size_t>(bytes, 64u << 20), ar_n = ar_bytes / 4;
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        fill<<<1024, 256, 0, s[d]>>>(dev[d], ar_n, 0.0f);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s[d]));
    }
    auto enqueue = [&] {
        for (int it = 0; it < iters; ++it) {
            NK(ncclGroupStart());
            for (int d = 0; d < 2; ++d) {
                CK(cudaSetDevice(d));
                NK(ncclAllReduce(dev[d], dev[d], ar_n, ncclFloat, ncclSum, comm[d], s[d]));
            }
            NK(ncclGroupEnd());
        }
    };
    double stream_ms = time_ms(s[0], s[1], reps, enqueue);
    result("allreduce", ar_bytes, stream_ms / iters, (double)ar_bytes * iters);
    cudaGraph_t graph[2];
    cudaGraphExec_t exec[2];
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamBeginCapture(s[d], cudaStreamCaptureModeRelaxed));
    }
    enqueue();
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamEndCapture(s[d], &graph[d]));
        CK(cudaGraphInstantiate(&exec[d], graph[d], 0));
    }
    double graph_ms = time_ms(s[0], s[1], reps, [&] {
        for (int d = 0; d < 2; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaGraphLaunch(exec[d], s[d]));
        }
    });
    result("allreduce_graph", ar_bytes, graph_ms / iters, (double)ar_bytes * iters);
    // Sums over two GPUs from 0 + i%1024 on both: after k all-reduces each element is
    // (i % 1024) * 2^k; check the first few against that (exact in f32 while it stays small).
    {
        const int calls = (reps + 3) * iters * 2;
        std::vector<float> got(8);
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(got.data(), dev[0], 32, cudaMemcpyDeviceToHost));
        for (int i = 1; i < 8; ++i) {
            double want = (double)i * std::ldexp(1.0, calls);
            bool inf_ok = std::isinf(want) && std::isinf(got[i]);
            if (!inf_ok && got[i] != (float)want) {
                std::fprintf(stderr, "allreduce: out[%d] = %g, expected %g\n", i, got[i], want);
                ++failures;
            }
        }
    }
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaGraphExecDestroy(exec[d]));
        CK(cudaGraphDestroy(graph[d]));
        NK(ncclCommDestroy(comm[d]));
        CK(cudaFree(dev[d]));
        CK(cudaStreamDestroy(s[d]));
    }
    if (failures) {
        std::fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    return 0;
}

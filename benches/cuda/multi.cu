// Raw CUDA C++ / NCCL reference for two GPUs of one process, measured exactly as
// crates/cueflow/examples/06_multi_gpu.rs measures cueflow, so the two print comparable lines:
//
//   peer copy   cudaMemcpyPeerAsync(dst on GPU 1, src on GPU 0) on a stream of GPU 0;
//               GB/s = bytes / time
//   all-reduce  ncclAllReduce (sum, f32) over both GPUs from one thread (ncclCommInitAll, one
//               ncclGroupStart/End per call); bus bandwidth as nccl-tests reports it:
//               busbw = bytes / time * 2 (n - 1) / n
//
// For each size: `warmup` untimed calls (5), then `reps` timed batches of `iters` calls (20;
// nccl-tests' defaults) between events recorded on every rank's stream; a batch's time is the
// longest rank's.
//   us       the median batch time / iters, enqueued while the GPUs run (nccl-tests' way: where
//            enqueueing a call takes the host longer than the GPUs take, this is host time)
//   host_us  the median host time per call spent enqueueing
//   dev_us   the same for batches queued behind a gate (a host function on a stream of GPU 0
//            that returns once the whole batch is queued): the GPUs' time alone
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -I$NCCL/include -o multi multi.cu -L$NCCL/lib -l:libnccl.so.2
// Usage:  multi [--max-mib M] [--reps R] [--iters I]     (NCCL_NVLS_ENABLE=0 in the environment)
// Output: RESULT multi op=<peer|allreduce> bytes=B us=<median> gbps=<algbw> busbw=<busbw>
//         host_us=<enqueue> dev_us=<gated> dev_busbw=<busbw from dev_us>

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

// The gate's host function: spins until the batch behind it is queued (at most 10 s).
static void CUDART_CB hold_gate(void* flag)
{
    auto* open = static_cast<std::atomic<bool>*>(flag);
    auto t0 = std::chrono::steady_clock::now();
    while (!open->load(std::memory_order_acquire)
           && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    }
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return (v.size() % 2) ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int main(int argc, char** argv)
{
    size_t max_mib = 1024;
    int reps = 7, iters = 20, warmup = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--max-mib")) max_mib = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: multi [--max-mib M] [--reps R] [--iters I]\n");
            return 2;
        }
    }
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) {
        std::fprintf(stderr, "multi: needs two GPUs, found %d\n", n);
        return 1;
    }
    const int ranks = 2;
    int can01 = 0;
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    std::printf("peer access 0 -> 1: %s\n", can01 ? "yes (direct)" : "no (staged)");
    size_t max_bytes = max_mib << 20;
    float* buf[ranks];
    cudaStream_t st[ranks];
    cudaEvent_t ev0[ranks], ev1[ranks];
    for (int r = 0; r < ranks; ++r) {
        CK(cudaSetDevice(r));
        if (can01) cudaDeviceEnablePeerAccess(1 - r, 0);
        cudaGetLastError();
        CK(cudaMalloc(&buf[r], max_bytes));
        CK(cudaMemset(buf[r], 0, max_bytes));
        CK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
        CK(cudaEventCreate(&ev0[r]));
        CK(cudaEventCreate(&ev1[r]));
    }
    ncclComm_t comms[ranks];
    int devs[ranks] = {0, 1};
    NK(ncclCommInitAll(comms, ranks, devs));

    // Time `body` (enqueueing one call on every rank) as described above; `host_us` and
    // `dev_us` get the median host time per call spent enqueueing and the gated device time.
    cudaStream_t gate;
    cudaEvent_t gate_ev;
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&gate, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&gate_ev, cudaEventDisableTiming));
    double host_us = 0, dev_us = 0;
    auto measure = [&](auto body) {
        for (int w = 0; w < warmup; ++w) body();
        for (int r = 0; r < ranks; ++r) { CK(cudaSetDevice(r)); CK(cudaStreamSynchronize(st[r])); }
        std::vector<double> t, h, d;
        auto batch = [&](bool gated) {
            std::atomic<bool> open{!gated};
            if (gated) {
                CK(cudaSetDevice(0));
                CK(cudaLaunchHostFunc(gate, hold_gate, &open));
                CK(cudaEventRecord(gate_ev, gate));
                for (int r = 0; r < ranks; ++r) { CK(cudaSetDevice(r)); CK(cudaStreamWaitEvent(st[r], gate_ev, 0)); }
            }
            for (int r = 0; r < ranks; ++r) { CK(cudaSetDevice(r)); CK(cudaEventRecord(ev0[r], st[r])); }
            auto h0 = std::chrono::steady_clock::now();
            for (int i = 0; i < iters; ++i) body();
            double host = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / iters;
            for (int r = 0; r < ranks; ++r) { CK(cudaSetDevice(r)); CK(cudaEventRecord(ev1[r], st[r])); }
            open.store(true, std::memory_order_release);
            double worst = 0;
            for (int r = 0; r < ranks; ++r) {
                CK(cudaEventSynchronize(ev1[r]));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, ev0[r], ev1[r]));
                worst = std::max(worst, (double)ms);
            }
            CK(cudaStreamSynchronize(gate));
            return std::make_pair(worst * 1e3 / iters, host);
        };
        for (int k = 0; k < reps; ++k) {
            auto [us, host] = batch(false);
            t.push_back(us);
            h.push_back(host);
            d.push_back(batch(true).first);
        }
        host_us = median(h);
        dev_us = median(d);
        return median(t);
    };

    for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
        double us = measure([&] {
            CK(cudaSetDevice(0));
            CK(cudaMemcpyPeerAsync(buf[1], 1, buf[0], 0, bytes, st[0]));
        });
        double gbps = bytes / (us * 1e3);
        std::printf("RESULT multi op=peer bytes=%zu us=%.2f gbps=%.2f busbw=%.2f host_us=%.2f dev_us=%.2f dev_busbw=%.2f\n",
                    bytes, us, gbps, gbps, host_us, dev_us, bytes / (dev_us * 1e3));
    }
    for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        double us = measure([&] {
            NK(ncclGroupStart());
            for (int r = 0; r < ranks; ++r)
                NK(ncclAllReduce(buf[r], buf[r], count, ncclFloat32, ncclSum, comms[r], st[r]));
            NK(ncclGroupEnd());
        });
        double gbps = bytes / (us * 1e3);
        double bus = gbps * 2.0 * (ranks - 1) / ranks;
        double dev_bus = bytes / (dev_us * 1e3) * 2.0 * (ranks - 1) / ranks;
        std::printf("RESULT multi op=allreduce bytes=%zu us=%.2f gbps=%.2f busbw=%.2f host_us=%.2f dev_us=%.2f dev_busbw=%.2f\n",
                    bytes, us, gbps, bus, host_us, dev_us, dev_bus);
    }
    // What the host links allow: H2D and D2H of `max_bytes` each at once on GPU 0 alone,
    // against half of that on each GPU, all at once (the split pipeline's copies).
    {
        float *hin, *hout;
        CK(cudaHostAlloc(&hin, max_bytes, cudaHostAllocPortable));
        CK(cudaHostAlloc(&hout, max_bytes, cudaHostAllocPortable));
        std::memset(hin, 0, max_bytes);
        cudaStream_t up[ranks], down[ranks];
        for (int r = 0; r < ranks; ++r) {
            CK(cudaSetDevice(r));
            CK(cudaStreamCreateWithFlags(&up[r], cudaStreamNonBlocking));
            CK(cudaStreamCreateWithFlags(&down[r], cudaStreamNonBlocking));
        }
        auto both_ways = [&](int gpus) {
            std::vector<double> t;
            for (int k = 0; k < reps; ++k) {
                auto t0 = std::chrono::steady_clock::now();
                size_t part = max_bytes / gpus;
                for (int r = 0; r < gpus; ++r) {
                    CK(cudaSetDevice(r));
                    char* d = (char*)buf[r];
                    CK(cudaMemcpyAsync(d, (char*)hin + r * part, part, cudaMemcpyHostToDevice, up[r]));
                    CK(cudaMemcpyAsync((char*)hout + r * part, d + part / 2, part / 2, cudaMemcpyDeviceToHost, down[r]));
                    CK(cudaMemcpyAsync((char*)hout + r * part + part / 2, d, part / 2, cudaMemcpyDeviceToHost, down[r]));
                }
                for (int r = 0; r < gpus; ++r) {
                    CK(cudaSetDevice(r));
                    CK(cudaStreamSynchronize(up[r]));
                    CK(cudaStreamSynchronize(down[r]));
                }
                t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
            return median(t);
        };
        both_ways(1);
        double one = both_ways(1), two = both_ways(2);
        std::printf("RESULT multi op=host_links bytes=%zu one_gpu_ms=%.2f two_gpus_ms=%.2f ratio=%.2f\n",
                    max_bytes, one, two, one / two);
        cudaFreeHost(hin);
        cudaFreeHost(hout);
    }
    for (int r = 0; r < ranks; ++r) ncclCommDestroy(comms[r]);
    return 0;
}

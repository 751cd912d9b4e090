// Raw CUDA reference for a deep queue (SPEC RL1, issue 16 item 6): N launches of the empty
// kernel on one non-blocking stream with no synchronization in between, then one
// cudaStreamSynchronize. Twin of `cargo run --release -p cueflow --example deep_queue`, which
// does the same through cueflow; compare the two `ms=` figures from the same machine.
//
// Timed (host clock, std::chrono::steady_clock): from the first launch to the return of the
// synchronize ("drain"), and the launches alone ("enqueue"; a launch waits when the driver's
// queue is full, so on a fast host this is close to the drain). Median of --reps runs, each
// after a warm-up launch and a synchronize.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o deep_queue deep_queue.cu -lcuda
// Usage:  deep_queue [--n 200000] [--reps 5]
// Output: RESULT deep_queue_raw n=<N> ms=<drain ms> enqueue_ms=<ms> us_per_kernel=<us>

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"

#define CU(call)                                                                               \
    do {                                                                                       \
        CUresult cu_err_ = (call);                                                             \
        if (cu_err_ != CUDA_SUCCESS) {                                                         \
            const char* cu_name_ = nullptr;                                                    \
            cuGetErrorName(cu_err_, &cu_name_);                                                \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                         cu_name_ ? cu_name_ : "?");                                           \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

int main(int argc, char** argv)
{
    long n = 200000;
    int reps = 5;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--n") && i + 1 < argc) {
            n = std::atol(argv[++i]);
        } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: deep_queue [--n 200000] [--reps 5]\n");
            return 1;
        }
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaFunction_t fn = nullptr;
    CK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(&cf_empty)));
    CUfunction f = (CUfunction)fn;
    CUstream s = (CUstream)stream;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# deep queue, raw CUDA (cuLaunchKernel): %ld empty kernels, %d runs, %s\n", n,
                reps, prop.name);
    std::vector<double> drain, enqueue;
    for (int r = 0; r < reps; ++r) {
        CU(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
        CK(cudaStreamSynchronize(stream));
        auto t0 = std::chrono::steady_clock::now();
        for (long i = 0; i < n; ++i) {
            CU(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
        }
        auto t1 = std::chrono::steady_clock::now();
        CK(cudaStreamSynchronize(stream));
        auto t2 = std::chrono::steady_clock::now();
        enqueue.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        drain.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
        std::printf("run %d: enqueue %.1f ms, drain %.1f ms\n", r, enqueue.back(), drain.back());
    }
    std::sort(drain.begin(), drain.end());
    std::sort(enqueue.begin(), enqueue.end());
    const double ms = drain[drain.size() / 2];
    std::printf("RESULT deep_queue_raw n=%ld ms=%.2f enqueue_ms=%.2f us_per_kernel=%.3f\n", n,
                ms, enqueue[enqueue.size() / 2], ms * 1000.0 / n);
    CK(cudaStreamDestroy(stream));
    return 0;
}

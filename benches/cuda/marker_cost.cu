// What a stream marker costs the host: cueflow's keepalive queue records an event after a
// batch of work (Q2) and asks the driver whether it completed (`cuEventQuery`, ~1.5 µs the first
// time after completion). A value the stream writes into mapped host memory
// (`cuStreamWriteValue32/64`) would be read by the host with a plain load instead. Per
// iteration: an empty kernel, then nothing / an event record / a 32-bit write into device
// memory / a 32-bit and a 64-bit write into mapped pinned memory. Medians (and minima) of 15
// rounds of 2,000 iterations, host time, the stream drained between rounds. Then the host's
// cost of learning that a marker completed: the first `cuEventQuery` after completion, and a
// load of the written value. Checks that each written value arrived (exit 1 otherwise).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o marker_cost benches/cuda/marker_cost.cu -lcuda && ./marker_cost
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"

#define CU(call)                                                                         \
    do {                                                                                 \
        CUresult cu_err_ = (call);                                                       \
        if (cu_err_ != CUDA_SUCCESS) {                                                   \
            const char* name = nullptr;                                                  \
            cuGetErrorName(cu_err_, &name);                                              \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, name); \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

__global__ void empty() {}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main() {
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUstream cs = reinterpret_cast<CUstream>(s);
    uint32_t* dev32;
    CK(cudaMalloc(&dev32, sizeof(uint32_t)));
    volatile uint64_t* host;  // [0]: 32-bit writes, [1]: 64-bit writes
    CK(cudaHostAlloc((void**)&host, 2 * sizeof(uint64_t), cudaHostAllocMapped));
    host[0] = host[1] = 0;
    uint64_t* host_dev;
    CK(cudaHostGetDevicePointer((void**)&host_dev, (void*)host, 0));
    const int pool = 64;
    std::vector<cudaEvent_t> ev(pool);
    for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const int n = 2000, modes = 5;
    const char* names[modes] = {"launch", "launch + event record", "launch + write32 device",
                                "launch + write32 mapped host", "launch + write64 mapped host"};
    std::vector<double> t[modes];
    for (int round = 0; round < 15; round++) {
        for (int m = 0; m < modes; m++) {
            CK(cudaStreamSynchronize(s));
            auto a = std::chrono::steady_clock::now();
            for (int i = 1; i <= n; i++) {
                empty<<<1, 1, 0, s>>>();
                switch (m) {
                    case 1: CK(cudaEventRecord(ev[i % pool], s)); break;
                    case 2: CU(cuStreamWriteValue32(cs, (CUdeviceptr)dev32, i, 0)); break;
                    case 3: CU(cuStreamWriteValue32(cs, (CUdeviceptr)host_dev, i, 0)); break;
                    case 4:
                        CU(cuStreamWriteValue64(cs, (CUdeviceptr)(host_dev + 1), i, 0));
                        break;
                }
            }
            auto b = std::chrono::steady_clock::now();
            t[m].push_back(std::chrono::duration<double, std::micro>(b - a).count() / n);
        }
    }
    CK(cudaStreamSynchronize(s));
    if ((uint32_t)host[0] != (uint32_t)n || host[1] != (uint64_t)n) {
        std::fprintf(stderr, "written values did not arrive: %llu %llu, want %d\n",
                     (unsigned long long)host[0], (unsigned long long)host[1], n);
        return 1;
    }
    for (int m = 0; m < modes; m++) {
        std::printf("RESULT marker %-30s %.3f us a call (min %.3f)\n", names[m], median(t[m]),
                    *std::min_element(t[m].begin(), t[m].end()));
    }
    // Learning that a marker completed: first query of a completed event, and a load.
    std::vector<double> q, l;
    for (int r = 0; r < 200; r++) {
        empty<<<1, 1, 0, s>>>();
        CK(cudaEventRecord(ev[0], s));
        CU(cuStreamWriteValue64(cs, (CUdeviceptr)(host_dev + 1), 1000000 + r, 0));
        CK(cudaStreamSynchronize(s));
        auto a = std::chrono::steady_clock::now();
        cudaError_t e = cudaEventQuery(ev[0]);
        auto b = std::chrono::steady_clock::now();
        uint64_t v = host[1];
        auto c = std::chrono::steady_clock::now();
        if (e != cudaSuccess || v != (uint64_t)(1000000 + r)) {
            std::fprintf(stderr, "marker %d not complete after synchronize\n", r);
            return 1;
        }
        q.push_back(std::chrono::duration<double, std::micro>(b - a).count());
        l.push_back(std::chrono::duration<double, std::micro>(c - b).count());
    }
    std::printf("RESULT marker first query of a completed event %.3f us (min %.3f)\n", median(q),
                *std::min_element(q.begin(), q.end()));
    std::printf("RESULT marker load of a written value %.3f us (min %.3f)\n", median(l),
                *std::min_element(l.begin(), l.end()));
    return 0;
}

// How a host waits for the end of a small piece of work (a one-block kernel and a 4-byte D2H
// copy), per iteration: a stream synchronize, an event recorded after the work and then
// synchronized (with a query while it is pending, and with one more query after it
// completed). Medians (and minima) of 15 rounds of 2,000 iterations. Raw CUDA runtime;
// cueflow's completions are events, so this says which of their calls cost anything.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o event_wait benches/cuda/event_wait.cu && ./event_wait
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "check.h"

__global__ void bump(float* x) {
    if (threadIdx.x == 0) x[0] += 1.0f;
}

int main() {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d, *h;
    CK(cudaMalloc(&d, sizeof(float)));
    CK(cudaMallocHost(&h, sizeof(float)));
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const int n = 2000;
    const char* names[] = {"stream synchronize", "record, synchronize",
                           "record, query, synchronize", "record, query, synchronize, query",
                           "stream query, stream synchronize"};
    std::vector<double> t[5];
    for (int round = 0; round < 15; round++) {
        for (int m = 0; m < 5; m++) {
            CK(cudaStreamSynchronize(s));
            auto a = std::chrono::steady_clock::now();
            for (int i = 0; i < n; i++) {
                bump<<<1, 32, 0, s>>>(d);
                CK(cudaMemcpyAsync(h, d, sizeof(float), cudaMemcpyDeviceToHost, s));
                if (m == 0) CK(cudaStreamSynchronize(s));
                if (m == 4) {
                    (void)cudaStreamQuery(s);  // not ready: not an error
                    CK(cudaStreamSynchronize(s));
                }
                if (m >= 1 && m <= 3) {
                    CK(cudaEventRecord(ev, s));
                    if (m >= 2) (void)cudaEventQuery(ev);
                    CK(cudaEventSynchronize(ev));
                    if (m == 3) CK(cudaEventQuery(ev));  // complete: the first query after
                }
            }
            auto b = std::chrono::steady_clock::now();
            t[m].push_back(std::chrono::duration<double, std::micro>(b - a).count() / n);
        }
    }
    for (int m = 0; m < 5; m++) {
        std::sort(t[m].begin(), t[m].end());
        std::printf("RESULT event_wait mode=\"%s\" us_per_iter=%.2f min=%.2f\n", names[m],
                    t[m][t[m].size() / 2], t[m][0]);
    }
    return 0;
}

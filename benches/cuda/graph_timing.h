// Shared by the raw CUDA probes: the device time of a graph launch, between two timing events.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "check.h"

// Device time of one launch of `exec` on `s`, in us, between two timing events recorded around
// it, each launch waited for: the median of `n` launches after `warm` unmeasured ones. What the
// GPU spends on the graph, without the host's launch and synchronize.
static double graph_launch_gpu_us(cudaGraphExec_t exec, cudaStream_t s, int n, int warm = 0)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> t;
    for (int i = 0; i < warm + n; ++i) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= warm) t.push_back(ms * 1000.0);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// Managed-memory prefetch bandwidth (issue 19): cudaMallocManaged memory written by the host,
// prefetched to the device (cudaMemPrefetchAsync), then back to the host, each timed with
// events; then a kernel touching prefetched memory. Compare with
// `cargo run --release -p cueflow --example host_memory_bandwidth` (benches/cuda/run.sh runs
// both).
//
//   managed_prefetch [--mib N] [--reps R]     (default 256 MiB, 9 repetitions; median)
#include <algorithm>
#include <string>
#include <vector>

#include "check.h"

__global__ void add_one(float* x, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] += 1.0f;
    }
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char** argv) {
    size_t mib = 256;
    int reps = 9;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--mib" && i + 1 < argc) mib = std::stoul(argv[++i]);
        else if (a == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
        else if (a == "--help") {
            std::printf("managed_prefetch [--mib N] [--reps R]\n");
            return 0;
        }
    }
    size_t n = mib * (1u << 20) / sizeof(float), bytes = n * sizeof(float);
    int dev = 0, concurrent = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, dev));
    if (!concurrent) {
        std::printf("RESULT managed_prefetch skipped: concurrentManagedAccess = 0\n");
        return 0;
    }
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    if (bytes > free_b / 4) {
        std::fprintf(stderr, "managed_prefetch: %zu MiB is more than a quarter of free memory\n", mib);
        return 1;
    }
    float* m = nullptr;
    CK(cudaMallocManaged(&m, bytes, cudaMemAttachGlobal));
    for (size_t i = 0; i < n; ++i) m[i] = float(i % 1024);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
#if CUDART_VERSION >= 13000
    cudaMemLocation to_dev{cudaMemLocationTypeDevice, dev}, to_host{cudaMemLocationTypeHost, 0};
#define PREFETCH(ptr, len, where, stream) cudaMemPrefetchAsync(ptr, len, where, 0, stream)
#else
    int to_dev = dev, to_host = cudaCpuDeviceId;
#define PREFETCH(ptr, len, where, stream) cudaMemPrefetchAsync(ptr, len, where, stream)
#endif
    std::vector<float> h2d, d2h;
    dim3 block(256), grid((unsigned)((n + 255) / 256));
    for (int r = 0; r < reps + 1; ++r) {
        float ms = 0;
        CK(cudaEventRecord(a, s));
        CK(PREFETCH(m, bytes, to_dev, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) h2d.push_back(ms);
        add_one<<<grid, block, 0, s>>>(m, n);
        CK(cudaEventRecord(a, s));
        CK(PREFETCH(m, bytes, to_host, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) d2h.push_back(ms);
    }
    CK(cudaGetLastError());
    for (size_t i = 0; i < n; i += 4097) {
        if (m[i] != float(i % 1024) + float(reps + 1)) {
            std::fprintf(stderr, "wrong value at %zu: %f\n", i, m[i]);
            return 1;
        }
    }
    double gb = double(bytes) / 1e9;
    std::printf(
        "RESULT managed_prefetch mib=%zu to_device_ms=%.3f to_device_gbs=%.2f to_host_ms=%.3f "
        "to_host_gbs=%.2f\n",
        mib, median(h2d), gb / (median(h2d) / 1e3), median(d2h), gb / (median(d2h) / 1e3));
    CK(cudaFree(m));
    return 0;
}

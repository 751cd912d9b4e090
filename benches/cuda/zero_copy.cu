// Zero-copy kernel bandwidth (issue 19): a kernel reads mapped pinned host memory
// (cudaHostAlloc(cudaHostAllocMapped)) in place over the bus and writes device memory
// ("read"), or reads device memory and writes mapped host memory in place ("write").
// Compare with `cargo run --release -p cueflow --example host_memory_bandwidth` on the same
// machine in the same run (benches/cuda/run.sh runs both).
//
//   zero_copy [--mib N] [--reps R]     (default 256 MiB, 9 repetitions; median reported)
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

// y[i] = x[i] + 1: one 4-byte read and one 4-byte write per element, one thread each
// (as cueflow's example launches it).
__global__ void add_one(const float* x, float* y, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] + 1.0f;
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
            std::printf("zero_copy [--mib N] [--reps R]\n");
            return 0;
        }
    }
    size_t n = mib * (1u << 20) / sizeof(float), bytes = n * sizeof(float);
    int dev = 0;
    CK(cudaSetDevice(dev));
    float *host = nullptr, *host_dev = nullptr, *d = nullptr;
    CK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&host_dev, host, 0));
    CK(cudaMalloc(&d, bytes));
    for (size_t i = 0; i < n; ++i) host[i] = float(i % 1024);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    dim3 block(256), grid((unsigned)((n + 255) / 256));
    std::vector<float> rd, wr;
    // All reads first (the device copy becomes host + 1), then all writes (host becomes
    // device + 1 = its first value + 2), one warm-up each.
    for (int r = 0; r < reps + 1; ++r) {
        float ms = 0;
        CK(cudaEventRecord(a, s));
        add_one<<<grid, block, 0, s>>>(host_dev, d, n);  // read over the bus
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) rd.push_back(ms);
    }
    for (int r = 0; r < reps + 1; ++r) {
        float ms = 0;
        CK(cudaEventRecord(a, s));
        add_one<<<grid, block, 0, s>>>(d, host_dev, n);  // write over the bus
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) wr.push_back(ms);
    }
    CK(cudaGetLastError());
    // After the last write: host[i] = i % 1024 + 2.
    for (size_t i = 0; i < n; i += 4097) {
        if (host[i] != float(i % 1024) + 2.0f) {
            std::fprintf(stderr, "wrong value at %zu: %f\n", i, host[i]);
            return 1;
        }
    }
    double gb = double(bytes) / 1e9;
    std::printf("RESULT zero_copy mib=%zu read_ms=%.3f read_gbs=%.2f write_ms=%.3f write_gbs=%.2f\n",
                mib, median(rd), gb / (median(rd) / 1e3), median(wr), gb / (median(wr) / 1e3));
    CK(cudaFreeHost(host));
    CK(cudaFree(d));
    return 0;
}

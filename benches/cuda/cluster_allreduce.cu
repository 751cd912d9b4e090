// Raw CUDA C++ / NCCL reference for crates/cueflow/examples/cluster_allreduce.rs: one process
// per GPU, started with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK), measured
// exactly as the example measures cueflow, so the two print comparable lines.
//
//   Rank 0 makes the NCCL unique id and writes it to $CLUSTER_ID_FILE (written whole, then
//   renamed); the other ranks read it from there (the ranks share a file system: this
//   reference runs on one machine, with NCCL's transports chosen by its environment, e.g.
//   NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo for its network transport).
//   Each rank: cudaSetDevice(LOCAL_RANK), ncclCommInitRank.
//
//   Per size (--min-mib to --max-mib by factors of 4): verify (rank r holds r + 1; one sum),
//   5 untimed ncclAllReduce (sum, float, in place), then --reps batches of --iters calls
//   between events on the rank's stream; a rank's time is its median batch / iters, the
//   size's time the slowest rank's (ncclAllReduce with ncclMax). Rank 0 prints
//   RESULT raw_cluster op=allreduce ranks=N bytes=B us=<time> busbw=<bytes/time*2(n-1)/n>
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 [-I$NCCL/include] -o cluster_allreduce
//             cluster_allreduce.cu -L$NCCL/lib -l:libnccl.so.2           (one line)
// (Without NCCL's header, the few declarations below stand in for it.)

#include <cuda_runtime.h>

#if __has_include(<nccl.h>)
#include <nccl.h>
#else
extern "C" {
typedef struct ncclComm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclFloat64 = 8 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
const char* ncclGetErrorString(ncclResult_t result);
}
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
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

static int env_int(const char* name)
{
    const char* v = std::getenv(name);
    if (!v || !*v) {
        std::fprintf(stderr, "cluster_allreduce: %s is not set (start it as torchrun would)\n", name);
        std::exit(2);
    }
    return std::atoi(v);
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return (v.size() % 2) ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Rank 0 writes the id; the others wait for the file (at most 60 s).
static ncclUniqueId exchange_id(int rank)
{
    const char* path = std::getenv("CLUSTER_ID_FILE");
    if (!path || !*path) {
        std::fprintf(stderr, "cluster_allreduce: CLUSTER_ID_FILE is not set\n");
        std::exit(2);
    }
    ncclUniqueId id;
    if (rank == 0) {
        NK(ncclGetUniqueId(&id));
        std::string tmp = std::string(path) + ".tmp";
        FILE* f = std::fopen(tmp.c_str(), "wb");
        if (!f || std::fwrite(&id, sizeof id, 1, f) != 1 || std::fclose(f) != 0
            || std::rename(tmp.c_str(), path) != 0) {
            std::perror("cluster_allreduce: writing the id");
            std::exit(1);
        }
        return id;
    }
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        FILE* f = std::fopen(path, "rb");
        if (f) {
            size_t got = std::fread(&id, sizeof id, 1, f);
            std::fclose(f);
            if (got == 1) return id;
        }
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
            std::fprintf(stderr, "cluster_allreduce: rank %d: no id at %s after 60 s\n", rank, path);
            std::exit(1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

int main(int argc, char** argv)
{
    size_t min_mib = 1, max_mib = 256;
    int reps = 7, iters = 20;
    const int warmup = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--min-mib")) min_mib = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--max-mib")) max_mib = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: cluster_allreduce [--min-mib M] [--max-mib M] [--reps R] [--iters I]\n");
            return 2;
        }
    }
    const int rank = env_int("RANK"), ranks = env_int("WORLD_SIZE"), local = env_int("LOCAL_RANK");
    CK(cudaSetDevice(local));
    ncclUniqueId id = exchange_id(rank);
    ncclComm_t comm;
    NK(ncclCommInitRank(&comm, ranks, id, rank));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t ev0, ev1;
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    size_t max_bytes = max_mib << 20;
    float* buf;
    double* slowest;
    CK(cudaMalloc(&buf, max_bytes));
    CK(cudaMalloc(&slowest, sizeof(double)));
    for (size_t bytes = min_mib << 20; bytes <= max_bytes; bytes *= 4) {
        size_t n = bytes / sizeof(float);
        std::vector<float> h(n, float(rank + 1));
        CK(cudaMemcpyAsync(buf, h.data(), bytes, cudaMemcpyHostToDevice, st));
        NK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, st));
        CK(cudaMemcpyAsync(h.data(), buf, bytes, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        float want = float(ranks * (ranks + 1) / 2);
        for (size_t i = 0; i < n; ++i)
            if (h[i] != want) {
                std::fprintf(stderr, "rank %d: all-reduce of %zu bytes: element %zu is %g, not %g\n",
                             rank, bytes, i, h[i], want);
                return 1;
            }
        for (int w = 0; w < warmup; ++w) NK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, st));
        CK(cudaStreamSynchronize(st));
        std::vector<double> t;
        for (int k = 0; k < reps; ++k) {
            CK(cudaEventRecord(ev0, st));
            for (int i = 0; i < iters; ++i) NK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, st));
            CK(cudaEventRecord(ev1, st));
            CK(cudaEventSynchronize(ev1));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, ev0, ev1));
            t.push_back(ms * 1e3 / iters);
        }
        double us = median(t);
        CK(cudaMemcpyAsync(slowest, &us, sizeof us, cudaMemcpyHostToDevice, st));
        NK(ncclAllReduce(slowest, slowest, 1, ncclFloat64, ncclMax, comm, st));
        CK(cudaMemcpyAsync(&us, slowest, sizeof us, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        double busbw = bytes / (us * 1e3) * 2.0 * (ranks - 1) / ranks;
        if (rank == 0)
            std::printf("RESULT raw_cluster op=allreduce ranks=%d bytes=%zu us=%.2f busbw=%.2f\n",
                        ranks, bytes, us, busbw);
    }
    if (rank == 0) std::printf("all-reduce verified at every size on every rank\n");
    NK(ncclCommDestroy(comm));
    return 0;
}

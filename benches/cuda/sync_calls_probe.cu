// Which driver calls wait for a running kernel? A kernel spins for SPIN ms (a clock loop, no
// host flag) on a non-blocking stream; the host then makes one call and times it. A call that
// takes ~SPIN ms waited for the kernel (device-wide synchronization). cueflow never makes such
// a call inside another call that may run while a program's kernels wait for each other: the
// end of a registration a drop let go of runs on the freeing thread (backend/cuda/host_mem.rs),
// as frees do (memory.rs), and the built-in kernels are loaded when a device opens.
//
// On an H200 with driver 580.159 (both with CUDA_MODULE_LOADING unset and =EAGER), these
// waited: cuMemHostUnregister, cuMemFreeHost, cuMemFree (device and managed memory),
// cuModuleLoadData and cuModuleUnload. These did not: cuMemHostRegister, cuMemHostAlloc,
// cuMemAlloc, cuMemAllocManaged, graph instantiation and destruction, event and stream
// creation and destruction, cuMemPoolTrimTo, stream-ordered allocation on another stream.
//
// Build:  nvcc -O2 -std=c++17 -arch=sm_90 -o sync_calls_probe sync_calls_probe.cu -lcuda
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>
#include <functional>
__global__ void spin(long long cycles) { long long t = clock64(); while (clock64() - t < cycles) {} }
__global__ void nop() {}
int main() {
  cudaFree(0);
  CUcontext ctx; cuCtxGetCurrent(&ctx);
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);  // kHz
  const double SPIN_MS = 300;
  long long cycles = (long long)(SPIN_MS * clk);
  cudaStream_t s, other; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  std::vector<std::pair<const char*, std::function<void()>>> calls;
  // Set-up each call needs is made before the kernel starts (captured by value/reference).
  static std::vector<char> pageable(1 << 20);
  static void* reg = nullptr; static void* pinned = nullptr; static void* dmem = nullptr; static void* managed = nullptr;
  static cudaGraphExec_t exec; static cudaGraph_t graph; static cudaEvent_t ev; static cudaStream_t st; static CUmodule mod;
  static cudaMemPool_t pool;
  calls.push_back({"nothing (baseline)", [] {}});
  calls.push_back({"cuMemHostRegister", [] { cudaHostRegister(pageable.data(), pageable.size(), 0); }});
  calls.push_back({"cuMemHostUnregister", [] { cudaHostUnregister(pageable.data()); }});
  calls.push_back({"cuMemHostAlloc", [] { cudaHostAlloc(&pinned, 1 << 20, 0); }});
  calls.push_back({"cuMemFreeHost", [] { cudaFreeHost(pinned); }});
  calls.push_back({"cuMemAlloc", [] { cudaMalloc(&dmem, 1 << 20); }});
  calls.push_back({"cuMemFree", [] { cudaFree(dmem); }});
  calls.push_back({"cuMemAllocManaged", [] { cudaMallocManaged(&managed, 1 << 20); }});
  calls.push_back({"cuMemFree (managed)", [] { cudaFree(managed); }});
  calls.push_back({"cuGraphInstantiate", [] { cudaGraphCreate(&graph, 0); cudaGraphNode_t n; cudaGraphAddEmptyNode(&n, graph, nullptr, 0); cudaGraphInstantiate(&exec, graph, 0); }});
  calls.push_back({"cuGraphExecDestroy", [] { cudaGraphExecDestroy(exec); }});
  calls.push_back({"cuGraphDestroy", [] { cudaGraphDestroy(graph); }});
  calls.push_back({"cuEventCreate", [] { cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); }});
  calls.push_back({"cuEventDestroy", [] { cudaEventDestroy(ev); }});
  calls.push_back({"cuStreamCreate", [] { cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking); }});
  calls.push_back({"cuStreamDestroy", [] { cudaStreamDestroy(st); }});
  calls.push_back({"cuMemPoolTrimTo(0)", [] { cudaDeviceGetDefaultMemPool(&pool, 0); cudaMemPoolTrimTo(pool, 0); }});
  calls.push_back({"cuMemAllocAsync+FreeAsync (other)", [] { void* p; cudaMallocAsync(&p, 1 << 20, 0); cudaFreeAsync(p, 0); }});
  calls.push_back({"cuModuleLoadData (empty PTX)", [] { const char* ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry e() { ret; }\n"; cuModuleLoadData(&mod, ptx); CUfunction f; cuModuleGetFunction(&f, mod, "e"); }});
  calls.push_back({"cuModuleUnload", [] { cuModuleUnload(mod); }});
  (void)other;
  for (auto& c : calls) {
    cudaDeviceSynchronize();
    spin<<<1, 1, 0, s>>>(cycles);
    // Let the kernel start.
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() < 5) {}
    auto t = std::chrono::steady_clock::now();
    c.second();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    cudaError_t err = cudaGetLastError();
    printf("%-36s %8.2f ms%s  (%s)\n", c.first, ms, ms > SPIN_MS / 2 ? "   <- waited for the kernel" : "", cudaGetErrorString(err));
  }
  cudaDeviceSynchronize();
  return 0;
}

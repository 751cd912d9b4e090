// ST4 on the driver, without cueflow: a copy on the legacy stream after a blocking stream's
// kernel, and on a blocking stream after the legacy stream's kernel, each gated so the copy is
// enqueued while the kernel waits. cueflow's backend/cuda/legacy_order.rs cites what it shows
// (small host-to-device copies from pinned memory pass the kernel on driver 580).
//
// Build:  nvcc -O2 -std=c++17 -o legacy_order_probe legacy_order_probe.cu
#include <cstdio>
#include <unistd.h>
#include <cuda_runtime.h>
__global__ void spin(volatile int* flag) { while (*flag == 0) {} }
__global__ void scale(float* x, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
volatile int* hflag; int* dflag;
// first: stream of the kernel, second: stream of the copy. kind: 0 HtoD (kernel scales mapped host src),
// 1 DtoH (kernel scales device src), 2 DtoD, 3 HtoD from plain pinned (kernel scales device copy then DtoH? no: kernel writes mapped)
float run(cudaStream_t first, cudaStream_t second, int kind, size_t n) {
  *hflag = 0;
  float *h, *hd, *d, *out; cudaHostAlloc(&h, n * 4, cudaHostAllocMapped); cudaHostGetDevicePointer(&hd, h, 0);
  cudaMalloc(&d, n * 4); float* ho; cudaHostAlloc(&ho, n * 4, 0);
  for (size_t i = 0; i < n; ++i) { h[i] = 1.0f; ho[i] = 0; }
  cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice); cudaMalloc(&out, n * 4); cudaMemset(out, 0, n * 4);
  cudaDeviceSynchronize();
  spin<<<1, 1, 0, first>>>(dflag);
  if (kind == 0) scale<<<(n + 255) / 256, 256, 0, first>>>(hd, n); else scale<<<(n + 255) / 256, 256, 0, first>>>(d, n);
  if (kind == 0) cudaMemcpyAsync(out, h, n * 4, cudaMemcpyHostToDevice, second);
  if (kind == 1) cudaMemcpyAsync(ho, d, n * 4, cudaMemcpyDeviceToHost, second);
  if (kind == 2) cudaMemcpyAsync(out, d, n * 4, cudaMemcpyDeviceToDevice, second);
  usleep(5000); *hflag = 1; cudaDeviceSynchronize();
  float r = 0;
  if (kind == 1) r = ho[0]; else cudaMemcpy(&r, out, 4, cudaMemcpyDeviceToHost);
  cudaFreeHost(h); cudaFreeHost(ho); cudaFree(d); cudaFree(out);
  return r;
}
int main() {
  setvbuf(stdout, NULL, _IONBF, 0); alarm(60);
  cudaFree(0);
  cudaStream_t b; cudaStreamCreateWithPriority(&b, cudaStreamDefault, 0);
  cudaHostAlloc((void**)&hflag, 4, cudaHostAllocMapped); cudaHostGetDevicePointer((void**)&dflag, (void*)hflag, 0);
  const char* kinds[] = {"HtoD from mapped", "DtoH", "DtoD"};
  for (size_t n : {size_t(4096), size_t(1) << 16, size_t(1) << 22})
    for (int kind = 0; kind < 3; ++kind) {
      float a = run(b, cudaStreamLegacy, kind, n), c = run(cudaStreamLegacy, b, kind, n);
      printf("%zu floats, %s: blocking kernel -> legacy copy read %g; legacy kernel -> blocking copy read %g (want 2)\n", n, kinds[kind], a, c);
    }
  return 0;
}

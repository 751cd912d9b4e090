// ST4 under load, without cueflow: a short kernel on the legacy stream, then work on a blocking
// stream, a synchronize of that stream alone, and a kernel on a non-blocking stream that
// overwrites what the legacy kernel wrote. ST4 puts the legacy kernel before the blocking
// stream's work, so the last kernel's value must win. Each mode is a different kind of
// blocking-stream work, among them the waits and host functions cueflow enqueues there
// (C7's gate, host-to-host copies). Written while hunting a lost write the differential fuzzer
// saw once (program 2681 of random run 71); on an H200 with driver 580.159, 20,000 iterations of every
// mode kept the order.
//
// Build:  nvcc -O2 -std=c++17 -o legacy_order_stress legacy_order_stress.cu
// Run:    ./legacy_order_stress [iterations per mode, default 20000]   (exit 1 on a lost order)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
__global__ void fill(float* x, float v, long long spin) {
  long long t = clock64();
  while (clock64() - t < spin) {}
  x[threadIdx.x] = v;
}
__global__ void addc(float* y, const float* x, float c) { y[threadIdx.x] = x[threadIdx.x] + c; }
__global__ void nop() {}
struct Copy { float* dst; const float* src; };
void CUDART_CB host_copy(void* p) { Copy* c = (Copy*)p; memcpy(c->dst, c->src, 256); }
const char* modes[] = {"host function", "kernel", "device-to-host copy", "event record + event sync",
                       "memset", "wait (complete event) + host function", "wait (complete event) + kernel",
                       "wait (pending event) + host function", "legacy waits too, records after"};
int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20000, lost_any = 0;
  cudaFree(0);
  cudaStream_t s0, s1, s2;
  cudaStreamCreateWithFlags(&s0, cudaStreamDefault);
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  float *d1, *d0, *d2, *p, *m;
  cudaMalloc(&d1, 256); cudaMalloc(&d0, 256); cudaMalloc(&d2, 256);
  cudaHostAlloc(&p, 256, 0); cudaHostAlloc(&m, 256, cudaHostAllocMapped);
  cudaMemset(d0, 0, 256);
  cudaEvent_t done, pend, mine;
  for (cudaEvent_t* e : {&done, &pend, &mine}) cudaEventCreateWithFlags(e, cudaEventDisableTiming);
  nop<<<1, 1, 0, s2>>>(); cudaEventRecord(done, s2); cudaDeviceSynchronize();
  static Copy c = {p, m};
  for (int mode = 0; mode < 9; ++mode) {
    int lost = 0;
    for (int i = 0; i < iters; ++i) {
      long long spin = (rand() % 8) * 2000;  // 0 to ~7 us: the race window moves around
      if (mode == 8) cudaStreamWaitEvent(cudaStreamLegacy, done, 0);
      fill<<<1, 64, 0, cudaStreamLegacy>>>(d1, 7.0f, spin);
      if (mode == 8) cudaEventRecord(mine, cudaStreamLegacy);
      switch (mode) {
        case 0: cudaLaunchHostFunc(s0, host_copy, &c); break;
        case 1: nop<<<1, 1, 0, s0>>>(); break;
        case 2: cudaMemcpyAsync(p, d0, 256, cudaMemcpyDeviceToHost, s0); break;
        case 3: cudaEventRecord(mine, s0); cudaEventSynchronize(mine); break;
        case 4: cudaMemsetAsync(d2, 0, 4, s0); break;
        case 5: case 8:
          cudaStreamWaitEvent(s0, done, 0); cudaLaunchHostFunc(s0, host_copy, &c); cudaEventRecord(mine, s0); break;
        case 6: cudaStreamWaitEvent(s0, done, 0); nop<<<1, 1, 0, s0>>>(); break;
        case 7:
          fill<<<1, 64, 0, s2>>>(d2, 1.0f, spin); cudaEventRecord(pend, s2);
          cudaStreamWaitEvent(s0, pend, 0); cudaLaunchHostFunc(s0, host_copy, &c); break;
      }
      if (mode != 3) cudaStreamSynchronize(s0);
      addc<<<1, 64, 0, s1>>>(d1, d0, -9.0f);
      cudaDeviceSynchronize();
      float r[64];
      cudaMemcpy(r, d1, 256, cudaMemcpyDeviceToHost);
      lost += r[0] != -9.0f || r[63] != -9.0f;
    }
    cudaError_t err = cudaGetLastError();
    printf("mode %d (%s): %d of %d iterations lost the order (%s)\n", mode, modes[mode], lost, iters,
           cudaGetErrorString(err));
    lost_any |= lost != 0 || err != cudaSuccess;
  }
  return lost_any;
}

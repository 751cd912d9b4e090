// ST4 on the driver, without cueflow: work on the legacy stream after a blocking stream's
// kernel, and on a blocking stream after the legacy stream's kernel, each gated so the second
// stream's work is enqueued while the kernel waits. cueflow's backend/cuda/legacy_order.rs
// cites what it shows: on driver 580, copies from host memory (to device or to host memory)
// may pass the other stream's kernel; device-to-host, device-to-device copies and memsets wait.
//
// Build:  nvcc -O2 -std=c++17 -o legacy_order_probe legacy_order_probe.cu -lcuda
// Run:    ./legacy_order_probe        (every row should read 2 twice; a 1 or 0 is a pass)
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>
__global__ void spin(volatile int* flag) { while (*flag == 0) {} }
__global__ void scale(float* x, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
volatile int* hflag; int* dflag;
struct Copy { float* dst; const float* src; size_t n; };
void CUDART_CB host_copy(void* p) { Copy* c = (Copy*)p; memcpy(c->dst, c->src, c->n * 4); }
enum Kind { HtoD_MAPPED, DtoH, DtoD, HOST_FN, MEMSET, MANAGED_TO_PINNED, HtoD_MANAGED, KINDS };
const char* names[KINDS] = {"HtoD from mapped", "DtoH", "DtoD", "host function mapped->pinned", "memset (reads 2 if ordered)",
                            "managed->pinned", "managed->device"};
// The kernel on `first` doubles the source (1 -> 2); the work on `second` then moves it; the
// value read afterwards is 2 when ST4 held and 1 when the work passed the kernel.
float run(cudaStream_t first, cudaStream_t second, Kind kind, size_t n) {
  *hflag = 0;
  float *h, *hd, *d, *out, *ho, *m; cudaHostAlloc(&h, n * 4, cudaHostAllocMapped); cudaHostGetDevicePointer(&hd, h, 0);
  cudaMalloc(&d, n * 4); cudaHostAlloc(&ho, n * 4, 0); cudaMallocManaged(&m, n * 4);
  for (size_t i = 0; i < n; ++i) { h[i] = 1.0f; ho[i] = 0; m[i] = 1.0f; }
  cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice); cudaMalloc(&out, n * 4); cudaMemset(out, 0, n * 4);
  cudaDeviceSynchronize();
  spin<<<1, 1, 0, first>>>(dflag);
  float* src = kind == HtoD_MAPPED || kind == HOST_FN ? hd : kind == MANAGED_TO_PINNED || kind == HtoD_MANAGED ? m : d;
  scale<<<(n + 255) / 256, 256, 0, first>>>(src, n);
  switch (kind) {
    case HtoD_MAPPED: cudaMemcpyAsync(out, h, n * 4, cudaMemcpyDefault, second); break;
    case DtoH: cudaMemcpyAsync(ho, d, n * 4, cudaMemcpyDefault, second); break;
    case DtoD: cudaMemcpyAsync(out, d, n * 4, cudaMemcpyDefault, second); break;
    // cudaMemcpyAsync between two host buffers blocks the host until the stream reaches it
    // (a deadlock here): cueflow runs such copies as host functions, as this one.
    case HOST_FN: { static Copy c; c = {ho, h, n}; cudaLaunchHostFunc(second, host_copy, &c); break; }
    // 0x40000000 is 2.0f: a memset that passes the kernel is doubled to 4.
    case MEMSET: cuMemsetD32Async((CUdeviceptr)d, 0x40000000u, n, (CUstream)second); break;
    case MANAGED_TO_PINNED: cudaMemcpyAsync(ho, m, n * 4, cudaMemcpyDefault, second); break;
    case HtoD_MANAGED: cudaMemcpyAsync(out, m, n * 4, cudaMemcpyDefault, second); break;
    default: break;
  }
  usleep(5000); *hflag = 1; cudaDeviceSynchronize();
  float r = 0;
  if (kind == HOST_FN || kind == DtoH || kind == MANAGED_TO_PINNED) r = ho[0];
  else if (kind == MEMSET) cudaMemcpy(&r, d, 4, cudaMemcpyDeviceToHost);
  else cudaMemcpy(&r, out, 4, cudaMemcpyDeviceToHost);
  cudaFreeHost(h); cudaFreeHost(ho); cudaFree(d); cudaFree(out); cudaFree(m);
  return r;
}
int main() {
  setvbuf(stdout, NULL, _IONBF, 0); alarm(60);
  cudaFree(0);
  cudaStream_t b; cudaStreamCreateWithPriority(&b, cudaStreamDefault, 0);
  cudaHostAlloc((void**)&hflag, 4, cudaHostAllocMapped); cudaHostGetDevicePointer((void**)&dflag, (void*)hflag, 0);
  int passed = 0;
  for (size_t n : {size_t(16), size_t(4096), size_t(1) << 16, size_t(1) << 22})
    for (int k = 0; k < KINDS; ++k) {
      float a = run(b, cudaStreamLegacy, Kind(k), n), c = run(cudaStreamLegacy, b, Kind(k), n);
      passed += (a != 2) + (c != 2);
      printf("%8zu floats, %-28s blocking kernel -> legacy: %g; legacy kernel -> blocking: %g%s\n", n, names[k], a, c,
             a != 2 || c != 2 ? "   <- passed the kernel" : "");
    }
  printf("%d of %d runs passed the other stream's kernel\n", passed, 4 * KINDS * 2);
  return 0;
}

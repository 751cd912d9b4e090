// Raw CUDA probe for the differential fuzzer's F12 fault (seed 56, program 2505, step 9): a
// graph with a switch node, then a while node, beside copies through registered host memory,
// a kernel on managed memory and one on mapped host memory. It is the graph cueflow built for
// that step (node for node, edges included, as `CUEFLOW_GRAPH_DOT` printed it). Each run
// writes the host buffers, instantiates, launches twice (the start node disabled after the
// first launch, as cueflow's C3 does), synchronizes and reads the managed memory back.
//
//   switch_while_probe RUNS MODE
//
// MODE 0: as cueflow (managed memory prefetched to the device before each launch, C6).
// MODE 1: no prefetch.                MODE 2: device memory instead of managed memory.
// MODE 3: device memory instead of mapped memory (the last kernel's output).
// MODE 4: device memory instead of registered memory (the two copies are device copies).
// MODE 5: no while node.              MODE 6: no switch node.
// MODE 7: the switch node's bodies emptied.
// MODE 8: an edge from the while node to the mapped-memory kernel (they no longer overlap).
// MODE 9: an edge from the mapped-memory kernel to the while node.
// MODE 10: as 3, with the switch's body 0 run (its first kernel writes mapped memory).
// MODE 11: as 3, with a kernel on mapped memory launched on another stream after each launch.
//
// Seen on two H200s (CUDA 13 driver), 1,000 or 3,000 runs a try: mode 0 failed at runs 7,
// 238, 24, 6 and 23; mode 1 at 438 and 2672 (one try of 1,000 clean); mode 2 at 609 and 2177;
// mode 4 at 743 and 645; mode 11 at 9 and 3. Clean: modes 3 (9,000 runs), 5, 6, 10 (6,000
// each), 7 (1,000), 8 and 9 (9,000 each).
//
//   nvcc -arch=sm_90 -std=c++17 -o switch_while_probe switch_while_probe.cu
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
typedef unsigned long long u64;
__global__ void fill(float* x, float v, u64 n) { u64 i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
__global__ void scale(float* x, float f, u64 n) { u64 i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= f; }
__global__ void saxpy(float a, const float* x, float* y, u64 n) { u64 i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i]; }
__global__ void set_cond(cudaGraphConditionalHandle h, unsigned v) { cudaGraphSetConditional(h, v); }
__global__ void while_step(unsigned* count, cudaGraphConditionalHandle h, unsigned limit) { unsigned c = ++count[0]; cudaGraphSetConditional(h, c < limit ? 1u : 0u); }

static cudaGraphNode_t add_cond(cudaGraph_t g, const cudaGraphNode_t* deps, int nd, cudaGraphConditionalHandle h, cudaGraphConditionalNodeType t, int size, cudaGraph_t* bodies) {
  cudaGraphNodeParams c = {}; c.type = cudaGraphNodeTypeConditional; c.conditional.handle = h;
  c.conditional.type = t; c.conditional.size = size; cudaGraphNode_t n;
#if CUDART_VERSION >= 13000
  CK(cudaGraphAddNode(&n, g, deps, nullptr, nd, &c));
#else
  CK(cudaGraphAddNode(&n, g, deps, nd, &c));
#endif
  for (int i = 0; i < size; i++) bodies[i] = c.conditional.phGraph_out[i];
  return n;
}
static cudaGraphNode_t kernel(cudaGraph_t g, const cudaGraphNode_t* deps, int nd, void* f, void** args, int threads) {
  cudaKernelNodeParams k = {}; k.func = f; k.gridDim = dim3(1); k.blockDim = dim3(threads); k.kernelParams = args;
  cudaGraphNode_t n; CK(cudaGraphAddKernelNode(&n, g, deps, nd, &k)); return n;
}
static cudaGraphNode_t copy(cudaGraph_t g, const cudaGraphNode_t* deps, int nd, void* dst, const void* src, size_t bytes) {
  cudaGraphNode_t n; CK(cudaGraphAddMemcpyNode1D(&n, g, deps, nd, dst, src, bytes, cudaMemcpyDefault)); return n;
}

int main(int argc, char** argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 200;
  int mode = argc > 2 ? atoi(argv[2]) : 0;
  const int N = 64;
  CK(cudaSetDevice(0));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *d0, *d1, *d2; unsigned* counter;
  CK(cudaMallocAsync(&d0, N * 4, s)); CK(cudaMallocAsync(&d1, N * 4, s)); CK(cudaMallocAsync(&d2, N * 4, s));
  CK(cudaMallocAsync(&counter, 4, s));
  float* g; if (mode == 2) CK(cudaMalloc(&g, N * 4)); else CK(cudaMallocManaged(&g, N * 4));
  float* m; if (mode == 3) CK(cudaMalloc(&m, N * 4)); else CK(cudaHostAlloc(&m, N * 4, cudaHostAllocMapped));
  // The last kernel's output: mapped memory `m`, or device memory in modes 3, 10 and 11.
  float* y = m; if (mode == 10 || mode == 11) CK(cudaMalloc(&y, N * 4));
  cudaStream_t s2; CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  float* r; if (mode == 4) CK(cudaMalloc(&r, N * 4)); else { r = (float*)malloc(N * 4); CK(cudaHostRegister(r, N * 4, 0)); }
  CK(cudaStreamSynchronize(s));
  cudaMemLocation here = {}; here.type = cudaMemLocationTypeDevice; here.id = 0;
  for (int run = 0; run < runs; run++) {
    if (mode != 2) for (int i = 0; i < N; i++) g[i] = 1.0f;
    if (mode != 3) for (int i = 0; i < N; i++) m[i] = 2.0f;
    if (mode != 4) for (int i = 0; i < N; i++) r[i] = 3.0f;
    cudaGraph_t gr; CK(cudaGraphCreate(&gr, 0));
    cudaGraphConditionalHandle hw = 0, hs = 0;
    if (mode != 5) CK(cudaGraphConditionalHandleCreate(&hw, gr, 0, 0));
    if (mode != 6) CK(cudaGraphConditionalHandleCreate(&hs, gr, mode == 10 ? 0 : 1, cudaGraphCondAssignDefault));
    u64 n64 = N, n32 = N / 2, n16 = N / 4; unsigned zero = 0, one = 1, limit = 3;
    float six = 6, four = 4, two = 2, m5 = -5, a1 = 1;
    void* a_start[] = {&hw, &zero};
    cudaGraphNode_t n0;
    if (mode != 5) n0 = kernel(gr, 0, 0, (void*)set_cond, a_start, 1); else CK(cudaGraphAddEmptyNode(&n0, gr, 0, 0));
    void* a_fill_g[] = {&g, &six, &n64}; cudaGraphNode_t n1 = kernel(gr, &n0, 1, (void*)fill, a_fill_g, 256);
    cudaGraphNode_t n2 = copy(gr, &n1, 1, r, d2, N * 2);  // D2.h0 -> R.h0
    cudaGraphNode_t after_switch;
    if (mode != 6) {
      cudaGraphNode_t deps[2] = {n1, n2}; cudaGraph_t b[2];
      after_switch = add_cond(gr, deps, 2, hs, cudaGraphCondTypeSwitch, 2, b);
      if (mode != 7) {
        void* f0[] = {&m, &four, &n64}; cudaGraphNode_t k0 = kernel(b[0], 0, 0, (void*)fill, f0, 256);
        float* d1q2 = d1 + N / 2; void* s0[] = {&d1q2, &two, &n16}; kernel(b[0], &k0, 1, (void*)scale, s0, 256);
        cudaGraphNode_t c1 = copy(b[1], 0, 0, d0, d2, N * 4);
        void* s1[] = {&d2, &two, &n16}; kernel(b[1], &c1, 1, (void*)scale, s1, 256);
      }
    } else {
      cudaGraphNode_t deps[2] = {n1, n2}; CK(cudaGraphAddEmptyNode(&after_switch, gr, deps, 2));
    }
    cudaGraphNode_t d4[3] = {n1, n2, after_switch}; copy(gr, d4, 3, d1, r, N * 4);  // R -> D1
    float* d2h1 = d2 + N / 2; void* a_fill_d2[] = {&d2h1, &m5, &n32};
    cudaGraphNode_t d5[2] = {n2, after_switch}; cudaGraphNode_t n5 = kernel(gr, d5, 2, (void*)fill, a_fill_d2, 256);
    cudaMemsetParams ms = {}; ms.dst = counter; ms.value = 0; ms.elementSize = 1; ms.width = 4; ms.height = 1;
    cudaGraphNode_t n6; CK(cudaGraphAddMemsetNode(&n6, gr, &n0, 1, &ms));
    void* a_const[] = {&hw, &one}; void* a_step[] = {&counter, &hw, &limit};
    void* a_saxpy[] = {&a1, &d2, &y, &n64};
    cudaGraphNode_t d9[4] = {n2, after_switch, n5, 0};
    cudaGraphNode_t n7 = 0, n8 = 0, n9 = 0;
    if (mode == 9) n9 = kernel(gr, d9, 3, (void*)saxpy, a_saxpy, 256);
    if (mode != 5) {
      n7 = kernel(gr, &n0, 1, (void*)set_cond, a_const, 1);
      cudaGraphNode_t d8[4] = {after_switch, n6, n7, mode == 9 ? n9 : 0}; cudaGraph_t b;
      n8 = add_cond(gr, d8, mode == 9 ? 4 : 3, hw, cudaGraphCondTypeWhile, 1, &b);
      kernel(b, 0, 0, (void*)while_step, a_step, 1);
    }
    d9[3] = n8;
    if (mode != 9) n9 = kernel(gr, d9, mode == 8 ? 4 : 3, (void*)saxpy, a_saxpy, 256);
    cudaGraphExec_t e; CK(cudaGraphInstantiate(&e, gr, 0));
    for (int launch = 0; launch < 2; launch++) {
      if (mode != 1 && mode != 2) CK(cudaMemPrefetchAsync(g, N * 4, here, 0, s));
      CK(cudaGraphLaunch(e, s));
      if (mode == 11) saxpy<<<1, 256, 0, s2>>>(1.0f, d1, m, N);
      if (launch == 0 && mode != 5) CK(cudaGraphNodeSetEnabled(e, n0, 0));
    }
    cudaError_t err = cudaStreamSynchronize(s);
    if (!err) err = cudaStreamSynchronize(s2);
    if (err) { printf("mode %d run %d: %s\n", mode, run, cudaGetErrorName(err)); return 1; }
    volatile float sink = 0; if (mode != 2) for (int i = 0; i < N; i++) sink += g[i];
    CK(cudaGraphExecDestroy(e)); CK(cudaGraphDestroy(gr));
  }
  printf("mode %d: %d runs ok\n", mode, runs);
}

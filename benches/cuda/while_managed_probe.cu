// Raw CUDA probe for the differential fuzzer's F11 fault: a graph with a while node beside
// kernels that fault pages of managed memory in. The graph is the one cueflow built for the
// fuzzer's program (an H2D copy from registered memory, then a kernel; a memset and a
// set-condition kernel, then a while node whose body counts to 3; a kernel on managed memory,
// then one on device memory, then an empty node). The host touches a quarter of the managed
// memory before each launch; each run instantiates, launches and synchronizes once.
//
//   while_managed_probe RUNS MODE
//
// MODE 0: as the fuzzer's program (the host writes the managed memory).
// MODE 1: no while node.        MODE 2: the host does not touch the managed memory.
// MODE 3: device memory instead of managed memory.
// MODE 4: as 0, with the managed memory prefetched to the device before each launch
//         (what cueflow does, C6 of backend/cuda/graph_cond.rs).
// MODE 5: as 0, but the host reads the managed memory instead of writing it.
// MODE 6: as 0, with an if node instead of the while node.
// MODE 7: as 0, with an edge from the while node to the managed-memory kernel (no overlap).
//
// Seen on two H200s (CUDA 13 driver), 400-500 runs a try: modes 0 and 5 fail with
// cudaErrorLaunchFailure within 30 to 75 runs (four tries of mode 0, one of mode 5); modes
// 1, 2, 3 ran 400 runs clean once each, modes 4 and 6 1,000 runs clean (two tries each).
// Later, 1,000 runs a try: mode 0 failed at runs 64 and 27, mode 7 ran clean four times.
//
//   nvcc -arch=sm_90 -std=c++17 -o while_managed_probe while_managed_probe.cu
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
__global__ void scale(float* x, float f, unsigned long long n) { unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= f; }
__global__ void cond_const(cudaGraphConditionalHandle h, unsigned v) { cudaGraphSetConditional(h, v); }
__global__ void while_step(unsigned* count, cudaGraphConditionalHandle h, unsigned limit) { unsigned c = ++count[0]; cudaGraphSetConditional(h, c < limit ? 1u : 0u); }
int main(int argc, char** argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 200;
  int variant = argc > 2 ? atoi(argv[2]) : 0;  // MODE above
  const int N = 64;
  CK(cudaSetDevice(0));
  cudaStream_t s; CK(cudaStreamCreate(&s));
  float *d0, *d1; unsigned* counter;
  CK(cudaMallocAsync(&d0, N * 4, s)); CK(cudaMallocAsync(&d1, N * 4, s)); CK(cudaMallocAsync(&counter, 4, s));
  float* g; if (variant == 3) CK(cudaMalloc(&g, N * 4)); else CK(cudaMallocManaged(&g, N * 4));
  float* r = (float*)malloc(N * 4); CK(cudaHostRegister(r, N * 4, 0));
  for (int i = 0; i < N; i++) r[i] = 1.0f;
  CK(cudaStreamSynchronize(s));
  for (int run = 0; run < runs; run++) {
    volatile float sink = 0;
    if (variant == 5) { for (int i = 32; i < 48; i++) sink += g[i]; }
    else if (variant != 2 && variant != 3) for (int i = 32; i < 48; i++) g[i] = 5.0f;
    if (variant == 4) {
#if CUDART_VERSION >= 13000
      cudaMemLocation loc = {}; loc.type = cudaMemLocationTypeDevice; loc.id = 0;
      CK(cudaMemPrefetchAsync(g, N * 4, loc, 0, s));
#else
      CK(cudaMemPrefetchAsync(g, N * 4, 0, s));
#endif
    }
    cudaGraph_t gr; CK(cudaGraphCreate(&gr, 0));
    cudaGraphNode_t cp, sc1, ms, cc, wh, sg, sd, em;
    cudaMemcpy3DParms p = {}; p.srcPtr = make_cudaPitchedPtr(r, N * 4, N, 1); p.dstPtr = make_cudaPitchedPtr(d1 + 48, N * 4, 16, 1);
    p.extent = make_cudaExtent(64, 1, 1); p.kind = cudaMemcpyHostToDevice;
    CK(cudaGraphAddMemcpyNode(&cp, gr, 0, 0, &p));
    auto kernel = [&](cudaGraphNode_t* n, cudaGraph_t in, const cudaGraphNode_t* deps, int nd, void* f, void** args, int threads) {
      cudaKernelNodeParams k = {}; k.func = f; k.gridDim = dim3(1); k.blockDim = dim3(threads); k.kernelParams = args;
      CK(cudaGraphAddKernelNode(n, in, deps, nd, &k)); };
    float two = 2.0f, half = 0.5f; unsigned long long n32 = 32, n64 = 64, n16 = 16;
    float* d1h1 = d1 + 32; void* a1[] = {&d1h1, &two, &n32}; kernel(&sc1, gr, &cp, 1, (void*)scale, a1, 256);
    if (variant != 1) {
      cudaGraphConditionalHandle h; CK(cudaGraphConditionalHandleCreate(&h, gr, 1, cudaGraphCondAssignDefault));
      cudaMemsetParams m = {}; m.dst = counter; m.value = 0; m.elementSize = 1; m.width = 4; m.height = 1;
      CK(cudaGraphAddMemsetNode(&ms, gr, 0, 0, &m));
      unsigned three = 3; void* a2[] = {&h, &three}; kernel(&cc, gr, 0, 0, (void*)cond_const, a2, 1);
      cudaGraphNodeParams c = {}; c.type = cudaGraphNodeTypeConditional; c.conditional.handle = h;
      c.conditional.type = variant == 6 ? cudaGraphCondTypeIf : cudaGraphCondTypeWhile; c.conditional.size = 1;
      cudaGraphNode_t deps[2] = {ms, cc};
#if CUDART_VERSION >= 13000
      CK(cudaGraphAddNode(&wh, gr, deps, nullptr, 2, &c));
#else
      CK(cudaGraphAddNode(&wh, gr, deps, 2, &c));
#endif
      cudaGraph_t body = c.conditional.phGraph_out[0]; cudaGraphNode_t st;
      unsigned limit = 3; void* a3[] = {&counter, &h, &limit}; kernel(&st, body, 0, 0, (void*)while_step, a3, 1);
    }
    void* a4[] = {&g, &two, &n64}; kernel(&sg, gr, variant == 7 ? &wh : 0, variant == 7 ? 1 : 0, (void*)scale, a4, 256);
    float* d0q1 = d0 + 16; void* a5[] = {&d0q1, &half, &n16}; kernel(&sd, gr, &sg, 1, (void*)scale, a5, 256);
    CK(cudaGraphAddEmptyNode(&em, gr, &sd, 1));
    cudaGraphExec_t e; CK(cudaGraphInstantiate(&e, gr, 0));
    CK(cudaGraphLaunch(e, s));
    cudaError_t err = cudaStreamSynchronize(s);
    if (err) { printf("run %d: %s\n", run, cudaGetErrorName(err)); return 1; }
    CK(cudaGraphExecDestroy(e)); CK(cudaGraphDestroy(gr));
  }
  printf("variant %d: %d runs ok\n", variant, runs);
}

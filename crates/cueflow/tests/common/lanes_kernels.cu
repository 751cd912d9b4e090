// Kernels for the work-item-loop compiler (tests/cuda_c_lanes.rs, examples/cuda_c_lanes.rs):
// one per transformation rule, and the research note's four reference kernels K1-K4.

// K1 / divergent return: bounds guard, a uniform loop of dependent fused multiply-adds.
extern "C" __global__ void k1_compute(float* data, unsigned int iters, unsigned long long n)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = data[i];
#pragma unroll 8
    for (unsigned int k = 0; k < iters; ++k) x = __fmaf_rn(x, 0.999f, 0.001f);
    data[i] = x;
}

// K2: per-thread trip count and an if/else inside the loop.
extern "C" __global__ void k2_diverge(float* data, const unsigned* cnt, unsigned long long n)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = data[i];
    unsigned c = cnt[i];
    for (unsigned k = 0; k < c; ++k) {
        if (x > 0.5f) x = __fmaf_rn(x, 0.999f, 0.001f);
        else x = __fmaf_rn(x, 1.001f, 0.002f);
    }
    data[i] = x;
}

// K3: compute, then a shared-memory tree reduction with a barrier inside a uniform loop
// (blockDim.x == 256); shared memory indexed by the thread.
extern "C" __global__ void k3_reduce_smem(const float* in, float* out, unsigned iters, unsigned long long n)
{
    __shared__ float s[256];
    const unsigned t = threadIdx.x;
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + t;
    float x = i < n ? in[i] : 0.0f;
    for (unsigned k = 0; k < iters; ++k) x = __fmaf_rn(x, 0.999f, 0.001f);
    s[t] = x;
    __syncthreads();
    for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
        if (t < st) s[t] += s[t + st];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// K4: compute, then warp-shuffle reductions, shared memory across warps.
extern "C" __global__ void k4_reduce_shfl(const float* in, float* out, unsigned iters, unsigned long long n)
{
    __shared__ float w[32];
    const unsigned t = threadIdx.x;
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + t;
    float x = i < n ? in[i] : 0.0f;
    for (unsigned k = 0; k < iters; ++k) x = __fmaf_rn(x, 0.999f, 0.001f);
    for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
    if ((t & 31) == 0) w[t >> 5] = x;
    __syncthreads();
    if (t < 32) {
        x = t < blockDim.x / 32 ? w[t] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
        if (t == 0) out[blockIdx.x] = x;
    }
}

// A divergent (grid-stride) loop with a shuffle inside: pairs of lanes swap values.
extern "C" __global__ void swap_pairs(const int* in, int* out, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        int v = in[i];
        int o = __shfl_xor_sync(0xffffffffu, v, 1);
        out[i] = v * 1000 + o;
    }
}

// A per-thread value live across a barrier, and shared memory read at another thread's index.
extern "C" __global__ void rotate_block(const int* in, int* out)
{
    __shared__ int s[128];
    const unsigned t = threadIdx.x;
    const int mine = in[blockIdx.x * blockDim.x + t] * 3;
    s[t] = mine + 1;
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = mine * 100 + s[(t + 1) % blockDim.x];
}

// Atomics on shared and global memory after a divergent return.
extern "C" __global__ void count_mod(const unsigned* in, unsigned n, unsigned* bins)
{
    __shared__ unsigned local[8];
    if (threadIdx.x < 8) local[threadIdx.x] = 0;
    __syncthreads();
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&local[in[i] % 8], 1u);
    __syncthreads();
    if (threadIdx.x < 8) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

// A barrier inside a divergent if: the compiler leaves it to fibers.
extern "C" __global__ void divergent_barrier(int* data)
{
    if (threadIdx.x < 16) {
        data[threadIdx.x] += 1;
        __syncthreads();
    }
}

// A divergent if/else whose branches hold loops (per-lane masks), after a divergent return.
extern "C" __global__ void branch_loops(int* data, const int* cnt, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = data[i];
    if (i % 3 == 0) {
        for (int k = 0; k < cnt[i]; ++k) x += k;
    } else {
        for (int k = 0; k < 3; ++k) x = x * 2 - k;
    }
    data[i] = x;
}

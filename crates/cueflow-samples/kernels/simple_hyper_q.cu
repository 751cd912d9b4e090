// simpleHyperQ's kernels: two identical clock-spinning kernels (two names, so that a profile
// shows kernel_B waiting for kernel_A of its own stream only) and a one-warp reduction.
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// Runs for at least `clock_count` ticks of the multiprocessor's clock and stores the ticks seen.
__device__ void spin_clocks(clock_t *d_o, clock_t clock_count)
{
    const unsigned int start = (unsigned int)clock();
    clock_t seen = 0;
    while (seen < clock_count) {
        seen = (clock_t)((unsigned int)clock() - start); // right modulo 2^32
    }
    d_o[0] = seen;
}

extern "C" __global__ void kernel_A(clock_t *d_o, clock_t clock_count)
{
    spin_clocks(d_o, clock_count);
}

extern "C" __global__ void kernel_B(clock_t *d_o, clock_t clock_count)
{
    spin_clocks(d_o, clock_count);
}

// Launched as <<<1, 32>>> over N counts (N may exceed 32).
extern "C" __global__ void sum(clock_t *d_clocks, int N)
{
    cg::thread_block block = cg::this_thread_block();
    __shared__ clock_t partial[32];

    clock_t mine = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        mine += d_clocks[i];
    }
    partial[threadIdx.x] = mine;
    cg::sync(block);

    for (int half = warpSize / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            partial[threadIdx.x] += partial[threadIdx.x + half];
        }
        cg::sync(block);
    }
    if (threadIdx.x == 0) {
        d_clocks[0] = partial[0];
    }
}

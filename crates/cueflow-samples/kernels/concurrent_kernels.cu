// concurrentKernels' kernels: one that does no work but runs for at least `clock_count` clock
// ticks of its multiprocessor and stores how many ticks it saw, and a one-warp reduction of
// those counts.
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

extern "C" __global__ void clock_block(clock_t *d_o, clock_t clock_count)
{
    // 32-bit clock readings: their difference is right modulo 2^32 even across a wrap.
    const unsigned int start = (unsigned int)clock();
    clock_t seen = 0;
    while (seen < clock_count) {
        const unsigned int now = (unsigned int)clock();
        seen = (clock_t)(now - start);
    }
    d_o[0] = seen;
}

// Launched as <<<1, 32>>>: each lane adds a strided share, then a tree in shared memory.
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

    for (int half = 16; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            partial[threadIdx.x] += partial[threadIdx.x + half];
        }
        cg::sync(block);
    }
    if (threadIdx.x == 0) {
        d_clocks[0] = partial[0];
    }
}

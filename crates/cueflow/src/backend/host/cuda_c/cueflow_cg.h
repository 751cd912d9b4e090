// cueflow host prelude: the part of cooperative_groups that kernels commonly use (thread blocks,
// tiles of up to 32 threads, coalesced groups, cg::reduce), over the prelude's barriers and warp
// operations. `#include <cooperative_groups.h>` (and `cooperative_groups/reduce.h`) find this.
#ifndef CUEFLOW_HOST_CG_H
#define CUEFLOW_HOST_CG_H

namespace cooperative_groups {

static inline unsigned cf_block_rank()
{
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

class thread_block {
public:
    void sync() const { __syncthreads(); }
    unsigned long long thread_rank() const { return cf_block_rank(); }
    unsigned long long size() const { return (unsigned long long)blockDim.x * blockDim.y * blockDim.z; }
    unsigned long long num_threads() const { return size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
};

static inline thread_block this_thread_block() { return thread_block(); }

class grid_group {
public:
    void sync() const
    {
        if (gridDim.x * gridDim.y * gridDim.z == 1)
            __syncthreads();
        else
            cueflow::fault("grid_group::sync() across blocks is not supported on the host backend");
    }
    unsigned long long thread_rank() const
    {
        unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
        return b * blockDim.x * blockDim.y * blockDim.z + cf_block_rank();
    }
    unsigned long long size() const
    {
        return (unsigned long long)gridDim.x * gridDim.y * gridDim.z * blockDim.x * blockDim.y * blockDim.z;
    }
    unsigned long long num_threads() const { return size(); }
    bool is_valid() const { return true; }
};

static inline grid_group this_grid() { return grid_group(); }

// A tile of N (a power of two, at most 32) consecutive threads of a warp.
template <unsigned N> class thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiles of 1, 2, 4, 8, 16 or 32 threads");
    static unsigned lane() { return cf_block_rank() % 32; }

public:
    static unsigned mask()
    {
        unsigned m = N == 32 ? 0xffffffffu : ((1u << N) - 1);
        return m << (lane() & ~(N - 1));
    }
    void sync() const { __syncwarp(mask()); }
    unsigned long long thread_rank() const { return lane() & (N - 1); }
    unsigned long long size() const { return N; }
    unsigned long long num_threads() const { return N; }
    unsigned long long meta_group_rank() const { return cf_block_rank() / N; }
    unsigned long long meta_group_size() const
    {
        return ((unsigned long long)blockDim.x * blockDim.y * blockDim.z + N - 1) / N;
    }
    template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, N); }
    template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, N); }
    template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, N); }
    template <class T> T shfl_xor(T v, unsigned m) const { return __shfl_xor_sync(mask(), v, m, N); }
    int any(int p) const { return __ballot_sync(mask(), p) != 0; }
    int all(int p) const { return __ballot_sync(mask(), p) == (mask() & __activemask()); }
    unsigned ballot(int p) const { return __ballot_sync(mask(), p) >> (lane() & ~(N - 1)); }
};

template <unsigned N, class Parent> static inline thread_block_tile<N> tiled_partition(const Parent&)
{
    return thread_block_tile<N>();
}

// The threads of the warp that are active here.
class coalesced_group {
    unsigned m;

public:
    explicit coalesced_group(unsigned mask) : m(mask) {}
    void sync() const { __syncwarp(m); }
    unsigned long long size() const { return __popc(m); }
    unsigned long long num_threads() const { return size(); }
    unsigned long long thread_rank() const { return __popc(m & ((1u << (cf_block_rank() % 32)) - 1)); }
    template <class T> T shfl(T v, int rank) const
    {
        unsigned mm = m;
        for (int i = 0; i < rank; ++i)
            mm &= mm - 1;
        return __shfl_sync(m, v, mm ? __ffs(mm) - 1 : 0);
    }
    int any(int p) const { return __ballot_sync(m, p) != 0; }
    int all(int p) const { return __ballot_sync(m, p) == m; }
    unsigned ballot(int p) const { return __ballot_sync(m, p); }
};

static inline coalesced_group coalesced_threads() { return coalesced_group(__activemask()); }

template <class G> static inline void sync(const G& g) { g.sync(); }

template <class T> struct plus {
    T operator()(T a, T b) const { return a + b; }
};
template <class T> struct less {
    T operator()(T a, T b) const { return a < b ? a : b; }
};
template <class T> struct greater {
    T operator()(T a, T b) const { return a > b ? a : b; }
};
template <class T> struct bit_and {
    T operator()(T a, T b) const { return a & b; }
};
template <class T> struct bit_or {
    T operator()(T a, T b) const { return a | b; }
};
template <class T> struct bit_xor {
    T operator()(T a, T b) const { return a ^ b; }
};

// cg::reduce over a tile: a butterfly of shfl_xor, every lane gets the result.
template <unsigned N, class T, class Op> static inline T reduce(const thread_block_tile<N>& g, T v, Op op)
{
    for (unsigned o = N / 2; o > 0; o /= 2)
        v = op(v, g.shfl_xor(v, o));
    return v;
}

} // namespace cooperative_groups

#endif

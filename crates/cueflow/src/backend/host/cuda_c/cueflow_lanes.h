// cueflow host prelude, part 4: the runtime of kernels compiled to work-item loops (a block's
// threads as the lanes of loops; `lanes/` in the Rust source generates the kernels' code). Included
// at the end of cueflow_prelude.h.
#ifndef CUEFLOW_HOST_LANES_H
#define CUEFLOW_HOST_LANES_H

// Threads per chunk of a barrier-free run (R5), and the most threads of a block.
#define CF_W 64
#define CF_MAXT 1024

namespace cueflow {
namespace lanes {

static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }

// Narrow [lo, hi) to the lanes where f holds, f being true then false over it (`prefix`) or
// false then true: the first lane where f(lane) != prefix is the boundary.
template <class F> static inline void narrow(unsigned& lo, unsigned& hi, bool prefix, F f)
{
    unsigned a = lo, b = hi;
    while (a < b) {
        unsigned m = a + (b - a) / 2;
        if ((bool)f(m) == prefix)
            a = m + 1;
        else
            b = m;
    }
    if (prefix)
        hi = a < hi ? a : hi;
    else
        lo = a;
    if (lo > hi)
        lo = hi;
}

// Shuffles over a snapshot of the warp's operands: `p` points to this lane's entry (the array
// is padded by 32 on both sides, so every read is in bounds and the loads vectorize), `l` is
// the lane. Out-of-range sources keep the lane's own value, as the fibers' shuffles do.
template <class T> static inline T shfl_down(const T* p, unsigned l, unsigned d, int w = 32)
{
    T a = p[d & 31u], o = p[0];
    return (int)((l & (unsigned)(w - 1)) + d) < w ? a : o;
}
// shfl_down with a source index per lane (a gather): what R4's snapshot avoids.
template <class T> static inline T shfl_down_gather(const T* p, unsigned l, unsigned d, int w = 32)
{
    unsigned s = (int)((l & (unsigned)(w - 1)) + d) < w ? l + d : l;
    return p[(int)s - (int)l];
}
template <class T> static inline T shfl_up(const T* p, unsigned l, unsigned d, int w = 32)
{
    T a = p[-(int)(d & 31u)], o = p[0];
    return (l & (unsigned)(w - 1)) >= d ? a : o;
}
template <class T> static inline T shfl_xor(const T* p, unsigned l, int m, int w = 32)
{
    int s = (int)l ^ m;
    T a = p[(s & 31) - (int)l], o = p[0];
    return (s & ~(w - 1)) == ((int)l & ~(w - 1)) ? a : o;
}
template <class T> static inline T shfl_idx(const T* p, unsigned l, int src, int w = 32)
{
    int s = ((int)l & ~(w - 1)) + (src & (w - 1));
    return p[(s & 31) - (int)l];
}

[[noreturn]] static inline void assert_fail(uint3 tid, const char* e, const char* file, unsigned line, const char* fn)
{
    ::threadIdx = tid;
    __assert_fail(e, file, line, fn);
}
[[noreturn]] static inline void trap(uint3 tid)
{
    ::threadIdx = tid;
    __trap();
}

template <class... A, size_t... I>
static void call(void (*k)(unsigned, A...), unsigned n, void** p, std::index_sequence<I...>)
{
    k(n, cueflow::param<typename std::decay<A>::type>(p[I])...);
}

// Run blocks [begin, end) of `l` through the lanes function `k` (a 1-D block of at most
// CF_MAXT threads).
template <class... A> static int run(void (*k)(unsigned, A...), const cueflow_launch* l, void** params)
{
    install_handlers();
    ensure_altstack();
    gridDim = dim3(l->grid[0], l->grid[1], l->grid[2]);
    blockDim = dim3(l->block[0], l->block[1], l->block[2]);
    st.msg = l->fault_msg;
    st.msg_len = l->fault_msg_len;
    st.block = nullptr;
    int rc = 0;
    if (sigsetjmp(st.jmp, 1) != 0) {
        rc = 1;
    } else {
        st.in_kernel = 1;
        st.lanes = 1;
        for (uint32_t lb = l->block_begin; lb < l->block_end; ++lb) {
            blockIdx.x = lb % l->grid[0];
            blockIdx.y = (lb / l->grid[0]) % l->grid[1];
            blockIdx.z = lb / (l->grid[0] * l->grid[1]);
            threadIdx = uint3{0, 0, 0};
            call(k, l->block[0], params, std::index_sequence_for<A...>{});
        }
    }
    st.in_kernel = 0;
    st.lanes = 0;
    return rc;
}

} // namespace lanes
} // namespace cueflow

#define CUEFLOW_PATH(sym, text)                                                                    \
    extern "C" __attribute__((visibility("default"))) const char* cueflow_path_##sym() { return text; }

// The entry of a kernel compiled to lanes: 1-D blocks of at most CF_MAXT threads run as lanes,
// other shapes as fibers.
#define CUEFLOW_LANES_ENTRY(sym, kernel, lanes_fn)                                                 \
    extern "C" __attribute__((visibility("default"))) int cueflow_run_##sym(                     \
        const cueflow_launch* l, void** p)                                                         \
    {                                                                                              \
        if (l->block[1] == 1 && l->block[2] == 1 && l->block[0] <= CF_MAXT)                        \
            return cueflow::lanes::run(lanes_fn, l, p);                                            \
        return cueflow::run(kernel, l, p);                                                         \
    }                                                                                              \
    extern "C" __attribute__((visibility("default"))) unsigned cueflow_params_##sym(             \
        unsigned* sizes, unsigned cap)                                                             \
    {                                                                                              \
        return cueflow::param_sizes(kernel, sizes, cap);                                           \
    }                                                                                              \
    CUEFLOW_PATH(sym, "lanes")

#endif

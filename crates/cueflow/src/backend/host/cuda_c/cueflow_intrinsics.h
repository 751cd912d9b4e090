// cueflow host prelude, part 2: barriers, warp operations, votes, atomics and arithmetic
// intrinsics over the runtime in cueflow_prelude.h (included from there, after it).
#ifndef CUEFLOW_HOST_INTRINSICS_H
#define CUEFLOW_HOST_INTRINSICS_H

// ---------------------------------------------------------------------------------------------
// Barriers, warps, votes.
static inline void __syncthreads() { cueflow::block_barrier(0); }
static inline int __syncthreads_count(int p) { return cueflow::block_barrier(p); }
static inline int __syncthreads_and(int p)
{
    // Threads that exited do not count against it.
    return (unsigned)cueflow::block_barrier(p) == cueflow::st.block->bar_waiters;
}
static inline int __syncthreads_or(int p) { return cueflow::block_barrier(p) != 0; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { cueflow::warp_exchange(mask, 0); }
// The lanes that execute this __activemask together: the live lanes of the warp that reach it
// (a warp synchronization among them on the host, where lanes otherwise run one after another).
static inline unsigned __activemask()
{
    cueflow::warp_exchange(cueflow::active_mask(), 0);
    return cueflow::self()->group;
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    unsigned long long* row = cueflow::warp_exchange(mask, pred != 0);
    unsigned r = 0;
    unsigned group = cueflow::self()->group; // the lanes that took part
    for (unsigned i = 0; i < 32; ++i)
        if ((mask & group & (1u << i)) && row[i])
            r |= 1u << i;
    return r;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred)
{
    unsigned b = __ballot_sync(mask, pred);
    return b == (mask & cueflow::self()->group);
}
static inline unsigned __ballot(int pred) { return __ballot_sync(0xffffffffu, pred); }

namespace cueflow {
template <class T> static inline unsigned long long to_bits(T v)
{
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <class T> static inline T from_bits(unsigned long long b)
{
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}
// Exchange `v` in the warp, then read lane `src(lane)` (or keep `v` when it is out of range).
template <class T, class F> static inline T shuffle(unsigned mask, T v, F src)
{
    unsigned long long* row = warp_exchange(mask, to_bits(v));
    int s = src((int)lane_id());
    if (s < 0 || s > 31)
        return v;
    return from_bits<T>(row[s]);
}
} // namespace cueflow

template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return cueflow::shuffle(mask, v, [&](int lane) { return (lane & ~(width - 1)) + (src & (width - 1)); });
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    return cueflow::shuffle(mask, v, [&](int lane) { return (lane & (width - 1)) >= (int)d ? lane - (int)d : -1; });
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    return cueflow::shuffle(mask, v, [&](int lane) { return (lane & (width - 1)) + (int)d < width ? lane + (int)d : -1; });
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    return cueflow::shuffle(mask, v, [&](int lane) {
        int s = lane ^ m;
        return (s & ~(width - 1)) == (lane & ~(width - 1)) ? s : -1;
    });
}
#define CF_WARP_REDUCE(name, T, OP)                                                                \
    static inline T name(unsigned mask, T v)                                                       \
    {                                                                                              \
        unsigned long long* row = cueflow::warp_exchange(mask, (unsigned long long)v);             \
        bool first = true;                                                                         \
        T r = 0;                                                                                   \
        for (unsigned i = 0; i < 32; ++i)                                                          \
            if (mask & cueflow::self()->group & (1u << i)) {                                      \
                T x = (T)row[i];                                                                   \
                r = first ? x : OP;                                                                \
                first = false;                                                                     \
            }                                                                                      \
        return r;                                                                                  \
    }
CF_WARP_REDUCE(__reduce_add_sync, unsigned, r + x)
CF_WARP_REDUCE(__reduce_add_sync, int, r + x)
CF_WARP_REDUCE(__reduce_min_sync, unsigned, (x < r ? x : r))
CF_WARP_REDUCE(__reduce_min_sync, int, (x < r ? x : r))
CF_WARP_REDUCE(__reduce_max_sync, unsigned, (x > r ? x : r))
CF_WARP_REDUCE(__reduce_max_sync, int, (x > r ? x : r))
CF_WARP_REDUCE(__reduce_and_sync, unsigned, r & x)
CF_WARP_REDUCE(__reduce_or_sync, unsigned, r | x)
CF_WARP_REDUCE(__reduce_xor_sync, unsigned, r ^ x)
#undef CF_WARP_REDUCE

// ---------------------------------------------------------------------------------------------
// Atomics (global and shared memory alike; relaxed, as CUDA's are).
#define CF_ATOMIC_INT(T)                                                                           \
    static inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }    \
    static inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }    \
    static inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }    \
    static inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }      \
    static inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }    \
    static inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }  \
    static inline T atomicCAS(T* a, T c, T v)                                                      \
    {                                                                                              \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);          \
        return c;                                                                                  \
    }                                                                                              \
    static inline T atomicMin(T* a, T v)                                                           \
    {                                                                                              \
        T o = __atomic_load_n(a, __ATOMIC_RELAXED);                                                \
        while (v < o && !__atomic_compare_exchange_n(a, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return o;                                                                                  \
    }                                                                                              \
    static inline T atomicMax(T* a, T v)                                                           \
    {                                                                                              \
        T o = __atomic_load_n(a, __ATOMIC_RELAXED);                                                \
        while (v > o && !__atomic_compare_exchange_n(a, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return o;                                                                                  \
    }
CF_ATOMIC_INT(int)
CF_ATOMIC_INT(unsigned int)
CF_ATOMIC_INT(unsigned long long)
CF_ATOMIC_INT(long long)
#undef CF_ATOMIC_INT
static inline unsigned short atomicCAS(unsigned short* a, unsigned short c, unsigned short v)
{
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return c;
}
namespace cueflow {
template <class T> static inline T atomic_add_float(T* a, T v)
{
    T o;
    __atomic_load(a, &o, __ATOMIC_RELAXED);
    for (;;) {
        T n = o + v;
        if (__atomic_compare_exchange(a, &o, &n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return o;
    }
}
} // namespace cueflow
static inline float atomicAdd(float* a, float v) { return cueflow::atomic_add_float(a, v); }
static inline double atomicAdd(double* a, double v) { return cueflow::atomic_add_float(a, v); }
static inline float atomicExch(float* a, float v) { float o; __atomic_exchange(a, &v, &o, __ATOMIC_RELAXED); return o; }
static inline unsigned atomicInc(unsigned* a, unsigned m)
{
    unsigned o = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(a, &o, o >= m ? 0 : o + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return o;
}
static inline unsigned atomicDec(unsigned* a, unsigned m)
{
    unsigned o = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(a, &o, (o == 0 || o > m) ? m : o - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return o;
}
#define CF_SCOPED(op)                                                                              \
    template <class T, class... R> static inline T op##_block(T* a, R... r) { return op(a, r...); } \
    template <class T, class... R> static inline T op##_system(T* a, R... r) { return op(a, r...); }
CF_SCOPED(atomicAdd)
CF_SCOPED(atomicSub)
CF_SCOPED(atomicExch)
CF_SCOPED(atomicCAS)
CF_SCOPED(atomicMin)
CF_SCOPED(atomicMax)
CF_SCOPED(atomicAnd)
CF_SCOPED(atomicOr)
CF_SCOPED(atomicXor)
#undef CF_SCOPED

// ---------------------------------------------------------------------------------------------
// Arithmetic intrinsics. With -ffp-contract=off and no fast math, + - * / and sqrt are single
// IEEE-754 round-to-nearest operations on the host as on the GPU, so the _rn forms are exact.
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline double __fma_rn(double a, double b, double c) { return __builtin_fma(a, b, c); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// __expf, __logf, __sinf, __cosf, __powf, __sincosf: glibc declares and defines these (the
// same functions as expf...), not the GPU's approximations.
static inline float __fdividef(float a, float b) { return a / b; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
static inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T min(T a, T b) { return a < b ? a : b; }
template <class T> static inline T max(T a, T b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline unsigned long long __cueflow_ns()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + t.tv_nsec;
}
// The host device's clock rate in kHz, found as the host backend finds `clock_rate_khz`
// (sysinfo.rs: cpuinfo_max_freq, else /proc/cpuinfo's `cpu MHz`, else 1 GHz), so a kernel that
// spins `ms * clockRate` ticks of `clock()`/`clock64()` spins `ms` milliseconds, as on a GPU.
static inline unsigned long long __cueflow_read_khz()
{
    unsigned long long khz = 0;
    FILE* f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r");
    if (f) {
        if (fscanf(f, "%llu", &khz) != 1) khz = 0;
        fclose(f);
    }
    if (!khz && (f = fopen("/proc/cpuinfo", "r"))) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            double mhz;
            if (strncmp(line, "cpu MHz", 7) == 0 && sscanf(strchr(line, ':') + 1, "%lf", &mhz) == 1) {
                khz = (unsigned long long)(mhz * 1000.0);
                break;
            }
        }
        fclose(f);
    }
    return khz ? (khz > 0xffffffffull ? 0xffffffffull : khz) : 1000000ull;
}
static inline unsigned long long __cueflow_clock_khz()
{
    static const unsigned long long khz = __cueflow_read_khz();
    return khz;
}
// The multiprocessor's cycle counter: monotonic time in ticks of the host device's clock rate.
static inline unsigned long long clock64()
{
    return (unsigned long long)((unsigned __int128)__cueflow_ns() * __cueflow_clock_khz() / 1000000u);
}
// `clock()` in a kernel is the GPU's 32-bit-wide cycle counter (as a clock_t), not the C
// library's processor time: the prelude's `<time.h>` came first, so later includes of it see
// the macro only where `clock()` is called.
static inline clock_t __cueflow_clock() { return (clock_t)clock64(); }
#define clock() __cueflow_clock()
// The GPU's %globaltimer (nanoseconds): kernels read it with inline PTX under
// `#ifndef __CUEFLOW_HOST__`, and call this on the host backend.
static inline unsigned long long __cueflow_globaltimer() { return __cueflow_ns(); }
static inline void __nanosleep(unsigned ns)
{
    struct timespec t = {0, (long)ns};
    if (ns < 2000)
        sched_yield();
    else
        nanosleep(&t, nullptr);
}

// Conditional nodes (GR9): `cudaGraphSetConditional` as `cueflow::CONDITIONAL_CUDA_H` declares
// it. The handle is the condition's id (`KernelArgs::condition`); the kernel cannot reach the
// condition itself (it may run in the kernel worker process), so a set is recorded in the
// launch's message buffer as `C<16 hex id><8 hex value>\n`, one record per handle (the last
// value wins, as the last store does on a GPU), and the host applies them when the launch's
// blocks returned without a fault (before the node completes, so the conditional node that
// follows sees them).
#define __device_builtin__
#define __cudart_builtin__
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __attribute__((visibility("hidden"))) inline void cudaGraphSetConditional(
    cudaGraphConditionalHandle h, unsigned int value)
{
    char* m = cueflow::st.msg;
    const uint32_t cap = cueflow::st.msg_len;
    if (!m || cap < 27) return;
    char rec[32];
    snprintf(rec, sizeof rec, "C%016llx%08x\n", h, value);
    size_t len = strnlen(m, cap);
    for (size_t at = 0; at + 26 <= len; at += 26) {
        if (memcmp(m + at, rec, 17) == 0) {
            memcpy(m + at, rec, 26);
            return;
        }
    }
    if (len + 27 <= cap) memcpy(m + len, rec, 27);
}

#endif

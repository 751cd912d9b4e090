// cueflow host prelude: the CUDA execution model for CUDA C compiled by the machine's C++
// compiler for the host backend (SPEC HK1). Force-included (-include) before the kernel source.
//
// Threads of a block run as fibers on one OS thread (one block at a time per OS thread), each
// on a small stack of its own; a fiber runs until it reaches a barrier or a warp operation, then
// the next one runs. A barrier releases when every live thread of the block reached it; a warp
// operation when every live lane named in its mask did. So:
//   * threadIdx & co are thread_local variables that the scheduler sets on every switch;
//   * static __shared__ variables are thread_local (one OS thread runs one block at a time, so
//     thread-local storage is per-block storage); dynamic `extern __shared__` arrays all alias
//     one per-OS-thread area of CUEFLOW_DYN_SHARED_MAX bytes (the C++ side defines the names);
//   * atomics are the compiler's __atomic builtins (blocks run on several OS threads).
//
// Entry ABI (shared with the out-of-process worker; change both together):
//   extern "C" int cueflow_run_<entry>(const cueflow_launch* l, void** params);
// runs linear blocks [block_begin, block_end) of the launch; params[i] points to parameter i's
// value (16-byte aligned); returns 0, or nonzero with a NUL-terminated message in fault_msg.
//   extern "C" unsigned cueflow_params_<entry>(unsigned* sizes, unsigned cap);
// writes the parameters' sizes and returns their count.
#ifndef CUEFLOW_HOST_PRELUDE_H
#define CUEFLOW_HOST_PRELUDE_H
#define CUEFLOW_PRELUDE_VERSION 3
#define __CUEFLOW_HOST__ 1
#define __CUDACC__ 1

#include <assert.h>
#include <math.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <utility>
#include <type_traits>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

extern "C" {
struct cueflow_launch {
    uint32_t grid[3], block[3];
    uint32_t dyn_shared;
    uint32_t block_begin, block_end;
    char* fault_msg;
    uint32_t fault_msg_len;
};
}

// ---------------------------------------------------------------------------------------------
// Qualifiers.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __shared__ thread_local
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__
#define __CUDA_ARCH_HOST__ 1
#ifndef CUEFLOW_DYN_SHARED_MAX
#define CUEFLOW_DYN_SHARED_MAX (48 * 1024)
#endif

// ---------------------------------------------------------------------------------------------
// Vector types.
#define CF_VEC2(T, N) struct __attribute__((aligned(2 * sizeof(T)))) N##2 { T x, y; };
#define CF_VEC3(T, N) struct N##3 { T x, y, z; };
#define CF_VEC4(T, N) struct __attribute__((aligned(4 * sizeof(T) > 16 ? 16 : 4 * sizeof(T)))) N##4 { T x, y, z, w; };
#define CF_VEC1(T, N) struct N##1 { T x; };
#define CF_VECS(T, N) CF_VEC1(T, N) CF_VEC2(T, N) CF_VEC3(T, N) CF_VEC4(T, N) \
    static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; } \
    static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; } \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; } \
    static inline N##1 make_##N##1(T x) { return N##1{x}; }
CF_VECS(signed char, char)
CF_VECS(unsigned char, uchar)
CF_VECS(short, short)
CF_VECS(unsigned short, ushort)
CF_VECS(int, int)
CF_VECS(unsigned int, uint)
CF_VECS(long, long)
CF_VECS(unsigned long, ulong)
CF_VECS(long long, longlong)
CF_VECS(unsigned long long, ulonglong)
CF_VECS(float, float)
CF_VECS(double, double)
#undef CF_VECS
#undef CF_VEC1
#undef CF_VEC2
#undef CF_VEC3
#undef CF_VEC4

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;
#define warpSize 32

// Dynamic shared memory: every `extern __shared__ T name[]` of the source is an alias of this
// area (cueflow defines the aliases when it compiles the source), as on the GPU, where all of
// them start at the block's dynamic shared memory.
extern "C" {
__attribute__((aligned(16), visibility("default"))) thread_local char cueflow_dyn_shared_[CUEFLOW_DYN_SHARED_MAX];
}

// ---------------------------------------------------------------------------------------------
// The runtime: fibers, barriers, warps, faults.
namespace cueflow {

enum : int { RUNNABLE = 0, WAIT_BLOCK = 1, WAIT_WARP = 2, DONE = 3 };
static const size_t STACK_BYTES = 256 * 1024;
static const size_t GUARD_BYTES = 4096;

struct Fiber {
    void* sp;
    char* stack;
    int state;
    unsigned lane, warp, linear;
    unsigned mask;      // warp operation's mask
    unsigned gen;       // warp operations this lane made
    unsigned leader;    // lowest lane of the warp operation it was released from
    unsigned group;     // the lanes of that operation
    unsigned long long xval; // value it published at its warp operation
    int pred;           // barrier predicate
    uint3 tid;
    bool started;
};

struct Block {
    Fiber* fibers;
    unsigned n;
    void* sched_sp;
    void (*body)(void*);
    void* body_ctx;
    unsigned long long* snap; // [warps][32 leaders][32 lanes] values of warp operations
    int bar_count;            // result of the last block barrier (__syncthreads_count)
    int bar_preds;            // true predicates at the barrier being reached
    unsigned bar_waiters;     // threads the last block barrier released
    unsigned n_block_wait, n_warp_wait, n_done;
#if !defined(__x86_64__)
    ucontext_t sched_uc;
    ucontext_t* ucs;
#endif
};

struct State {
    Block* block = nullptr;
    Fiber* cur = nullptr;
    char** free_stacks = nullptr;
    size_t n_free = 0, cap_free = 0;
    char** all_stacks = nullptr;
    size_t n_all = 0, cap_all = 0;
    sigjmp_buf jmp;
    volatile int in_kernel = 0;
    int lanes = 0; // the kernel runs as work-item loops (cueflow_lanes.h), not fibers
    char* msg = nullptr;
    uint32_t msg_len = 0;
};
static thread_local State st;

[[noreturn]] static void fault(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void fault(const char* fmt, ...)
{
    if (st.msg && st.msg_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st.msg, st.msg_len, fmt, ap);
        va_end(ap);
    }
    siglongjmp(st.jmp, 1);
}

#if defined(__x86_64__)
extern "C" void cueflow_switch_(void** save, void* to);
asm(R"(
    .text
    .p2align 4
    .type cueflow_switch_,@function
cueflow_switch_:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cueflow_switch_, .-cueflow_switch_
)");
#endif

static char* take_stack()
{
    if (st.n_free)
        return st.free_stacks[--st.n_free];
    void* p = mmap(nullptr, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        fault("out of memory for a thread's stack");
    mprotect(p, GUARD_BYTES, PROT_NONE);
    if (st.n_all == st.cap_all) {
        st.cap_all = st.cap_all ? 2 * st.cap_all : 64;
        st.all_stacks = (char**)realloc(st.all_stacks, st.cap_all * sizeof(char*));
        st.free_stacks = (char**)realloc(st.free_stacks, st.cap_all * sizeof(char*));
    }
    st.all_stacks[st.n_all++] = (char*)p;
    return (char*)p;
}

static void give_stack(char* s) { st.free_stacks[st.n_free++] = s; }

static void set_thread(Fiber* f)
{
    st.cur = f;
    threadIdx = f->tid;
}

// Back to the scheduler from the running fiber.
static void yield_to_scheduler()
{
    Fiber* f = st.cur;
#if defined(__x86_64__)
    cueflow_switch_(&f->sp, st.block->sched_sp);
#else
    swapcontext(&st.block->ucs[f->linear], &st.block->sched_uc);
#endif
    set_thread(f); // st.cur was another fiber meanwhile
}

extern "C" [[noreturn]] void cueflow_fiber_main_()
{
    Fiber* f = st.cur;
    Block* b = st.block;
    char* stack = f->stack;
    // Run threads one after another on this stack while they finish without blocking: a
    // thread that never reaches a barrier costs a call, not a context switch. The next thread
    // is taken only if it has not started (the scheduler's pass skips it once started).
    for (;;) {
        b->body(b->body_ctx);
        f->state = DONE;
        b->n_done++;
        Fiber* next = f + 1;
        if (next >= b->fibers + b->n || next->started || next->state != RUNNABLE)
            break;
        next->started = true;
        next->stack = stack;
        set_thread(next);
        f = next;
    }
    give_stack(stack); // reused only after this fiber switched away for good
#if defined(__x86_64__)
    void* dead;
    cueflow_switch_(&dead, st.block->sched_sp);
#else
    setcontext(&st.block->sched_uc);
#endif
    __builtin_unreachable();
}

static void resume(Block* b, Fiber* f)
{
    set_thread(f);
    if (!f->started) {
        f->started = true;
        f->stack = take_stack();
#if defined(__x86_64__)
        // Stack tops of all fibers would share one L1 cache set (they are all aligned alike):
        // offset each by a colour of up to 4 KiB taken from its address.
        uintptr_t colour = ((((uintptr_t)f->stack >> 12) * 0x9E3779B1u) >> 7) % 64 * 64;
        uint64_t* top = (uint64_t*)(f->stack + GUARD_BYTES + STACK_BYTES - colour);
        top[-1] = 0;
        top[-2] = (uint64_t)(void*)&cueflow_fiber_main_;
        for (int i = 3; i <= 8; ++i)
            top[-i] = 0;
        f->sp = &top[-8];
#else
        ucontext_t* uc = &b->ucs[f->linear];
        getcontext(uc);
        uc->uc_stack.ss_sp = f->stack + GUARD_BYTES;
        uc->uc_stack.ss_size = STACK_BYTES;
        uc->uc_link = nullptr;
        makecontext(uc, (void (*)())cueflow_fiber_main_, 0);
#endif
    }
#if defined(__x86_64__)
    cueflow_switch_(&b->sched_sp, f->sp);
#else
    swapcontext(&b->sched_uc, &b->ucs[f->linear]);
#endif
}

// Release the warp operations whose lanes all arrived: lanes waiting with the same mask form
// one operation, complete when every live lane of the mask waits in it (`force`: release every
// waiting operation, complete or not: a divergent warp operation). The values the lanes
// published are copied to the operation's snapshot row (indexed by its lowest lane), which
// its lanes read when they resume; a later operation of the same leader is released only after
// a full pass, when all of them have read.
static bool release_warp_ops(Block* b, unsigned warps, bool force)
{
    bool released = false;
    for (unsigned w = 0; w < warps; ++w) {
        unsigned lo = w * 32, hi = lo + 32 < b->n ? lo + 32 : b->n;
        unsigned waiting = 0, live = 0;
        for (unsigned i = lo; i < hi; ++i) {
            Fiber* f = &b->fibers[i];
            if (f->state == WAIT_WARP)
                waiting |= 1u << (i - lo);
            if (f->state != DONE)
                live |= 1u << (i - lo);
        }
        while (waiting) {
            unsigned leader = __builtin_ctz(waiting);
            unsigned mask = b->fibers[lo + leader].mask;
            unsigned group = 0;
            for (unsigned i = leader; i < hi - lo; ++i)
                if ((waiting & (1u << i)) && b->fibers[lo + i].mask == mask)
                    group |= 1u << i;
            waiting &= ~group;
            if (!force && (mask & live & ~group) != 0)
                continue; // lanes of its mask still to arrive
            unsigned long long* snap = b->snap + ((size_t)w * 32 + leader) * 32;
            for (unsigned i = 0; i < hi - lo; ++i)
                if (group & (1u << i)) {
                    Fiber* f = &b->fibers[lo + i];
                    snap[i] = f->xval;
                    f->leader = leader;
                    f->group = group;
                    f->state = RUNNABLE;
                    b->n_warp_wait--;
                }
            released = true;
        }
    }
    return released;
}

// Run every thread of the current block to completion.
static void run_threads(Block* b)
{
    unsigned warps = (b->n + 31) / 32;
    for (;;) {
        for (unsigned i = 0; i < b->n; ++i)
            if (b->fibers[i].state == RUNNABLE)
                resume(b, &b->fibers[i]);
        // Everyone waits at a barrier or is done.
        if (b->n_warp_wait && release_warp_ops(b, warps, false))
            continue;
        if (b->n_done == b->n)
            return;
        if (b->n_block_wait + b->n_done != b->n) {
            // Lanes wait at a warp operation that others of its mask never reach (they wait
            // at the block barrier): a divergent warp operation. Release it with the lanes
            // that arrived rather than deadlock (what they read from absent lanes is
            // undefined, as on a GPU).
            if (b->n_warp_wait) {
                release_warp_ops(b, warps, true);
                continue;
            }
            fault("threads of block (%u,%u,%u) wait at different barriers (a __syncthreads or warp "
                  "operation that not every thread reaches: a deadlock on a GPU)",
                  blockIdx.x, blockIdx.y, blockIdx.z);
        }
        b->bar_count = b->bar_preds;
        b->bar_waiters = b->n_block_wait;
        b->bar_preds = 0;
        b->n_block_wait = 0;
        for (unsigned i = 0; i < b->n; ++i)
            if (b->fibers[i].state == WAIT_BLOCK)
                b->fibers[i].state = RUNNABLE;
    }
}

static inline Fiber* self() { return st.cur; }

static int block_barrier(int pred)
{
    Fiber* f = self();
    f->pred = pred;
    f->state = WAIT_BLOCK;
    st.block->n_block_wait++;
    st.block->bar_preds += pred != 0;
    yield_to_scheduler();
    return st.block->bar_count;
}

// A warp operation: publish `v`, wait for the lanes of `mask`, return the values the
// operation's lanes published (indexed by lane).
static unsigned long long* warp_exchange(unsigned mask, unsigned long long v)
{
    Fiber* f = self();
    Block* b = st.block;
    if (!b->snap) {
        size_t warps = (b->n + 31) / 32;
        b->snap = (unsigned long long*)calloc(warps * 32 * 32, sizeof(unsigned long long));
        if (!b->snap)
            fault("out of memory for warp operations");
    }
    f->gen++;
    f->xval = v;
    f->mask = mask | (1u << f->lane);
    f->state = WAIT_WARP;
    b->n_warp_wait++;
    yield_to_scheduler();
    return st.block->snap + ((size_t)f->warp * 32 + f->leader) * 32;
}

static unsigned lane_id() { return self()->lane; }

static unsigned active_mask()
{
    Fiber* f = self();
    Block* b = st.block;
    unsigned m = 0, lo = f->warp * 32;
    for (unsigned i = lo; i < lo + 32 && i < b->n; ++i)
        if (b->fibers[i].state != DONE)
            m |= 1u << (i - lo);
    return m;
}

// Faults the OS reports while a kernel runs on this thread: the kernel's sticky fault.
static struct sigaction previous[32];
static void on_signal(int sig, siginfo_t* info, void* uctx)
{
    if (st.in_kernel) {
        const char* what = sig == SIGSEGV ? "illegal address"
                         : sig == SIGBUS  ? "misaligned or illegal address"
                         : sig == SIGFPE  ? "arithmetic exception (integer division by zero)"
                                          : "illegal instruction";
        if (st.msg && st.msg_len && st.lanes)
            snprintf(st.msg, st.msg_len, "%s: access to %p (in block (%u,%u,%u), its threads running as vector lanes)",
                     what, info->si_addr, blockIdx.x, blockIdx.y, blockIdx.z);
        else if (st.msg && st.msg_len)
            snprintf(st.msg, st.msg_len, "%s: access to %p (in thread (%u,%u,%u) of block (%u,%u,%u))",
                     what, info->si_addr, threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x,
                     blockIdx.y, blockIdx.z);
        siglongjmp(st.jmp, 2);
    }
    struct sigaction* p = &previous[sig];
    if (p->sa_flags & SA_SIGINFO) {
        if (p->sa_sigaction) {
            p->sa_sigaction(sig, info, uctx);
            return;
        }
    } else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN) {
        p->sa_handler(sig);
        return;
    }
    // Default action: restore it and let the instruction fault again.
    sigaction(sig, p, nullptr);
}

static void install_handlers()
{
    static bool done = false;
    static int lock = 0;
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        return;
    while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
    if (!done) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
        for (int s : sigs)
            sigaction(s, &sa, &previous[s]);
        __atomic_store_n(&done, true, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

// An alternate signal stack on this thread, so a fault on an exhausted fiber stack is caught.
static void ensure_altstack()
{
    static thread_local bool have = false;
    if (have)
        return;
    stack_t cur;
    if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) {
        have = true;
        return;
    }
    size_t sz = 64 * 1024;
    void* p = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return;
    stack_t s;
    s.ss_sp = p;
    s.ss_size = sz;
    s.ss_flags = 0;
    if (sigaltstack(&s, nullptr) == 0)
        have = true;
}

// Run blocks [begin, end) of `l`, calling `body(ctx)` as each thread.
static int run_launch(const cueflow_launch* l, void (*body)(void*), void* ctx)
{
    install_handlers();
    ensure_altstack();
    const unsigned n = l->block[0] * l->block[1] * l->block[2];
    Fiber* fibers = (Fiber*)calloc(n, sizeof(Fiber));

    Block b;
    memset((void*)&b, 0, sizeof b);
#if !defined(__x86_64__)
    b.ucs = (ucontext_t*)calloc(n, sizeof(ucontext_t));
#endif
    if (!fibers) {
        if (l->fault_msg && l->fault_msg_len)
            snprintf(l->fault_msg, l->fault_msg_len, "out of memory for a block of %u threads", n);
        return 1;
    }
    b.fibers = fibers;
    b.n = n;
    b.body = body;
    b.body_ctx = ctx;
    b.snap = nullptr; // allocated by the first warp operation
    gridDim = dim3(l->grid[0], l->grid[1], l->grid[2]);
    blockDim = dim3(l->block[0], l->block[1], l->block[2]);
    st.msg = l->fault_msg;
    st.msg_len = l->fault_msg_len;
    st.block = &b;
    int rc = 0;
    if (sigsetjmp(st.jmp, 1) != 0) {
        rc = 1;
    } else {
        st.in_kernel = 1;
        for (uint32_t lb = l->block_begin; lb < l->block_end; ++lb) {
            blockIdx.x = lb % l->grid[0];
            blockIdx.y = (lb / l->grid[0]) % l->grid[1];
            blockIdx.z = lb / (l->grid[0] * l->grid[1]);
            st.n_free = 0;
            for (size_t i = 0; i < st.n_all; ++i)
                st.free_stacks[st.n_free++] = st.all_stacks[i];
            b.n_block_wait = b.n_warp_wait = b.n_done = 0;
            b.bar_preds = 0;
            // Thread indices counted up (no divisions: this runs for every block).
            unsigned x = 0, y = 0, z = 0;
            for (unsigned t = 0; t < n; ++t) {
                Fiber* f = &fibers[t];
                f->state = RUNNABLE;
                f->started = false;
                f->gen = 0;
                f->linear = t;
                f->tid = uint3{x, y, z};
                f->lane = t & 31;
                f->warp = t >> 5;
                if (++x == l->block[0]) {
                    x = 0;
                    if (++y == l->block[1]) {
                        y = 0;
                        ++z;
                    }
                }
            }
            run_threads(&b);
        }
    }
    st.in_kernel = 0;
    st.block = nullptr;
    st.cur = nullptr;
    free(fibers);
    free(b.snap);
#if !defined(__x86_64__)
    free(b.ucs);
#endif
    return rc;
}

template <class T> static inline T param(void* p) { return *reinterpret_cast<T*>(p); }

template <class... A> struct Call {
    void (*k)(A...);
    void** params;
};

template <class... A, size_t... I>
static void call_with(void (*k)(A...), void** p, std::index_sequence<I...>)
{
    k(param<typename std::decay<A>::type>(p[I])...);
}

template <class... A> static void thread_body(void* ctx)
{
    Call<A...>* c = (Call<A...>*)ctx;
    call_with(c->k, c->params, std::index_sequence_for<A...>{});
}

template <class... A> static int run(void (*k)(A...), const cueflow_launch* l, void** params)
{
    Call<A...> c{k, params};
    return run_launch(l, &thread_body<A...>, &c);
}

template <class... A> static unsigned param_sizes(void (*)(A...), unsigned* sizes, unsigned cap)
{
    unsigned s[] = {0u, (unsigned)sizeof(typename std::decay<A>::type)...};
    unsigned n = sizeof...(A);
    for (unsigned i = 0; i < n && i < cap; ++i)
        sizes[i] = s[i + 1];
    return n;
}

} // namespace cueflow

#define CUEFLOW_ENTRY(sym, ...)                                                                    \
    extern "C" __attribute__((visibility("default"))) int cueflow_run_##sym(                     \
        const cueflow_launch* l, void** p)                                                         \
    {                                                                                              \
        return cueflow::run(__VA_ARGS__, l, p);                                                    \
    }                                                                                              \
    extern "C" __attribute__((visibility("default"))) unsigned cueflow_params_##sym(             \
        unsigned* sizes, unsigned cap)                                                             \
    {                                                                                              \
        return cueflow::param_sizes(__VA_ARGS__, sizes, cap);                                      \
    }

#include "cueflow_intrinsics.h"

// ---------------------------------------------------------------------------------------------
// Faults: assert, __trap. A failed assert is the kernel's sticky fault (KN2), as on the GPU.
extern "C" __attribute__((visibility("default"))) void __assert_fail(const char* expr, const char* file,
                                                                     unsigned int line,
                                                                     const char* func) noexcept
{
    cueflow::fault("assertion `%s` failed at %s:%u in %s, thread (%u,%u,%u) of block (%u,%u,%u)",
                   expr, file, line, func, threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x,
                   blockIdx.y, blockIdx.z);
}
[[noreturn]] static inline void __trap()
{
    cueflow::fault("__trap() in thread (%u,%u,%u) of block (%u,%u,%u)", threadIdx.x, threadIdx.y,
                   threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z);
}
[[noreturn]] static inline void __brkpt() { __trap(); }

// printf: one write(2) per call, so lines of concurrent threads do not interleave.
namespace cueflow {
static inline int device_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int device_printf(const char* fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) {
        size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
        ssize_t w = write(1, buf, len);
        (void)w;
    }
    return n;
}
} // namespace cueflow
#define printf cueflow::device_printf

#include "cueflow_cg.h"
#include "cueflow_lanes.h"

#endif

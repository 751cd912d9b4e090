// cueflow built-in kernels (CUDA C++, compiled at run time by NVRTC).
//
// This file is the single source of the kernels that cueflow ships with:
//   * the CUDA backend embeds it and compiles it with NVRTC when a device is opened, so it must
//     stay self-contained: no #include, no C++ standard library, only CUDA built-ins and
//     intrinsics; every kernel is `extern "C" __global__` so its name is not mangled and the
//     backend can look it up by the names below;
//   * the raw CUDA reference benchmarks in `benches/cuda/` #include it, so the reference
//     pipeline runs exactly the same compute kernel as cueflow does;
//   * the host backend compiles it with the machine's C++ compiler against its prelude
//     (`src/backend/host/cuda_c/`, which defines __CUEFLOW_HOST__) when a kernel runs from its
//     CUDA C there, and has Rust implementations of the same kernels in `src/kernels/`.
//     THOSE RUST IMPLEMENTATIONS MUST MATCH THIS FILE BIT FOR BIT. Change the arithmetic here
//     and there together. The _rn intrinsics are used on purpose: they are IEEE-754
//     round-to-nearest-even single operations that the compiler may never contract into a fused
//     multiply-add, so the results do not depend on -fmad or on the compiler version; where a
//     fused multiply-add is meant, it is written explicitly as __fmaf_rn (Rust: f32::mul_add).
//     Denormals are kept (NVRTC and nvcc default to -ftz=false; do not pass -ftz=true).
//
// Element kernels map thread i = blockIdx.x * blockDim.x + threadIdx.x (computed in 64 bits) to
// element i, and do nothing when i >= n. They use a 1-D grid; the caller launches
// ceil(n / blockDim.x) blocks.
//
// Kernels (exact signatures; the Rust side passes the arguments in this order and with these
// sizes: pointers and unsigned long long are 8 bytes, float and unsigned int are 4 bytes):
//   cf_empty()
//   cf_fill_f32(float* dst, float value, unsigned long long n)
//   cf_scale_f32(float* data, float factor, unsigned long long n)
//   cf_saxpy_f32(float* y, const float* x, float a, unsigned long long n)
//   cf_compute_f32(float* data, unsigned int iters, unsigned long long n)
//   cf_spin_ns(unsigned long long ns)
//   cf_wait_flag(volatile unsigned int* flag, unsigned int value, unsigned long long timeout_ns)
//   cf_set_flag(volatile unsigned int* flag, unsigned int value)
//   cf_fault(unsigned long long addr)

// ---------------------------------------------------------------------------------------------
// Helpers (device-only, internal linkage; not looked up by name).

// Global index of this thread in a 1-D launch, computed in 64 bits so that grids of more than
// 2^32 / blockDim.x blocks cannot overflow.
static __device__ inline unsigned long long cf_global_index()
{
    return (unsigned long long)blockIdx.x * (unsigned long long)blockDim.x
         + (unsigned long long)threadIdx.x;
}

// True for thread (0,0,0) of the block.
static __device__ inline bool cf_is_block_leader()
{
    return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

// The GPU's global nanosecond timer (PTX special register %globaltimer).
static __device__ inline unsigned long long cf_globaltimer()
{
#ifdef __CUEFLOW_HOST__
    // The host backend's prelude (CUDA C on the CPU): inline PTX has no meaning there.
    return __cueflow_globaltimer();
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}

// Back off briefly inside a polling loop (sm_70 and later have __nanosleep).
static __device__ inline void cf_backoff()
{
#if !defined(__CUDA_ARCH__) || (__CUDA_ARCH__ >= 700)
    __nanosleep(100);
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernels.

// Does nothing. Used to measure launch overhead.
extern "C" __global__ void cf_empty()
{
}

// dst[i] = value
extern "C" __global__ void cf_fill_f32(float* dst, float value, unsigned long long n)
{
    const unsigned long long i = cf_global_index();
    if (i >= n) {
        return;
    }
    dst[i] = value;
}

// data[i] = data[i] * factor   (one rounding)
extern "C" __global__ void cf_scale_f32(float* data, float factor, unsigned long long n)
{
    const unsigned long long i = cf_global_index();
    if (i >= n) {
        return;
    }
    data[i] = __fmul_rn(data[i], factor);
}

// y[i] = fma(a, x[i], y[i])   (fused: one rounding; Rust: a.mul_add(x[i], y[i]))
extern "C" __global__ void cf_saxpy_f32(float* y, const float* x, float a, unsigned long long n)
{
    const unsigned long long i = cf_global_index();
    if (i >= n) {
        return;
    }
    y[i] = __fmaf_rn(a, x[i], y[i]);
}

// x = data[i]; repeat `iters` times: x = fma(x, 0.999f, 0.001f)  (one fused multiply-add per
// step, one rounding: __fmaf_rn, which the Rust side matches with f32::mul_add); data[i] = x.
// The cost grows linearly with `iters`; the pipeline benchmarks use it to balance compute time
// against copy time. The result is stored, so the loop cannot be removed, and the _rn intrinsic
// keeps the compiler from reassociating it; unrolling only removes loop overhead and does not
// change the result.
extern "C" __global__ void cf_compute_f32(float* data, unsigned int iters, unsigned long long n)
{
    const unsigned long long i = cf_global_index();
    if (i >= n) {
        return;
    }
    float x = data[i];
#pragma unroll 8
    for (unsigned int k = 0; k < iters; ++k) {
        x = __fmaf_rn(x, 0.999f, 0.001f);
    }
    data[i] = x;
}

// Busy-waits about `ns` nanoseconds of GPU global time. Only the leader thread of each block
// waits; the other threads return at once. The block (and so the kernel) ends when its leader is
// done.
extern "C" __global__ void cf_spin_ns(unsigned long long ns)
{
    if (!cf_is_block_leader()) {
        return;
    }
    const unsigned long long start = cf_globaltimer();
    while (cf_globaltimer() - start < ns) {
        // spin
    }
}

// The leader thread of each block polls *flag until it equals `value`; then the whole block
// synchronizes and the kernel ends. Another stream (or the host, through mapped memory) sets the
// flag; tests use this to prove that two streams run at the same time. If the flag is not set
// within `timeout_ns`, the kernel traps, so a missing overlap fails loudly instead of hanging
// (the trap is a sticky fault, KN2).
extern "C" __global__ void cf_wait_flag(volatile unsigned int* flag, unsigned int value,
                                        unsigned long long timeout_ns)
{
    if (cf_is_block_leader()) {
        const unsigned long long start = cf_globaltimer();
        while (*flag != value) {
            __threadfence_system();
            cf_backoff();
            if (cf_globaltimer() - start > timeout_ns) {
                __trap();
            }
        }
        __threadfence_system();
    }
    __syncthreads();
}

// Thread 0 of block 0 stores `value` to *flag and makes it visible system-wide.
extern "C" __global__ void cf_set_flag(volatile unsigned int* flag, unsigned int value)
{
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && cf_is_block_leader()) {
        *flag = value;
        __threadfence_system();
    }
}

// Thread 0 of block 0 writes to the address `addr`. The caller passes an invalid address (for
// example 0x10) to raise an illegal-address fault, which is sticky (SPEC KN2 / ER2).
extern "C" __global__ void cf_fault(unsigned long long addr)
{
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && cf_is_block_leader()) {
        *(volatile int*)addr = 0x0BAD;
    }
}

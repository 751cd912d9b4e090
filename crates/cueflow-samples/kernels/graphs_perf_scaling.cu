// Kernels of the cudaGraphsPerfScaling port (src/bin/graphs_perf_scaling.rs): one source for a
// GPU (NVRTC) and the host backend (CUDA C on the CPU).

// The graph's nodes, and the marks around an upload: they do nothing.
extern "C" __global__ void empty() {}
extern "C" __global__ void pre_upload_annotation() {}
extern "C" __global__ void post_upload_annotation() {}

// Nanoseconds: the GPU's %globaltimer, the host's monotonic clock on the host backend.
static __device__ __forceinline__ long long now_ns()
{
#ifdef __CUEFLOW_HOST__
    return (long long)__cueflow_globaltimer();
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return (long long)t;
#endif
}

// Hold the stream until the host sets `latch` (a HostFlag) or `timeout_ns` passed; store the
// time spent and whether the latch never came (the run's measurement is then of an idle
// stream, not a busy one).
extern "C" __global__ void wait_with_timeout(long long timeout_ns, unsigned int* timed_out,
                                             long long* elapsed, volatile unsigned int* latch)
{
    const long long start = now_ns();
    const long long end = start + timeout_ns;
    long long t = start;
    do {
        t = now_ns();
    } while (t < end && *latch == 0);
    *elapsed = t - start;
    *timed_out = *latch == 0 ? 1u : 0u;
}

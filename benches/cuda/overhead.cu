// Raw CUDA API overhead reference: what the bare runtime and driver APIs cost per call on the
// host, so that cueflow's own per-operation overhead can be compared against them in the same
// run on the same machine.
//
// Measured (each a median over batches; the host clock std::chrono::steady_clock brackets every
// batch, per-call time = batch time / calls; the stream is synchronized between batches, outside
// the timed region, so its queue starts empty; warm-up batches run first and are discarded):
//   launch_rt            cf_empty<<<1,1,0,stream>>>()                      (runtime API)
//   launch_drv           cuLaunchKernel(cf_empty via cudaGetFuncBySymbol)  (driver API)
//   record_notiming      cudaEventRecord, event created with cudaEventDisableTiming
//   record_timing        cudaEventRecord, event created with timing enabled
//   record_notiming_drv  cuEventRecord,   timing disabled
//   record_timing_drv    cuEventRecord,   timing enabled
//   wait_event           cudaStreamWaitEvent on an event recorded (and completed) on another stream
//   roundtrip            cf_empty<<<1,1,0,stream>>>() + cudaStreamSynchronize, per iteration
// All on a stream created with cudaStreamNonBlocking.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o overhead overhead.cu -lcuda
// Output: a table and one line per measurement:
//   RESULT overhead name=<name> us=<median microseconds per call> [more key=value]

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"

// ---------------------------------------------------------------------------------------------
// Error checking

// CK(call): see check.h.

#define CU(call)                                                                               \
    do {                                                                                       \
        CUresult cu_err_ = (call);                                                             \
        if (cu_err_ != CUDA_SUCCESS) {                                                         \
            const char* cu_name_ = nullptr;                                                    \
            const char* cu_str_ = nullptr;                                                     \
            cuGetErrorName(cu_err_, &cu_name_);                                                \
            cuGetErrorString(cu_err_, &cu_str_);                                               \
            std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,     \
                         cu_name_ ? cu_name_ : "?", cu_str_ ? cu_str_ : "?");                  \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

// ---------------------------------------------------------------------------------------------

struct Options {
    int batches = 20;        // timed batches per enqueue measurement
    int calls = 10000;       // calls per batch for enqueue measurements
    int rt_batches = 20;     // timed batches for the round trip
    int rt_calls = 1000;     // round trips per batch
    int warmup_batches = 2;  // untimed batches first
};

static int parse_int(const char* flag, const char* s, int lo, int hi)
{
    if (s == nullptr) {
        std::fprintf(stderr, "overhead: %s needs a value\n", flag);
        std::exit(1);
    }
    errno = 0;
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        std::fprintf(stderr, "overhead: bad value for %s: '%s' (want %d..%d)\n", flag, s, lo, hi);
        std::exit(1);
    }
    return (int)v;
}

static Options parse_args(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; ++i) {
        const char* a = argv[i];
        const char* v = (i + 1 < argc) ? argv[i + 1] : nullptr;
        if (!std::strcmp(a, "--batches")) {
            o.batches = parse_int(a, v, 1, 100000), ++i;
        } else if (!std::strcmp(a, "--calls")) {
            o.calls = parse_int(a, v, 1, 10000000), ++i;
        } else if (!std::strcmp(a, "--rt-batches")) {
            o.rt_batches = parse_int(a, v, 1, 100000), ++i;
        } else if (!std::strcmp(a, "--rt-calls")) {
            o.rt_calls = parse_int(a, v, 1, 10000000), ++i;
        } else if (!std::strcmp(a, "--warmup")) {
            o.warmup_batches = parse_int(a, v, 0, 100000), ++i;
        } else if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
            std::printf("usage: overhead [--batches B] [--calls N] [--rt-batches B] "
                        "[--rt-calls N] [--warmup W]\n"
                        "  defaults: 20 batches of 10000 calls (enqueue measurements), 20 batches\n"
                        "  of 1000 round trips, 2 warm-up batches\n");
            std::exit(0);
        } else {
            std::fprintf(stderr, "overhead: unknown argument '%s'\n", a);
            std::exit(1);
        }
    }
    return o;
}

struct Stat {
    std::string name;
    std::string what;
    double median_us;  // per call
    double min_us;     // per call, fastest batch
    double max_us;     // per call, slowest batch
    double drain_us;   // median time the stream needed to finish after a batch was enqueued
    int batches;
    int calls;
};

static double median(std::vector<double> v)
{
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return (v.size() % 2) ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

using Clock = std::chrono::steady_clock;

static double us_between(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double, std::micro>(b - a).count();
}

// Runs `warmup` untimed and `batches` timed batches of `calls` calls of `body` on `stream`.
// The stream is synchronized before each batch (outside the timed region) and after it (timed
// separately, as the drain time: a long drain means the device, not the host, was the limit).
template <class F>
static Stat measure(const char* name, const char* what, cudaStream_t stream, int warmup,
                    int batches, int calls, F&& body)
{
    for (int b = 0; b < warmup; ++b) {
        for (int i = 0; i < calls; ++i) body();
        CK(cudaStreamSynchronize(stream));
    }
    std::vector<double> per_call, drains;
    per_call.reserve((size_t)batches);
    drains.reserve((size_t)batches);
    for (int b = 0; b < batches; ++b) {
        CK(cudaStreamSynchronize(stream));
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < calls; ++i) body();
        const Clock::time_point t1 = Clock::now();
        CK(cudaStreamSynchronize(stream));
        const Clock::time_point t2 = Clock::now();
        per_call.push_back(us_between(t0, t1) / (double)calls);
        drains.push_back(us_between(t1, t2));
    }
    Stat s;
    s.name = name;
    s.what = what;
    s.median_us = median(per_call);
    s.min_us = *std::min_element(per_call.begin(), per_call.end());
    s.max_us = *std::max_element(per_call.begin(), per_call.end());
    s.drain_us = median(drains);
    s.batches = batches;
    s.calls = calls;
    return s;
}

int main(int argc, char** argv)
{
    const Options opt = parse_args(argc, argv);

    const int dev = 0;
    CK(cudaSetDevice(dev));
    CK(cudaFree(nullptr));  // create (and make current) the primary context

    // The driver API calls below run in the runtime's primary context; make sure it is current
    // on this thread (it is after the runtime call above, this only guards against surprises).
    CU(cuInit(0));
    CUcontext ctx = nullptr;
    CU(cuCtxGetCurrent(&ctx));
    if (ctx == nullptr) {
        CUdevice cudev;
        CU(cuDeviceGet(&cudev, dev));
        CU(cuDevicePrimaryCtxRetain(&ctx, cudev));
        CU(cuCtxSetCurrent(ctx));
    }

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    int rt_ver = 0, drv_ver = 0;
    CK(cudaRuntimeGetVersion(&rt_ver));
    CK(cudaDriverGetVersion(&drv_ver));
    std::printf("# cueflow CUDA reference: API overhead\n");
    std::printf("# device: %s, runtime %d, driver %d\n", prop.name, rt_ver, drv_ver);
    std::printf("# %d batches x %d calls (round trip: %d x %d), %d warm-up batches, "
                "host clock std::chrono::steady_clock\n",
                opt.batches, opt.calls, opt.rt_batches, opt.rt_calls, opt.warmup_batches);

    cudaStream_t stream, other;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

    // cf_empty as a driver-API function handle (cudaFunction_t is CUfunction).
    cudaFunction_t rt_func = nullptr;
    CK(cudaGetFuncBySymbol(&rt_func, reinterpret_cast<const void*>(&cf_empty)));
    CUfunction drv_func = (CUfunction)rt_func;
    CUstream drv_stream = (CUstream)stream;

    cudaEvent_t ev_notiming, ev_timing, ev_other;
    CK(cudaEventCreateWithFlags(&ev_notiming, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&ev_timing, cudaEventDefault));
    CK(cudaEventCreateWithFlags(&ev_other, cudaEventDisableTiming));
    CUevent drv_notiming = (CUevent)ev_notiming;
    CUevent drv_timing = (CUevent)ev_timing;

    // Make sure the kernel is loaded and both launch paths work before anything is timed.
    cf_empty<<<1, 1, 0, stream>>>();
    CK(cudaGetLastError());
    CU(cuLaunchKernel(drv_func, 1, 1, 1, 1, 1, 1, 0, drv_stream, nullptr, nullptr));
    CK(cudaStreamSynchronize(stream));

    // The event waited on: recorded on another stream and already complete.
    CK(cudaEventRecord(ev_other, other));
    CK(cudaStreamSynchronize(other));

    const int W = opt.warmup_batches, B = opt.batches, N = opt.calls;
    std::vector<Stat> stats;

    stats.push_back(measure("launch_rt", "cf_empty<<<1,1,0,s>>>", stream, W, B, N, [&] {
        cf_empty<<<1, 1, 0, stream>>>();
        CK(cudaGetLastError());
    }));
    stats.push_back(measure("launch_drv", "cuLaunchKernel(cf_empty)", stream, W, B, N, [&] {
        CU(cuLaunchKernel(drv_func, 1, 1, 1, 1, 1, 1, 0, drv_stream, nullptr, nullptr));
    }));
    stats.push_back(measure("record_notiming", "cudaEventRecord (DisableTiming)", stream, W, B,
                            N, [&] { CK(cudaEventRecord(ev_notiming, stream)); }));
    stats.push_back(measure("record_timing", "cudaEventRecord (timing)", stream, W, B, N,
                            [&] { CK(cudaEventRecord(ev_timing, stream)); }));
    stats.push_back(measure("record_notiming_drv", "cuEventRecord (DisableTiming)", stream, W, B,
                            N, [&] { CU(cuEventRecord(drv_notiming, drv_stream)); }));
    stats.push_back(measure("record_timing_drv", "cuEventRecord (timing)", stream, W, B, N,
                            [&] { CU(cuEventRecord(drv_timing, drv_stream)); }));
    stats.push_back(measure("wait_event", "cudaStreamWaitEvent (completed event)", stream, W, B,
                            N, [&] { CK(cudaStreamWaitEvent(stream, ev_other, 0)); }));
    stats.push_back(measure("roundtrip", "cf_empty<<<>>> + cudaStreamSynchronize", stream, W,
                            opt.rt_batches, opt.rt_calls, [&] {
                                cf_empty<<<1, 1, 0, stream>>>();
                                CK(cudaGetLastError());
                                CK(cudaStreamSynchronize(stream));
                            }));

    std::printf("\n  %-20s %-40s %10s %10s %10s %12s\n", "name", "operation", "median_us",
                "min_us", "max_us", "drain_us");
    for (const Stat& s : stats) {
        std::printf("  %-20s %-40s %10.3f %10.3f %10.3f %12.1f\n", s.name.c_str(), s.what.c_str(),
                    s.median_us, s.min_us, s.max_us, s.drain_us);
    }
    std::printf("  (per call; drain_us = time the stream still needed after a whole batch was "
                "enqueued)\n\n");
    for (const Stat& s : stats) {
        std::printf("RESULT overhead name=%s us=%.4f min_us=%.4f max_us=%.4f drain_us=%.1f "
                    "batches=%d calls=%d\n",
                    s.name.c_str(), s.median_us, s.min_us, s.max_us, s.drain_us, s.batches,
                    s.calls);
    }

    CK(cudaDeviceSynchronize());
    CK(cudaEventDestroy(ev_notiming));
    CK(cudaEventDestroy(ev_timing));
    CK(cudaEventDestroy(ev_other));
    CK(cudaStreamDestroy(stream));
    CK(cudaStreamDestroy(other));
    return 0;
}

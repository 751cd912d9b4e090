// Raw CUDA C++ reference of the chunked copy → compute → copy pipeline, serial vs. concurrent:
// a buffer is copied host->device, processed by a kernel and copied back, either whole on one
// stream (serial model) or cut into chunks spread over several streams (concurrent model), so
// that the H2D engine, the kernels and the D2H engine overlap.
//
// cueflow's own pipeline benchmark is compared against this program in the same run, so it uses
// the very same compute kernel: builtins.cu is #included below (cf_compute_f32).
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -ffp-contract=off -o pipeline pipeline.cu
// Run:    ./pipeline --balance                 (see --help and README.md)
//
// Output: a human table, and machine-readable lines
//   RESULT stage h2d_ms=.. d2h_ms=.. duplex_ms=.. kernel_ms=.. iters=.. [more key=value]
//   RESULT pipeline streams=S chunks=C median_ms=X bound_ms=Y frac_of_bound=Z [more key=value]
// where bound_ms = max(kernel_ms, bytes / duplex bandwidth) and frac_of_bound = bound_ms /
// median_ms (1.0 = the configuration runs at the bound; smaller is further from it).

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"

// ---------------------------------------------------------------------------------------------
// Error checking

// CK(call): see check.h.

[[noreturn]] static void die(const char* msg)
{
    std::fprintf(stderr, "pipeline: %s\n", msg);
    std::exit(1);
}

// ---------------------------------------------------------------------------------------------
// Options

struct Config {
    int streams;
    int chunks;
};

struct Options {
    unsigned long long mib = 1024;
    bool balance = true;  // default when neither --iters nor --balance is given
    unsigned int iters = 0;
    std::vector<Config> configs;  // empty: default sweep
    int reps = 7;
    int warmup = 2;
};

static void usage(FILE* f)
{
    std::fprintf(f,
                 "usage: pipeline [--mib N] [--iters K | --balance] [--configs SxC,SxC,...]\n"
                 "                [--reps R] [--warmup W]\n"
                 "  --mib N        buffer size in MiB (default 1024)\n"
                 "  --iters K      iterations of cf_compute_f32 per element\n"
                 "  --balance      choose iters so the whole-buffer kernel takes about as long as\n"
                 "                 the whole-buffer H2D copy (default; the last of --iters and\n"
                 "                 --balance on the command line wins)\n"
                 "  --configs L    comma-separated streams x chunks, e.g. 1x1,4x4,8x32\n"
                 "                 (default: streams {1,2,4,8,16} x chunks {1,4,8,16,32,64,128},\n"
                 "                 chunks >= streams)\n"
                 "  --reps R       timed repetitions per configuration, median reported (default 7)\n"
                 "  --warmup W     untimed repetitions first (default 2)\n");
}

static unsigned long long parse_u64(const char* flag, const char* s)
{
    if (s == nullptr || *s == '\0' || *s == '-') {
        std::fprintf(stderr, "pipeline: %s needs a non-negative integer\n", flag);
        std::exit(1);
    }
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        std::fprintf(stderr, "pipeline: bad value for %s: '%s'\n", flag, s);
        std::exit(1);
    }
    return v;
}

static std::vector<Config> parse_configs(const char* s)
{
    std::vector<Config> out;
    std::string all(s);
    size_t pos = 0;
    while (pos <= all.size()) {
        size_t comma = all.find(',', pos);
        if (comma == std::string::npos) comma = all.size();
        std::string item = all.substr(pos, comma - pos);
        pos = comma + 1;
        if (item.empty()) continue;
        size_t x = item.find_first_of("xX");
        if (x == std::string::npos) {
            std::fprintf(stderr, "pipeline: bad config '%s' (want SxC, e.g. 4x16)\n",
                         item.c_str());
            std::exit(1);
        }
        std::string a = item.substr(0, x), b = item.substr(x + 1);
        unsigned long long sv = parse_u64("--configs", a.c_str());
        unsigned long long cv = parse_u64("--configs", b.c_str());
        if (sv < 1 || cv < 1 || sv > 1024 || cv > (1ull << 20)) {
            std::fprintf(stderr, "pipeline: config '%s' out of range\n", item.c_str());
            std::exit(1);
        }
        out.push_back(Config{(int)sv, (int)cv});
    }
    if (out.empty()) die("--configs is empty");
    return out;
}

static Options parse_args(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; ++i) {
        const char* a = argv[i];
        auto next = [&](const char* flag) -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "pipeline: %s needs a value\n", flag);
                std::exit(1);
            }
            return argv[++i];
        };
        if (!std::strcmp(a, "--mib")) {
            o.mib = parse_u64(a, next(a));
            if (o.mib == 0) die("--mib must be at least 1");
        } else if (!std::strcmp(a, "--iters")) {
            unsigned long long v = parse_u64(a, next(a));
            if (v > 0xffffffffull) die("--iters too large");
            o.iters = (unsigned int)v;
            o.balance = false;
        } else if (!std::strcmp(a, "--balance")) {
            o.balance = true;
        } else if (!std::strcmp(a, "--configs")) {
            o.configs = parse_configs(next(a));
        } else if (!std::strcmp(a, "--reps")) {
            unsigned long long v = parse_u64(a, next(a));
            if (v < 1 || v > 100000) die("--reps must be in 1..100000");
            o.reps = (int)v;
        } else if (!std::strcmp(a, "--warmup")) {
            unsigned long long v = parse_u64(a, next(a));
            if (v > 100000) die("--warmup must be at most 100000");
            o.warmup = (int)v;
        } else if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
            usage(stdout);
            std::exit(0);
        } else {
            std::fprintf(stderr, "pipeline: unknown argument '%s'\n", a);
            usage(stderr);
            std::exit(1);
        }
    }
    if (o.configs.empty()) {
        const int ss[] = {1, 2, 4, 8, 16};
        const int cs[] = {1, 4, 8, 16, 32, 64, 128};
        for (int s : ss)
            for (int c : cs)
                if (c >= s) o.configs.push_back(Config{s, c});
    }
    return o;
}

// ---------------------------------------------------------------------------------------------
// Helpers

static double median(std::vector<double> v)
{
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return (v.size() % 2) ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

static double min_of(const std::vector<double>& v)
{
    return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

static double gbps(double bytes, double ms)
{
    return ms > 0.0 ? bytes / 1e9 / (ms / 1e3) : 0.0;
}

// Input value of element i: non-trivial, and periodic with period 1000 so that the expected
// output can be computed once per residue and every element checked.
static const size_t kPeriod = 1000;
static inline float input_value(size_t i)
{
    return (float)(i % kPeriod) * 0.001f;
}

// CPU version of cf_compute_f32 for one element: x = fmaf(x, 0.999f, 0.001f), one fused
// multiply-add with one rounding per step, as __fmaf_rn on the GPU (std::fmaf is correctly
// rounded whether or not the host CPU has the instruction).
static float cpu_compute(float x, unsigned int iters)
{
    for (unsigned int k = 0; k < iters; ++k) {
        x = std::fmaf(x, 0.999f, 0.001f);
    }
    return x;
}

static inline uint32_t bits_of(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

static void launch_compute(float* d, size_t len, unsigned int iters, cudaStream_t s)
{
    if (len == 0) return;
    const unsigned int block = 256;
    const unsigned long long grid = ((unsigned long long)len + block - 1) / block;
    if (grid > 0x7fffffffull) die("buffer too large for a 1-D grid");
    cf_compute_f32<<<(unsigned int)grid, block, 0, s>>>(d, iters, (unsigned long long)len);
    CK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// State

struct Bench {
    size_t n = 0;       // elements
    size_t bytes = 0;   // n * sizeof(float)
    float* h_in = nullptr;   // pinned, cudaHostAllocDefault
    float* h_out = nullptr;  // pinned, cudaHostAllocDefault
    float* d_buf = nullptr;  // the pipeline works in place on this buffer
    float* d_buf2 = nullptr; // second buffer, used as the D2H source of the duplex stage test
    cudaStream_t origin = nullptr;
    std::vector<cudaStream_t> streams;  // all cudaStreamNonBlocking
    std::vector<cudaEvent_t> ends;      // one per stream, timing enabled
    cudaEvent_t start = nullptr, stop = nullptr;
    unsigned int iters = 0;
    int reps = 7, warmup = 2;
};

// Makes sure at least `count` worker streams (and their end events) exist.
static void ensure_streams(Bench& b, int count)
{
    while ((int)b.streams.size() < count) {
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        cudaEvent_t e;
        CK(cudaEventCreate(&e));
        b.streams.push_back(s);
        b.ends.push_back(e);
    }
}

// Origin-stream timing frame: record start on origin, make the first `used` streams wait on it,
// run `enqueue`, record an end event on each used stream, make origin wait on them all, record
// stop on origin, wait for it. Returns stop - start in ms.
template <class F>
static float timed_frame(Bench& b, int used, F&& enqueue)
{
    ensure_streams(b, used);
    CK(cudaEventRecord(b.start, b.origin));
    for (int s = 0; s < used; ++s) CK(cudaStreamWaitEvent(b.streams[s], b.start, 0));
    enqueue();
    for (int s = 0; s < used; ++s) {
        CK(cudaEventRecord(b.ends[s], b.streams[s]));
        CK(cudaStreamWaitEvent(b.origin, b.ends[s], 0));
    }
    CK(cudaEventRecord(b.stop, b.origin));
    CK(cudaEventSynchronize(b.stop));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, b.start, b.stop));
    return ms;
}

// Runs `one` (which returns a time in ms) warmup + reps times; returns the timed samples.
template <class F>
static std::vector<double> repeat(int warmup, int reps, F&& one)
{
    for (int i = 0; i < warmup; ++i) (void)one();
    std::vector<double> v;
    v.reserve((size_t)reps);
    for (int i = 0; i < reps; ++i) v.push_back((double)one());
    return v;
}

// One pass of the pipeline: chunk c on stream c % S: H2D chunk, kernel on chunk, D2H chunk.
// Chunk sizes are n / C, the last chunk also takes the remainder.
static float pipeline_once(Bench& b, int S, int C)
{
    return timed_frame(b, S, [&] {
        const size_t base = b.n / (size_t)C;
        for (int c = 0; c < C; ++c) {
            const size_t off = (size_t)c * base;
            const size_t len = (c == C - 1) ? (b.n - off) : base;
            if (len == 0) continue;
            cudaStream_t s = b.streams[(size_t)(c % S)];
            CK(cudaMemcpyAsync(b.d_buf + off, b.h_in + off, len * sizeof(float),
                               cudaMemcpyHostToDevice, s));
            launch_compute(b.d_buf + off, len, b.iters, s);
            CK(cudaMemcpyAsync(b.h_out + off, b.d_buf + off, len * sizeof(float),
                               cudaMemcpyDeviceToHost, s));
        }
    });
}

static float h2d_once(Bench& b)
{
    return timed_frame(b, 1, [&] {
        CK(cudaMemcpyAsync(b.d_buf, b.h_in, b.bytes, cudaMemcpyHostToDevice, b.streams[0]));
    });
}

static float d2h_once(Bench& b)
{
    return timed_frame(b, 1, [&] {
        CK(cudaMemcpyAsync(b.h_out, b.d_buf, b.bytes, cudaMemcpyDeviceToHost, b.streams[0]));
    });
}

static float kernel_once(Bench& b, unsigned int iters)
{
    return timed_frame(b, 1, [&] { launch_compute(b.d_buf, b.n, iters, b.streams[0]); });
}

struct Duplex {
    float total_ms, h2d_ms, d2h_ms;
};

// Whole-buffer H2D on stream 0 and whole-buffer D2H on stream 1 at the same time (different
// device buffers). Each direction's time is measured from the common start to its own end event.
static Duplex duplex_once(Bench& b)
{
    Duplex d{};
    d.total_ms = timed_frame(b, 2, [&] {
        CK(cudaMemcpyAsync(b.d_buf, b.h_in, b.bytes, cudaMemcpyHostToDevice, b.streams[0]));
        CK(cudaMemcpyAsync(b.h_out, b.d_buf2, b.bytes, cudaMemcpyDeviceToHost, b.streams[1]));
    });
    CK(cudaEventElapsedTime(&d.h2d_ms, b.start, b.ends[0]));
    CK(cudaEventElapsedTime(&d.d2h_ms, b.start, b.ends[1]));
    return d;
}

static double kernel_median(Bench& b, unsigned int iters, int reps)
{
    return median(repeat(1, reps, [&] { return kernel_once(b, iters); }));
}

// Picks iters so that cf_compute_f32 over the whole buffer takes about `target_ms`:
// doubling until the kernel is at least as slow as the target, then bisection.
static unsigned int balance_iters(Bench& b, double target_ms)
{
    const int reps = 3;
    const unsigned int cap = 1u << 24;
    unsigned int lo = 1;
    double tlo = kernel_median(b, lo, reps);
    std::printf("  balance: iters=%-9u kernel %.3f ms (target %.3f ms)\n", lo, tlo, target_ms);
    if (tlo >= target_ms) return lo;
    unsigned int hi = 2;
    double thi = 0.0;
    for (;;) {
        thi = kernel_median(b, hi, reps);
        std::printf("  balance: iters=%-9u kernel %.3f ms\n", hi, thi);
        if (thi >= target_ms) break;
        if (hi >= cap) {
            std::printf("  balance: reached the cap of %u iterations\n", cap);
            return hi;
        }
        lo = hi;
        tlo = thi;
        hi *= 2;
    }
    // Bisection to within 0.5% of lo (or adjacent integers).
    while (hi - lo > 1 && (unsigned long long)(hi - lo) * 200ull > lo) {
        unsigned int mid = lo + (hi - lo) / 2;
        double tm = kernel_median(b, mid, reps);
        std::printf("  balance: iters=%-9u kernel %.3f ms\n", mid, tm);
        if (tm < target_ms) {
            lo = mid;
            tlo = tm;
        } else {
            hi = mid;
            thi = tm;
        }
    }
    return (target_ms - tlo <= thi - target_ms) ? lo : hi;
}

// Checks every element of h_out against the CPU result (bitwise). Returns the mismatch count and
// prints the first few.
static size_t verify(const Bench& b, const std::vector<uint32_t>& expect)
{
    size_t bad = 0;
    size_t r = 0;
    const uint32_t* out = reinterpret_cast<const uint32_t*>(b.h_out);
    for (size_t i = 0; i < b.n; ++i) {
        if (out[i] != expect[r]) {
            if (bad < 5) {
                std::printf("    MISMATCH at element %zu: got %.9g (0x%08x), expected %.9g "
                            "(0x%08x), input %.9g\n",
                            i, (double)float_of(out[i]), out[i], (double)float_of(expect[r]),
                            expect[r], (double)b.h_in[i]);
            }
            ++bad;
        }
        if (++r == kPeriod) r = 0;
    }
    return bad;
}

// ---------------------------------------------------------------------------------------------

int main(int argc, char** argv)
{
    Options opt = parse_args(argc, argv);

    int dev = 0;
    CK(cudaSetDevice(dev));
    CK(cudaFree(nullptr));  // create the context now, outside any timing
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    int cc_major = 0, cc_minor = 0, sms = 0, engines = 0;
    CK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    CK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&engines, cudaDevAttrAsyncEngineCount, dev));
    int rt_ver = 0, drv_ver = 0;
    CK(cudaRuntimeGetVersion(&rt_ver));
    CK(cudaDriverGetVersion(&drv_ver));

    Bench b;
    b.n = (size_t)(opt.mib * 1024ull * 1024ull / sizeof(float));
    b.bytes = b.n * sizeof(float);
    b.reps = opt.reps;
    b.warmup = opt.warmup;

    std::printf("# cueflow CUDA reference pipeline\n");
    std::printf("# device: %s (sm_%d%d, %d SMs, asyncEngineCount=%d), runtime %d, driver %d\n",
                prop.name, cc_major, cc_minor, sms, engines, rt_ver, drv_ver);
    std::printf("# buffer: %llu MiB = %zu floats, pinned host memory (cudaHostAllocDefault), "
                "reps=%d warmup=%d\n",
                opt.mib, b.n, opt.reps, opt.warmup);

    CK(cudaHostAlloc((void**)&b.h_in, b.bytes, cudaHostAllocDefault));
    CK(cudaHostAlloc((void**)&b.h_out, b.bytes, cudaHostAllocDefault));
    CK(cudaMalloc((void**)&b.d_buf, b.bytes));
    CK(cudaMalloc((void**)&b.d_buf2, b.bytes));
    for (size_t i = 0; i < b.n; ++i) b.h_in[i] = input_value(i);
    std::memset(b.h_out, 0, b.bytes);
    CK(cudaMemset(b.d_buf, 0, b.bytes));
    CK(cudaMemset(b.d_buf2, 0, b.bytes));

    CK(cudaStreamCreateWithFlags(&b.origin, cudaStreamNonBlocking));
    CK(cudaEventCreate(&b.start));
    CK(cudaEventCreate(&b.stop));
    int max_streams = 2;
    for (const Config& c : opt.configs) max_streams = std::max(max_streams, c.streams);
    ensure_streams(b, max_streams);
    CK(cudaDeviceSynchronize());

    // ---- stage times ------------------------------------------------------------------------
    const double h2d_ms = median(repeat(opt.warmup, opt.reps, [&] { return h2d_once(b); }));
    const double d2h_ms = median(repeat(opt.warmup, opt.reps, [&] { return d2h_once(b); }));
    std::vector<double> dup_total, dup_h2d, dup_d2h;
    for (int i = 0; i < opt.warmup + opt.reps; ++i) {
        Duplex d = duplex_once(b);
        if (i < opt.warmup) continue;
        dup_total.push_back(d.total_ms);
        dup_h2d.push_back(d.h2d_ms);
        dup_d2h.push_back(d.d2h_ms);
    }
    const double duplex_ms = median(dup_total);
    const double dup_h2d_ms = median(dup_h2d), dup_d2h_ms = median(dup_d2h);
    const double dup_h2d_gbps = gbps((double)b.bytes, dup_h2d_ms);
    const double dup_d2h_gbps = gbps((double)b.bytes, dup_d2h_ms);

    if (opt.balance) {
        std::printf("# balancing iters against the whole-buffer H2D copy (%.3f ms)\n", h2d_ms);
        b.iters = balance_iters(b, h2d_ms);
    } else {
        b.iters = opt.iters;
    }
    const double kernel_ms =
        median(repeat(opt.warmup, opt.reps, [&] { return kernel_once(b, b.iters); }));

    // Bound: the pipeline moves `bytes` each way; with both directions running at once each
    // direction gets its duplex bandwidth, so the copies need at least bytes / min(duplex
    // per-direction bandwidth) (= the slower direction's duplex time); the kernels need at least
    // kernel_ms. The bound is the larger of the two.
    const double dup_bw_gbps = std::min(dup_h2d_gbps, dup_d2h_gbps);
    const double copy_bound_ms = dup_bw_gbps > 0.0 ? (double)b.bytes / 1e9 / dup_bw_gbps * 1e3
                                                   : duplex_ms;
    const double bound_ms = std::max(kernel_ms, copy_bound_ms);
    const double serial_sum_ms = h2d_ms + kernel_ms + d2h_ms;

    std::printf("\n# stage times (median of %d, whole buffer of %zu bytes)\n", opt.reps, b.bytes);
    std::printf("  %-28s %10.3f ms  %8.2f GB/s\n", "H2D alone", h2d_ms, gbps((double)b.bytes, h2d_ms));
    std::printf("  %-28s %10.3f ms  %8.2f GB/s\n", "D2H alone", d2h_ms, gbps((double)b.bytes, d2h_ms));
    std::printf("  %-28s %10.3f ms  H2D %.2f GB/s (%.3f ms), D2H %.2f GB/s (%.3f ms)\n",
                "H2D + D2H at once (duplex)", duplex_ms, dup_h2d_gbps, dup_h2d_ms, dup_d2h_gbps,
                dup_d2h_ms);
    std::printf("  %-28s %10.3f ms  iters=%u\n", "kernel (cf_compute_f32)", kernel_ms, b.iters);
    std::printf("  %-28s %10.3f ms\n", "serial sum h2d+kernel+d2h", serial_sum_ms);
    std::printf("  %-28s %10.3f ms  = max(kernel %.3f, bytes / duplex bw %.3f)\n", "bound",
                bound_ms, kernel_ms, copy_bound_ms);
    std::printf("RESULT stage h2d_ms=%.4f d2h_ms=%.4f duplex_ms=%.4f kernel_ms=%.4f iters=%u "
                "duplex_h2d_gbps=%.3f duplex_d2h_gbps=%.3f h2d_gbps=%.3f d2h_gbps=%.3f "
                "bound_ms=%.4f mib=%llu\n",
                h2d_ms, d2h_ms, duplex_ms, kernel_ms, b.iters, dup_h2d_gbps, dup_d2h_gbps,
                gbps((double)b.bytes, h2d_ms), gbps((double)b.bytes, d2h_ms), bound_ms, opt.mib);
    std::fflush(stdout);

    // ---- expected output ----------------------------------------------------------------------
    std::vector<uint32_t> expect(kPeriod);
    for (size_t r = 0; r < kPeriod; ++r) expect[r] = bits_of(cpu_compute(input_value(r), b.iters));

    // ---- configurations -----------------------------------------------------------------------
    std::printf("\n# pipeline (median of %d after %d warm-ups; speedup vs %s)\n", opt.reps,
                opt.warmup, "the 1x1 configuration if run, else the serial stage sum");
    std::printf("  %7s %7s %11s %11s %11s %8s %13s  %s\n", "streams", "chunks", "median_ms",
                "min_ms", "max_ms", "speedup", "frac_of_bound", "verified");
    double serial_ref_ms = serial_sum_ms;
    for (const Config& c : opt.configs)
        if (c.streams == 1 && c.chunks == 1) serial_ref_ms = -1.0;  // filled in when 1x1 runs

    bool all_ok = true;
    std::vector<std::string> results;
    for (const Config& c : opt.configs) {
        // Poison the output and the device buffer so that stale data from an earlier
        // configuration cannot pass verification.
        std::memset(b.h_out, 0xff, b.bytes);
        CK(cudaMemset(b.d_buf, 0xff, b.bytes));
        CK(cudaDeviceSynchronize());

        std::vector<double> v =
            repeat(opt.warmup, opt.reps, [&] { return pipeline_once(b, c.streams, c.chunks); });
        const double med = median(v);
        const double mn = min_of(v);
        const double mx = *std::max_element(v.begin(), v.end());
        if (c.streams == 1 && c.chunks == 1 && serial_ref_ms < 0.0) serial_ref_ms = med;
        const double ref = serial_ref_ms > 0.0 ? serial_ref_ms : serial_sum_ms;
        const double frac = med > 0.0 ? bound_ms / med : 0.0;

        const size_t bad = verify(b, expect);
        if (bad) all_ok = false;
        std::printf("  %7d %7d %11.3f %11.3f %11.3f %7.2fx %13.3f  %s", c.streams, c.chunks, med,
                    mn, mx, med > 0.0 ? ref / med : 0.0, frac, bad ? "FAIL" : "ok");
        if (bad) std::printf(" (%zu of %zu elements wrong)", bad, b.n);
        std::printf("\n");
        std::fflush(stdout);
        char line[512];
        std::snprintf(line, sizeof line,
                      "RESULT pipeline streams=%d chunks=%d median_ms=%.4f bound_ms=%.4f "
                      "frac_of_bound=%.4f min_ms=%.4f max_ms=%.4f iters=%u mib=%llu verified=%s",
                      c.streams, c.chunks, med, bound_ms, frac, mn, mx, b.iters, opt.mib,
                      bad ? "FAIL" : "ok");
        results.push_back(line);
    }
    // Machine-readable lines after the table, so that the table stays contiguous.
    std::printf("\n");
    for (const std::string& r : results) std::printf("%s\n", r.c_str());
    std::fflush(stdout);

    // ---- cleanup ------------------------------------------------------------------------------
    CK(cudaDeviceSynchronize());
    for (size_t i = 0; i < b.streams.size(); ++i) {
        CK(cudaEventDestroy(b.ends[i]));
        CK(cudaStreamDestroy(b.streams[i]));
    }
    CK(cudaEventDestroy(b.start));
    CK(cudaEventDestroy(b.stop));
    CK(cudaStreamDestroy(b.origin));
    CK(cudaFree(b.d_buf));
    CK(cudaFree(b.d_buf2));
    CK(cudaFreeHost(b.h_in));
    CK(cudaFreeHost(b.h_out));

    if (!all_ok) {
        std::fprintf(stderr, "pipeline: verification FAILED for at least one configuration\n");
        return 1;
    }
    return 0;
}

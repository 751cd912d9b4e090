// Why the raw reference's tiny graph (1,000 one-block cf_scale_f32 nodes, `auto_graph.cu`)
// takes ~877 µs of device time in its RESULT loop but ~1,050 µs in the same process's later
// probes, as cueflow's tiny graph does from its process's start. The same exec, launched and
// synchronized phase after phase; each phase prints its µs per iteration, the SM clock NVML
// reads at its end and the device time of one more launch (events around it). Between phases,
// one thing the other programs of `auto_graph.cu` do: a pinned allocation and a D2H copy, pool
// allocations (also freed at every synchronize), a graph with memory nodes, a 64 MiB
// allocation, work on four more streams joined by events, more execs alive, an exec with an
// event record node, a second exec of the tiny graph, the graph over pool memory, a kernel with
// static shared memory, then auto_graph.cu's fork/join iteration as launches and as a graph.
// With an argument, one action alone in a fresh process (the change, once made, stays): see
// the `trigger` branches below.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o graph_after_launches_probe \
//           graph_after_launches_probe.cu -L$CUDA_HOME/lib64/stubs -lnvidia-ml
// Usage:  [PROBE_PRE=n] graph_after_launches_probe [second|wait|multiblock|overlap|fork|
//           forkK|forkfull|forkscale|fork1full|move|movewait|captured|saxpy|fill|parK|seqK]
//         (PROBE_PRE: n iterations of the tiny program as plain launches before the action)
// Output: PHASE <n> <what> <launches|graph> us_per_iter=<median of 5 batches of 20>
//         sm_mhz=<clock> last_graph_gpu_us=<device time of one more launch>
//
// One H200 (driver 580.159.04, 2026-11-29): 874–889 µs through every phase, SM clock 1,980 MHz
// throughout, until the fork/join iteration, after which 1,050–1,067 µs to the end (clock
// unchanged). In a fresh process no action alone moved it; plain launches on the graph's
// stream (PROBE_PRE=1: 1,000 of them) and then a fork into three streams that run kernels at
// once (`forkfull`, `forkscale`: any kernels) did, a fork into one stream did not, nor did the
// launches followed by anything else tried. In `auto_graph.cu` the shift comes with its
// fork/join program (`PROBE … after=` lines: 873 after tiny and jacobi, 1,051 after fork/join).

#include <cuda_runtime.h>
#include <nvml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"
#include "graph_timing.h"

static const int KERNELS = 1000;

// A one-block sum with static shared memory, as auto_graph.cu's jacobi program launches.
extern "C" __global__ void probe_sum(const float* x, float* out, unsigned long long n)
{
    __shared__ float part[256];
    float acc = 0.0f;
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = part[0];
}
static const unsigned long long N = 256;

// `graph_after_launches_probe TRIGGER`: only the tiny graph before and after one action, in a
// fresh process (the change, once made, stays): `wait` a second stream waits for an event of
// the first and runs a one-block kernel; `overlap` a one-block kernel on a second stream runs
// while the first stream's kernels do; `multiblock` a 16-block kernel on the first stream;
// `second` a one-block kernel on a second stream alone; `fork` one fork/join iteration.
extern "C" __global__ void probe_spin(long long cycles)
{
    long long t = clock64();
    while (clock64() - t < cycles) {
    }
}

int main(int argc, char** argv)
{
    const char* trigger = argc > 1 ? argv[1] : nullptr;
    CK(cudaSetDevice(0));
    nvmlDevice_t nd;
    bool nvml = nvmlInit() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex(0, &nd) == NVML_SUCCESS;
    auto sm_mhz = [&]() -> unsigned {
        unsigned c = 0;
        if (nvml) nvmlDeviceGetClockInfo(nd, NVML_CLOCK_SM, &c);
        return c;
    };
    cudaStream_t s, c;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    float* d;
    CK(cudaMalloc(&d, N * sizeof(float)));
    CK(cudaMemset(d, 0, N * sizeof(float)));
    auto body = [&](cudaStream_t st) {
        for (int k = 0; k < KERNELS; ++k) cf_scale_f32<<<1, 256, 0, st>>>(d, 1.0f, N);
    };
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeThreadLocal));
    body(c);
    CK(cudaStreamEndCapture(c, &g));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    int phase = 0;
    auto measure = [&](const char* what, bool graph) {
        std::vector<double> batches;
        for (int r = 0; r < 5; ++r) {
            auto t = std::chrono::steady_clock::now();
            for (int i = 0; i < 20; ++i) {
                if (graph) CK(cudaGraphLaunch(exec, s));
                else body(s);
                CK(cudaStreamSynchronize(s));
            }
            std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t;
            batches.push_back(dt.count() / 20);
        }
        std::sort(batches.begin(), batches.end());
        unsigned mhz = sm_mhz();
        double last = graph_launch_gpu_us(exec, s, 1);
        std::printf("PHASE %d %s %s us_per_iter=%.1f sm_mhz=%u last_graph_gpu_us=%.1f\n", phase++,
                    what, graph ? "graph" : "launches", batches[2], mhz, last);
    };
    if (trigger != nullptr) {
        cudaStream_t o;
        CK(cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking));
        cudaEvent_t e;
        CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        float* x;
        CK(cudaMalloc(&x, 1 << 20));
        measure("before", true);
        // PROBE_PRE=n: n iterations of the tiny program as launches first (1,000 each).
        const char* pre = std::getenv("PROBE_PRE");
        for (int i = 0, n = pre ? std::atoi(pre) : 0; i < n; ++i) {
            body(s);
            CK(cudaStreamSynchronize(s));
        }
        if (pre) measure("after the launches", true);
        std::string t = trigger;
        if (t == "wait") {
            CK(cudaEventRecord(e, s));
            CK(cudaStreamWaitEvent(o, e, 0));
            cf_scale_f32<<<1, 256, 0, o>>>(x, 1.0f, N);
        } else if (t == "overlap") {
            probe_spin<<<1, 32, 0, o>>>(2000000);
            for (int i = 0; i < 100; ++i) cf_scale_f32<<<1, 256, 0, s>>>(d, 1.0f, N);
        } else if (t == "multiblock") {
            cf_scale_f32<<<16, 256, 0, s>>>(x, 1.0f, 4096);
        } else if (t == "second") {
            cf_scale_f32<<<1, 256, 0, o>>>(x, 1.0f, N);
        } else if (t == "fork") {
            CK(cudaEventRecord(e, s));
            CK(cudaStreamWaitEvent(o, e, 0));
            cf_scale_f32<<<16, 256, 0, o>>>(x, 1.0f, 4096);
            CK(cudaEventRecord(e, o));
            CK(cudaStreamWaitEvent(s, e, 0));
        } else if (t.rfind("fork", 0) == 0 && t.size() == 5) {
            // `forkK`: the first stream forks K others by one event, each runs a short kernel
            // and records its own event, and the first waits for each.
            int k = t[4] - '0';
            std::vector<cudaStream_t> ps(k);
            std::vector<cudaEvent_t> es(k);
            for (int i = 0; i < k; ++i) {
                CK(cudaStreamCreateWithFlags(&ps[i], cudaStreamNonBlocking));
                CK(cudaEventCreateWithFlags(&es[i], cudaEventDisableTiming));
            }
            CK(cudaEventRecord(e, s));
            for (int i = 0; i < k; ++i) {
                CK(cudaStreamWaitEvent(ps[i], e, 0));
                probe_spin<<<1, 32, 0, ps[i]>>>(20000);
                CK(cudaEventRecord(es[i], ps[i]));
                CK(cudaStreamWaitEvent(s, es[i], 0));
            }
            cf_scale_f32<<<1, 256, 0, s>>>(x, 1.0f, N);
        } else if (t == "forkfull" || t == "forkscale" || t == "fork1full") {
            // auto_graph.cu's fork/join iteration, as launches (`forkscale`: every kernel a
            // scale; `fork1full`: one branch).
            const bool scale_only = t == "forkscale";
            const int branches = t == "fork1full" ? 2 : 4;
            const unsigned long long JN = 4096;
            cudaStream_t st[4] = {s, 0, 0, 0};
            cudaEvent_t ev[4];
            for (int i = 0; i < 4; ++i) {
                if (i > 0) CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
                CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
            }
            float* big = x;
            cf_scale_f32<<<16, 256, 0, st[0]>>>(big, 1.0f, JN);
            CK(cudaEventRecord(ev[0], st[0]));
            for (int k = 1; k < branches; ++k) {
                CK(cudaStreamWaitEvent(st[k], ev[0], 0));
                if (scale_only) {
                    cf_scale_f32<<<16, 256, 0, st[k]>>>(big + k * JN, 1.0f, JN);
                    cf_scale_f32<<<16, 256, 0, st[k]>>>(big + k * JN, 1.0f, JN);
                } else {
                    cf_fill_f32<<<16, 256, 0, st[k]>>>(big + k * JN, 0.0f, JN);
                    cf_saxpy_f32<<<16, 256, 0, st[k]>>>(big + k * JN, big, (float)k, JN);
                }
                cf_scale_f32<<<16, 256, 0, st[k]>>>(big + k * JN, 1.0f, JN);
                CK(cudaEventRecord(ev[k], st[k]));
                CK(cudaStreamWaitEvent(st[0], ev[k], 0));
            }
            if (!scale_only) {
                cf_fill_f32<<<16, 256, 0, st[0]>>>(big + 8 * JN, 0.0f, JN);
                for (int k = 1; k < branches; ++k)
                    cf_saxpy_f32<<<16, 256, 0, st[0]>>>(big + 8 * JN, big + k * JN, 1.0f, JN);
            }
        } else if (t == "move") {
            // One event recorded on another stream, then on the first.
            cf_scale_f32<<<1, 256, 0, o>>>(x, 1.0f, N);
            CK(cudaEventRecord(e, o));
            CK(cudaDeviceSynchronize());
            CK(cudaEventRecord(e, s));
        } else if (t == "movewait") {
            // The same, each record waited for by the other stream.
            cf_scale_f32<<<1, 256, 0, o>>>(x, 1.0f, N);
            CK(cudaEventRecord(e, o));
            CK(cudaStreamWaitEvent(s, e, 0));
            cf_scale_f32<<<1, 256, 0, s>>>(x, 1.0f, N);
            CK(cudaEventRecord(e, s));
            CK(cudaStreamWaitEvent(o, e, 0));
            cf_scale_f32<<<1, 256, 0, o>>>(x, 1.0f, N);
        } else if (t == "captured") {
            // An event recorded inside a capture (a fork), then recorded and waited for outside.
            cudaStream_t o2;
            CK(cudaStreamCreateWithFlags(&o2, cudaStreamNonBlocking));
            cudaGraph_t fg;
            CK(cudaStreamBeginCapture(o, cudaStreamCaptureModeThreadLocal));
            CK(cudaEventRecord(e, o));
            CK(cudaStreamWaitEvent(o2, e, 0));
            cf_scale_f32<<<1, 256, 0, o2>>>(x, 1.0f, N);
            CK(cudaEventRecord(e, o2));
            CK(cudaStreamWaitEvent(o, e, 0));
            CK(cudaStreamEndCapture(o, &fg));
            cudaGraphExec_t fe;
            CK(cudaGraphInstantiate(&fe, fg, 0));
            CK(cudaGraphLaunch(fe, s));
            CK(cudaEventRecord(e, s));
            CK(cudaStreamWaitEvent(o, e, 0));
            cf_scale_f32<<<1, 256, 0, o>>>(x, 1.0f, N);
        } else if (t == "saxpy") {
            cf_saxpy_f32<<<16, 256, 0, s>>>(x, x + 4096, 1.0f, 4096);
        } else if (t == "fill") {
            cf_fill_f32<<<16, 256, 0, s>>>(x, 0.0f, 4096);
        } else if (t.rfind("par", 0) == 0) {
            // `parK`: K streams (the first among them) each run a spinning kernel at once.
            int k = std::atoi(t.c_str() + 3);
            std::vector<cudaStream_t> ps(k, s);
            for (int i = 1; i < k; ++i) CK(cudaStreamCreateWithFlags(&ps[i], cudaStreamNonBlocking));
            for (int i = 0; i < k; ++i) probe_spin<<<1, 32, 0, ps[i]>>>(2000000);
        } else if (t.rfind("seq", 0) == 0) {
            // `seqK`: K streams (the first among them) each run a kernel, one after another.
            int k = std::atoi(t.c_str() + 3);
            std::vector<cudaStream_t> ps(k, s);
            for (int i = 1; i < k; ++i) CK(cudaStreamCreateWithFlags(&ps[i], cudaStreamNonBlocking));
            for (int i = 0; i < k; ++i) {
                probe_spin<<<1, 32, 0, ps[i]>>>(2000);
                CK(cudaStreamSynchronize(ps[i]));
            }
        } else {
            std::fprintf(stderr, "unknown trigger %s\n", trigger);
            return 2;
        }
        CK(cudaDeviceSynchronize());
        measure(trigger, true);
        measure("again", true);
        return 0;
    }
    measure("start", true);
    measure("start", false);
    measure("after launches", true);
    // What the other programs of auto_graph.cu do before its probes, one at a time.
    float* pinned;
    CK(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault));
    CK(cudaMemcpyAsync(pinned, d, 1024, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    measure("after a pinned allocation and a D2H copy", true);
    void* tmp;
    CK(cudaMallocAsync(&tmp, 1 << 16, s));
    CK(cudaFreeAsync(tmp, s));
    CK(cudaStreamSynchronize(s));
    measure("after cudaMallocAsync/cudaFreeAsync", true);
    cudaGraph_t mg;
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeThreadLocal));
    CK(cudaMallocAsync(&tmp, 1 << 16, c));
    cf_scale_f32<<<1, 256, 0, c>>>((float*)tmp, 1.0f, N);
    CK(cudaFreeAsync(tmp, c));
    CK(cudaStreamEndCapture(c, &mg));
    cudaGraphExec_t mexec;
    CK(cudaGraphInstantiate(&mexec, mg, 0));
    CK(cudaGraphLaunch(mexec, s));
    CK(cudaStreamSynchronize(s));
    measure("after a graph with memory nodes", true);
    float* big;
    CK(cudaMalloc(&big, 64 << 20));
    CK(cudaMemset(big, 0, 64 << 20));
    CK(cudaDeviceSynchronize());
    measure("after a 64 MiB cudaMalloc and memset", true);
    std::vector<cudaStream_t> more(4);
    for (auto& x : more) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    cudaEvent_t ev[4];
    for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (int i = 0; i < 4; ++i) {
        cf_scale_f32<<<1, 256, 0, more[i]>>>(big, 1.0f, N);
        CK(cudaEventRecord(ev[i], more[i]));
        CK(cudaStreamWaitEvent(s, ev[i], 0));
    }
    CK(cudaDeviceSynchronize());
    measure("after work on four more streams joined by events", true);
    measure("again", true);
    // More graph execs alive: small graphs (three kernels), instantiated, launched once each.
    std::vector<cudaGraphExec_t> extra;
    auto small = [&](bool records) {
        cudaGraph_t sg;
        CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeThreadLocal));
        cf_scale_f32<<<1, 256, 0, c>>>(big, 1.0f, N);
        if (records) {
            CK(cudaEventRecord(ev[0], c));
            CK(cudaStreamWaitEvent(more[0], ev[0], 0));
            cf_scale_f32<<<1, 256, 0, more[0]>>>(big + 1024, 1.0f, N);
            CK(cudaEventRecord(ev[1], more[0]));
            CK(cudaStreamWaitEvent(c, ev[1], 0));
        }
        cf_scale_f32<<<1, 256, 0, c>>>(big, 1.0f, N);
        CK(cudaStreamEndCapture(c, &sg));
        cudaGraphExec_t e;
        CK(cudaGraphInstantiate(&e, sg, 0));
        CK(cudaGraphLaunch(e, s));
        CK(cudaStreamSynchronize(s));
        extra.push_back(e);
    };
    for (int n : {1, 3, 8}) {
        while ((int)extra.size() < n) small(false);
        char what[64];
        std::snprintf(what, sizeof what, "with %d more execs alive", n);
        measure(what, true);
    }
    small(true);
    measure("with a forked graph exec alive", true);
    cudaGraph_t rg;
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeThreadLocal));
    cf_scale_f32<<<1, 256, 0, c>>>(big, 1.0f, N);
    CK(cudaStreamEndCapture(c, &rg));
    cudaGraphNode_t last;
    size_t nn = 1;
    CK(cudaGraphGetNodes(rg, &last, &nn));
    cudaGraphNode_t rec;
    CK(cudaGraphAddEventRecordNode(&rec, rg, &last, 1, ev[2]));
    cudaGraphExec_t re;
    CK(cudaGraphInstantiate(&re, rg, 0));
    CK(cudaGraphLaunch(re, s));
    CK(cudaStreamSynchronize(s));
    measure("with an exec with an event record node alive", true);
    cudaGraphExec_t tiny2;
    CK(cudaGraphInstantiate(&tiny2, g, 0));
    measure("with a second exec of the tiny graph", true);
    CK(cudaGraphExecDestroy(tiny2));
    for (auto e : extra) CK(cudaGraphExecDestroy(e));
    CK(cudaGraphExecDestroy(re));
    measure("after destroying them", true);
    // The pool mapping and unmapping memory at every synchronize (release threshold 0), as
    // the raw launches of auto_graph.cu's temporaries program make it do.
    for (int i = 0; i < 200; ++i) {
        CK(cudaMallocAsync(&tmp, 16384, s));
        cf_scale_f32<<<1, 256, 0, s>>>((float*)tmp, 1.0f, N);
        CK(cudaFreeAsync(tmp, s));
        CK(cudaStreamSynchronize(s));
    }
    measure("after 200 pool allocations, each freed and synchronized", true);
    // The same graph over pool memory (cueflow's device memory comes from the default pool).
    float* pd;
    CK(cudaMallocAsync(&pd, N * sizeof(float), s));
    CK(cudaStreamSynchronize(s));
    cudaGraph_t pg;
    CK(cudaStreamBeginCapture(c, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < KERNELS; ++k) cf_scale_f32<<<1, 256, 0, c>>>(pd, 1.0f, N);
    CK(cudaStreamEndCapture(c, &pg));
    cudaGraphExec_t old_exec = exec;
    CK(cudaGraphInstantiate(&exec, pg, 0));
    measure("over pool memory", true);
    exec = old_exec;
    measure("over cudaMalloc memory again", true);
    probe_sum<<<1, 256, 0, s>>>(big, big + 4096, 4096);
    CK(cudaStreamSynchronize(s));
    measure("after one launch of a kernel with static shared memory", true);
    // auto_graph.cu's fork/join iteration as launches: stream 0 forks streams 1..3 by an event,
    // each runs three kernels over 4096 floats and records, stream 0 waits for them.
    const unsigned long long JN = 4096;
    cudaStream_t fs[4] = {s, more[1], more[2], more[3]};
    auto fork_body = [&](cudaStream_t* st) {
        cf_scale_f32<<<16, 256, 0, st[0]>>>(big, 1.0f, JN);
        CK(cudaEventRecord(ev[0], st[0]));
        for (int k = 1; k < 4; ++k) {
            CK(cudaStreamWaitEvent(st[k], ev[0], 0));
            cf_fill_f32<<<16, 256, 0, st[k]>>>(big + k * JN, 0.0f, JN);
            cf_saxpy_f32<<<16, 256, 0, st[k]>>>(big + k * JN, big, (float)k, JN);
            cf_scale_f32<<<16, 256, 0, st[k]>>>(big + k * JN, 1.0f, JN);
            CK(cudaEventRecord(ev[k], st[k]));
            CK(cudaStreamWaitEvent(st[0], ev[k], 0));
        }
        cf_fill_f32<<<16, 256, 0, st[0]>>>(big + 8 * JN, 0.0f, JN);
        for (int k = 1; k < 4; ++k)
            cf_saxpy_f32<<<16, 256, 0, st[0]>>>(big + 8 * JN, big + k * JN, 1.0f, JN);
    };
    fork_body(fs);
    CK(cudaStreamSynchronize(s));
    measure("after one fork/join iteration as launches", true);
    for (int i = 0; i < 500; ++i) {
        fork_body(fs);
        CK(cudaStreamSynchronize(s));
    }
    measure("after 500 more", true);
    cudaGraph_t fg;
    CK(cudaStreamBeginCapture(more[0], cudaStreamCaptureModeThreadLocal));
    cudaStream_t cs[4] = {more[0], more[1], more[2], more[3]};
    fork_body(cs);
    CK(cudaStreamEndCapture(more[0], &fg));
    cudaGraphExec_t fexec;
    CK(cudaGraphInstantiate(&fexec, fg, 0));
    for (int i = 0; i < 500; ++i) {
        CK(cudaGraphLaunch(fexec, s));
        CK(cudaStreamSynchronize(s));
    }
    measure("after 500 launches of its graph", true);
    measure("again", true);
    CK(cudaGraphExecDestroy(mexec));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
    return 0;
}

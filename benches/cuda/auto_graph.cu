// Raw CUDA reference for cueflow's automatic graphs (`cargo run --release -p cueflow --example
// auto_graph`): the same three launch-bound programs, with the same kernels
// (crates/cueflow/src/kernels/builtins.cu) and sizes, as raw launches and as a graph captured
// by hand once and launched per iteration.
//
//   tiny      1,000 cf_scale_f32 launches over 256 floats on one stream, then a synchronize;
//   jacobi    scale, saxpy, a one-block sum and a 4-byte device->host copy into pinned memory,
//             then the host checks the sum (buffers swap every iteration: two graphs);
//   forkjoin  stream 0 forks streams 1..3 with an event; each runs fill, saxpy, scale and
//             records an event; stream 0 waits for them, fills and adds the three results;
//   temporaries  a stream-ordered temporary per iteration (cudaMallocAsync, a copy into it, a
//             scale, a fill of the output and a saxpy of the temporary into it, cudaFreeAsync);
//             its graph holds allocation and free nodes.
//
// Each program runs `iters` iterations (default 100) per mode, modes alternating for `rounds`
// rounds (default 5); host wall time per iteration, median over rounds; results checked.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 -o auto_graph auto_graph.cu
// Usage:  auto_graph [iters] [rounds]
// Output: RESULT auto_graph_raw program=<tiny|jacobi|forkjoin> mode=<launch|graph> us_per_iter=<median>,
//         then PROBE auto_graph_raw program=<...> graph_gpu_us=<device time of one graph launch>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "../../crates/cueflow/src/kernels/builtins.cu"
#include "check.h"
#include "graph_timing.h"

extern "C" __global__ void ag_sum(const float* x, float* out, unsigned long long n)
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

static const unsigned BLOCK = 256;
static unsigned blocks(size_t n) { return (unsigned)((n + BLOCK - 1) / BLOCK); }

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double time_us(int n, const std::function<void()>& iteration)
{
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) iteration();
    std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t;
    return d.count() / n;
}

// AG_DOT=<dir>: write each captured graph there as the driver holds it (verbose), to compare
// with cueflow's (CUEFLOW_GRAPH_DOT=<dir>).
static void dump_dot(cudaGraph_t g, const char* name)
{
    const char* dir = std::getenv("AG_DOT");
    if (dir == nullptr) return;
    std::string path = std::string(dir) + "/raw-" + name + ".dot";
    CK(cudaGraphDebugDotPrint(g, path.c_str(), cudaGraphDebugDotFlagsVerbose));
}

static cudaGraphExec_t capture(cudaStream_t s, const std::function<void(cudaStream_t)>& body,
                               const char* name)
{
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    body(s);
    CK(cudaStreamEndCapture(s, &g));
    dump_dot(g, name);
    CK(cudaGraphInstantiateWithFlags(&exec, g, 0));
    CK(cudaGraphDestroy(g));
    return exec;
}

int main(int argc, char** argv)
{
    int iters = argc > 1 ? std::atoi(argv[1]) : 100;
    int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# raw CUDA: %s, %d iterations, median of %d rounds\n", prop.name, iters, rounds);
    cudaStream_t s[4];
    cudaEvent_t ev[4];
    for (int k = 0; k < 4; ++k) {
        CK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
    }

    // (a) tiny
    const size_t TN = 256;
    float* t;
    CK(cudaMalloc(&t, TN * sizeof(float)));
    cf_fill_f32<<<blocks(TN), BLOCK, 0, s[0]>>>(t, 1.0f, TN);
    auto tiny_body = [&](cudaStream_t st) {
        for (int i = 0; i < 1000; ++i) cf_scale_f32<<<blocks(TN), BLOCK, 0, st>>>(t, 1.0f, TN);
    };
    cudaGraphExec_t tiny_graph = capture(s[1], tiny_body, "tiny");

    // (b) jacobi
    const size_t JN = 4096;
    float *bufs[2], *r, *host;
    for (auto& b : bufs) {
        CK(cudaMalloc(&b, JN * sizeof(float)));
        cf_fill_f32<<<blocks(JN), BLOCK, 0, s[0]>>>(b, 1.0f, JN);
    }
    CK(cudaMalloc(&r, sizeof(float)));
    CK(cudaMallocHost(&host, sizeof(float)));
    auto step = [&](cudaStream_t st, int k) {
        float *x = bufs[k % 2], *y = bufs[(k + 1) % 2];
        cf_scale_f32<<<blocks(JN), BLOCK, 0, st>>>(y, 0.5f, JN);
        cf_saxpy_f32<<<blocks(JN), BLOCK, 0, st>>>(y, x, 0.5f, JN);
        ag_sum<<<1, 256, 0, st>>>(y, r, JN);
        CK(cudaMemcpyAsync(host, r, sizeof(float), cudaMemcpyDeviceToHost, st));
    };
    cudaGraphExec_t jacobi_graph[2] = {capture(s[1], [&](cudaStream_t st) { step(st, 0); }, "jacobi0"),
                                       capture(s[1], [&](cudaStream_t st) { step(st, 1); }, "jacobi1")};

    // (c) forkjoin
    float *src, *y, *xs[4];
    CK(cudaMalloc(&src, JN * sizeof(float)));
    CK(cudaMalloc(&y, JN * sizeof(float)));
    for (auto& x : xs) CK(cudaMalloc(&x, JN * sizeof(float)));
    cf_fill_f32<<<blocks(JN), BLOCK, 0, s[0]>>>(src, 1.0f, JN);
    auto fork_body = [&](cudaStream_t* st) {
        cf_scale_f32<<<blocks(JN), BLOCK, 0, st[0]>>>(src, 1.0f, JN);
        CK(cudaEventRecord(ev[0], st[0]));
        for (int k = 1; k < 4; ++k) {
            CK(cudaStreamWaitEvent(st[k], ev[0], 0));
            cf_fill_f32<<<blocks(JN), BLOCK, 0, st[k]>>>(xs[k], 0.0f, JN);
            cf_saxpy_f32<<<blocks(JN), BLOCK, 0, st[k]>>>(xs[k], src, (float)k, JN);
            cf_scale_f32<<<blocks(JN), BLOCK, 0, st[k]>>>(xs[k], 1.0f, JN);
            CK(cudaEventRecord(ev[k], st[k]));
            CK(cudaStreamWaitEvent(st[0], ev[k], 0));
        }
        cf_fill_f32<<<blocks(JN), BLOCK, 0, st[0]>>>(y, 0.0f, JN);
        for (int k = 1; k < 4; ++k) cf_saxpy_f32<<<blocks(JN), BLOCK, 0, st[0]>>>(y, xs[k], 1.0f, JN);
    };
    cudaStream_t cs[4];
    for (auto& c : cs) CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    cudaGraph_t fg;
    cudaGraphExec_t fork_graph;
    CK(cudaStreamBeginCapture(cs[0], cudaStreamCaptureModeThreadLocal));
    fork_body(cs);
    CK(cudaStreamEndCapture(cs[0], &fg));
    dump_dot(fg, "forkjoin");
    CK(cudaGraphInstantiateWithFlags(&fork_graph, fg, 0));
    // The same graph keeping the program's event records as event record nodes (what a replay
    // must do for the events to be recorded as without graphs), timing events and timing-free.
    cudaGraphExec_t fork_records[2];
    for (int quiet = 0; quiet < 2; ++quiet) {
        cudaEvent_t xev[5];
        for (auto& e : xev) CK(cudaEventCreateWithFlags(&e, quiet ? cudaEventDisableTiming : 0));
        CK(cudaStreamBeginCapture(cs[0], cudaStreamCaptureModeThreadLocal));
        cf_scale_f32<<<blocks(JN), BLOCK, 0, cs[0]>>>(src, 1.0f, JN);
        CK(cudaEventRecordWithFlags(xev[0], cs[0], cudaEventRecordExternal));
        CK(cudaEventRecord(ev[0], cs[0]));
        for (int k = 1; k < 4; ++k) {
            CK(cudaStreamWaitEvent(cs[k], ev[0], 0));
            cf_fill_f32<<<blocks(JN), BLOCK, 0, cs[k]>>>(xs[k], 0.0f, JN);
            cf_saxpy_f32<<<blocks(JN), BLOCK, 0, cs[k]>>>(xs[k], src, (float)k, JN);
            cf_scale_f32<<<blocks(JN), BLOCK, 0, cs[k]>>>(xs[k], 1.0f, JN);
            CK(cudaEventRecordWithFlags(xev[k], cs[k], cudaEventRecordExternal));
            CK(cudaEventRecord(ev[k], cs[k]));
            CK(cudaStreamWaitEvent(cs[0], ev[k], 0));
        }
        cf_fill_f32<<<blocks(JN), BLOCK, 0, cs[0]>>>(y, 0.0f, JN);
        for (int k = 1; k < 4; ++k) cf_saxpy_f32<<<blocks(JN), BLOCK, 0, cs[0]>>>(y, xs[k], 1.0f, JN);
        CK(cudaEventRecordWithFlags(xev[4], cs[0], cudaEventRecordExternal));
        cudaGraph_t xg;
        CK(cudaStreamEndCapture(cs[0], &xg));
        CK(cudaGraphInstantiateWithFlags(&fork_records[quiet], xg, 0));
    }
    // (d) temporaries
    float *tx, *ty;
    CK(cudaMalloc(&tx, JN * sizeof(float)));
    CK(cudaMalloc(&ty, JN * sizeof(float)));
    cf_fill_f32<<<blocks(JN), BLOCK, 0, s[0]>>>(tx, 2.0f, JN);
    auto temp_body = [&](cudaStream_t st) {
        float* tmp;
        CK(cudaMallocAsync(&tmp, JN * sizeof(float), st));
        CK(cudaMemcpyAsync(tmp, tx, JN * sizeof(float), cudaMemcpyDeviceToDevice, st));
        cf_scale_f32<<<blocks(JN), BLOCK, 0, st>>>(tmp, 2.0f, JN);
        cf_fill_f32<<<blocks(JN), BLOCK, 0, st>>>(ty, 1.0f, JN);
        cf_saxpy_f32<<<blocks(JN), BLOCK, 0, st>>>(ty, tmp, 1.0f, JN);
        CK(cudaFreeAsync(tmp, st));
    };
    cudaGraphExec_t temp_graph = capture(s[1], temp_body, "temporaries");
    CK(cudaDeviceSynchronize());

    struct Program {
        const char* name;
        std::function<void(bool, int)> iteration; // (graph?, k)
    };
    std::vector<Program> programs = {
        {"tiny",
         [&](bool graph, int) {
             if (graph) CK(cudaGraphLaunch(tiny_graph, s[0]));
             else tiny_body(s[0]);
             CK(cudaStreamSynchronize(s[0]));
         }},
        {"jacobi",
         [&](bool graph, int k) {
             if (graph) CK(cudaGraphLaunch(jacobi_graph[k % 2], s[0]));
             else step(s[0], k);
             CK(cudaStreamSynchronize(s[0]));
             if (*host != (float)JN) {
                 std::fprintf(stderr, "jacobi: sum %f, expected %zu\n", *host, JN);
                 std::exit(1);
             }
         }},
        {"forkjoin",
         [&](bool graph, int) {
             if (graph) CK(cudaGraphLaunch(fork_graph, s[0]));
             else fork_body(s);
             CK(cudaStreamSynchronize(s[0]));
         }},
        {"temporaries",
         [&](bool graph, int) {
             if (graph) CK(cudaGraphLaunch(temp_graph, s[0]));
             else temp_body(s[0]);
             CK(cudaStreamSynchronize(s[0]));
         }},
    };
    for (auto& p : programs) {
        std::vector<double> t[2];
        for (int r = 0; r < rounds; ++r) {
            for (int g = 0; g < 2; ++g) {
                int k = 0;
                time_us(4, [&] { p.iteration(g, k++); });
                t[g].push_back(time_us(iters, [&] { p.iteration(g, k++); }));
            }
        }
        double launch = median(t[0]), graph = median(t[1]);
        std::printf("RESULT auto_graph_raw program=%s mode=launch us_per_iter=%.2f\n", p.name, launch);
        std::printf("RESULT auto_graph_raw program=%s mode=graph us_per_iter=%.2f\n", p.name, graph);
        std::printf("RATIO auto_graph_raw program=%s launch/graph=%.2f\n", p.name, launch / graph);
        // The tiny graph's device time after each program: it is not the same all along.
        std::printf("PROBE auto_graph_raw after=%s tiny_graph_gpu_us=%.2f\n", p.name,
                    graph_launch_gpu_us(tiny_graph, s[0], 5));
    }
    // The device's time for one launch of each hand-captured graph (cueflow's auto_graph prints
    // the same for its own graphs): a gap in `graph` beside equal device times is the host's.
    std::printf("PROBE auto_graph_raw program=tiny graph_gpu_us=%.2f\n", graph_launch_gpu_us(tiny_graph, s[0], 21));
    std::printf("PROBE auto_graph_raw program=jacobi graph_gpu_us=%.2f\n",
                graph_launch_gpu_us(jacobi_graph[0], s[0], 21));
    std::printf("PROBE auto_graph_raw program=forkjoin graph_gpu_us=%.2f\n",
                graph_launch_gpu_us(fork_graph, s[0], 21));
    std::printf("PROBE auto_graph_raw program=temporaries graph_gpu_us=%.2f\n",
                graph_launch_gpu_us(temp_graph, s[0], 21));
    // What an event recorded after each launch costs (cueflow records a completion event, timing
    // off, after every graph launch): launch + synchronize per iteration, with no event, with a
    // timing-free event after the launch, and with timing events before and after.
    {
        cudaEvent_t quiet, ta, tb;
        CK(cudaEventCreateWithFlags(&quiet, cudaEventDisableTiming));
        CK(cudaEventCreate(&ta));
        CK(cudaEventCreate(&tb));
        cudaGraphExec_t graphs[3] = {tiny_graph, jacobi_graph[0], fork_graph};
        const char* names[3] = {"tiny", "jacobi", "forkjoin"};
        for (int p = 0; p < 3; ++p) {
            std::vector<double> t[3];
            for (int r = 0; r < rounds; ++r) {
                for (int v = 0; v < 3; ++v) {
                    auto it = [&] {
                        if (v == 2) CK(cudaEventRecord(ta, s[0]));
                        CK(cudaGraphLaunch(graphs[p], s[0]));
                        if (v == 1) CK(cudaEventRecord(quiet, s[0]));
                        if (v == 2) CK(cudaEventRecord(tb, s[0]));
                        CK(cudaStreamSynchronize(s[0]));
                    };
                    time_us(4, it);
                    t[v].push_back(time_us(iters, it));
                }
            }
            std::printf("EVENTS auto_graph_raw program=%s none=%.2f quiet_after=%.2f timing_around=%.2f\n",
                        names[p], median(t[0]), median(t[1]), median(t[2]));
        }
        // v == 3: the edges-only graph, then the program's four timing-free events recorded on
        // the launch stream after it (they would complete with the whole launch, not where
        // their records stand: what a replay does instead is keep them as leaf record nodes).
        cudaEvent_t after[4];
        for (auto& e : after) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        std::vector<double> t[4];
        cudaGraphExec_t forks[4] = {fork_graph, fork_records[0], fork_records[1], fork_graph};
        for (int r = 0; r < rounds; ++r) {
            for (int v = 0; v < 4; ++v) {
                auto it = [&] {
                    CK(cudaGraphLaunch(forks[v], s[0]));
                    if (v == 3)
                        for (auto e : after) CK(cudaEventRecord(e, s[0]));
                    CK(cudaStreamSynchronize(s[0]));
                };
                time_us(4, it);
                t[v].push_back(time_us(iters, it));
            }
        }
        std::printf("RECORDS auto_graph_raw program=forkjoin edges_only=%.2f timing_record_nodes=%.2f "
                    "quiet_record_nodes=%.2f records_after=%.2f\n", median(t[0]), median(t[1]),
                    median(t[2]), median(t[3]));
    }
    std::vector<float> out(JN);
    CK(cudaMemcpy(out.data(), y, JN * sizeof(float), cudaMemcpyDeviceToHost));
    for (float v : out) {
        if (v != 6.0f) {
            std::fprintf(stderr, "forkjoin: %f, expected 6\n", v);
            return 1;
        }
    }
    CK(cudaMemcpy(out.data(), ty, JN * sizeof(float), cudaMemcpyDeviceToHost));
    for (float v : out) {
        if (v != 5.0f) {
            std::fprintf(stderr, "temporaries: %f, expected 5\n", v);
            return 1;
        }
    }
    return 0;
}

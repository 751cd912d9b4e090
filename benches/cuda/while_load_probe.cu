// Raw CUDA probe for issue 27's GPU faults under load: a graph with two while nodes, built the
// way cueflow builds it, instantiated and launched twice per iteration, many iterations, while
// other processes share the GPU (run a dozen of these at once).
//
//   while_load_probe MODE SECONDS
//
// MODE a: as cueflow does for a condition without reset (GR9's C3): the first while's handle
//         has no CU_GRAPH_COND_ASSIGN_DEFAULT, a start kernel node sets it to 0 before every
//         root, and after the first launch is enqueued that start node is disabled in the exec
//         (cudaGraphNodeSetEnabled), so the second launch keeps the value the first left.
// MODE b: both handles reset at each launch (cudaGraphCondAssignDefault): no start node, no
//         change to the exec between its launches.
// MODE c: as a, but the start node is never disabled.
// MODE d: as a, but no start node (the first handle without reset, set only by its kernel).
// MODE i: as b, with if nodes instead of while nodes (each body runs once).
// MODE g: as b, with the bodies as child graphs instead of conditional nodes.
// MODE m: the smallest while loop: a memset node, then a while node whose one-kernel body
//         counts to 3 (the handle reset to 1 at each launch), as NVIDIA's conditional-node
//         sample builds it.
// MODE s: as c, but the second while node runs after the first (an edge w1 -> w2).
// MODE t: as b, but the second while node runs after the first.
// MODE e: as c, with the first while node only (no second loop, no nodes for it).
// MODE f: as c, but the first handle is also reset at each launch (the start node stays).
// MODE p: two graphs of one while loop each (as m), launched on two streams at once.
// MODE q: as p, both graphs launched on one stream (one after the other).
// MODE r: as p, the second graph an if node instead of a while loop.
// MODE k: no graph: plain kernel launches, synchronized every 100 (load for the others).
//
// Each iteration checks both loops' iteration counts. Prints "ok ITERATIONS" or the failing
// call and exits 1.
#include <chrono>
#include <cstring>

#include "check.h"

extern "C" __global__ void wp_cond_const(cudaGraphConditionalHandle h, unsigned v) {
    cudaGraphSetConditional(h, v);
}
extern "C" __global__ void wp_while_step(unsigned* count, cudaGraphConditionalHandle h,
                                         unsigned limit) {
    unsigned c = ++count[0];
    cudaGraphSetConditional(h, c < limit ? 1u : 0u);
}
extern "C" __global__ void wp_scale(float* d, float f, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = d[i] * f;
}
extern "C" __global__ void wp_add(float* dst, const float* src, float c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + c;
}
extern "C" __global__ void wp_block_reverse(float* dst, const float* src, unsigned n) {
    __shared__ float tile[16];
    unsigned t = threadIdx.x, i = blockIdx.x * 16 + t;
    tile[t] = src[i];
    __syncthreads();
    dst[i] = tile[15 - t];
}

static cudaGraphNode_t kernel(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, void* f,
                              unsigned grid, unsigned block, void** args) {
    cudaKernelNodeParams p = {};
    p.func = f;
    p.gridDim = dim3(grid);
    p.blockDim = dim3(block);
    p.kernelParams = args;
    cudaGraphNode_t k;
    CK(cudaGraphAddKernelNode(&k, g, deps, n, &p));
    return k;
}

static cudaGraphNode_t memset0(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                               unsigned* dst) {
    cudaMemsetParams m = {};
    m.dst = dst;
    m.value = 0;
    m.elementSize = 4;
    m.width = 1;
    m.height = 1;
    cudaGraphNode_t node;
    CK(cudaGraphAddMemsetNode(&node, g, deps, n, &m));
    return node;
}

static char g_mode = 'a';

static cudaGraphNode_t while_node(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                  cudaGraphConditionalHandle h, cudaGraph_t* body) {
    if (g_mode == 'g') {
        // The body as a child graph: the returned node's graph is filled afterwards, so make
        // an empty child now and hand back the child's own graph (cudaGraphChildGraphNodeGetGraph).
        cudaGraph_t empty;
        CK(cudaGraphCreate(&empty, 0));
        cudaGraphNode_t node;
        CK(cudaGraphAddChildGraphNode(&node, g, deps, n, empty));
        CK(cudaGraphDestroy(empty));
        CK(cudaGraphChildGraphNodeGetGraph(node, body));
        return node;
    }
    cudaGraphNodeParams cp = {cudaGraphNodeTypeConditional};
    cp.conditional.handle = h;
    cp.conditional.type = g_mode == 'i' ? cudaGraphCondTypeIf : cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    cudaGraphNode_t node;
    CK(cudaGraphAddNode(&node, g, deps, nullptr, n, &cp));
    *body = cp.conditional.phGraph_out[0];
    return node;
}

int main(int argc, char** argv) {
    char mode = argc > 1 ? argv[1][0] : 'a';
    double seconds = argc > 2 ? atof(argv[2]) : 30;
    g_mode = mode;
    const unsigned N = 64;
    float *d0, *d1, *d2;
    unsigned *count1, *count2;
    CK(cudaMalloc(&d0, N * 4));
    CK(cudaMalloc(&d1, N * 4));
    CK(cudaMalloc(&d2, N * 4));
    CK(cudaMalloc(&count1, 4));
    CK(cudaMalloc(&count2, 4));
    CK(cudaMemset(d0, 0, N * 4));
    CK(cudaMemset(d1, 0, N * 4));
    CK(cudaMemset(d2, 0, N * 4));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    long it = 0;
    if (mode == 'k') {
        unsigned half = N / 2;
        float one = 1.0f;
        for (; std::chrono::steady_clock::now() < end; ++it) {
            for (int k = 0; k < 100; ++k) wp_scale<<<1, 256, 0, s>>>(d1, one, half);
            CK(cudaStreamSynchronize(s));
        }
        std::printf("ok %ld\n", it);
        return 0;
    }
    if (mode == 'p' || mode == 'q' || mode == 'r') {
        cudaStream_t s2 = s;
        if (mode != 'q') CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
        unsigned* counts[2] = {count1, count2};
        for (; std::chrono::steady_clock::now() < end; ++it) {
            cudaGraphExec_t execs[2];
            cudaGraph_t graphs[2];
            for (int k = 0; k < 2; ++k) {
                CK(cudaGraphCreate(&graphs[k], 0));
                cudaGraphConditionalHandle h;
                CK(cudaGraphConditionalHandleCreate(&h, graphs[k], 1, cudaGraphCondAssignDefault));
                cudaGraphNode_t m = memset0(graphs[k], nullptr, 0, counts[k]);
                g_mode = (mode == 'r' && k == 1) ? 'i' : 'w';
                cudaGraph_t body;
                while_node(graphs[k], &m, 1, h, &body);
                unsigned lim = 3;
                void* a[] = {&counts[k], &h, &lim};
                kernel(body, nullptr, 0, (void*)wp_while_step, 1, 1, a);
                CK(cudaGraphInstantiateWithFlags(&execs[k], graphs[k], 0));
            }
            for (int rep = 0; rep < 2; ++rep) {
                CK(cudaGraphLaunch(execs[0], s));
                CK(cudaGraphLaunch(execs[1], s2));
            }
            CK(cudaStreamSynchronize(s));
            CK(cudaStreamSynchronize(s2));
            unsigned got[2] = {0, 0};
            CK(cudaMemcpy(&got[0], count1, 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(&got[1], count2, 4, cudaMemcpyDeviceToHost));
            unsigned want2 = mode == 'r' ? 1 : 3;
            if (got[0] != 3 || got[1] != want2) {
                std::fprintf(stderr, "iteration %ld: counts %u %u, want 3 %u\n", it, got[0], got[1], want2);
                return 1;
            }
            for (int k = 0; k < 2; ++k) {
                CK(cudaGraphExecDestroy(execs[k]));
                CK(cudaGraphDestroy(graphs[k]));
            }
        }
        std::printf("ok %ld\n", it);
        return 0;
    }
    for (; mode == 'm' && std::chrono::steady_clock::now() < end; ++it) {
        cudaGraph_t g;
        CK(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle h;
        CK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
        cudaGraphNode_t m = memset0(g, nullptr, 0, count1);
        cudaGraph_t body;
        while_node(g, &m, 1, h, &body);
        unsigned lim = 3;
        void* a[] = {&count1, &h, &lim};
        kernel(body, nullptr, 0, (void*)wp_while_step, 1, 1, a);
        cudaGraphExec_t exec;
        CK(cudaGraphInstantiateWithFlags(&exec, g, 0));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaStreamSynchronize(s));
        unsigned got = 0;
        CK(cudaMemcpy(&got, count1, 4, cudaMemcpyDeviceToHost));
        if (got != 3) {
            std::fprintf(stderr, "iteration %ld: count %u, want 3\n", it, got);
            return 1;
        }
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(g));
    }
    for (; mode != 'm' && std::chrono::steady_clock::now() < end; ++it) {
        cudaGraph_t g;
        CK(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle h1, h2;
        bool reset1 = mode == 'b' || mode == 'i' || mode == 'g' || mode == 't';
        bool serial = mode == 's' || mode == 't', one_loop = mode == 'e';
        CK(cudaGraphConditionalHandleCreate(&h1, g, 1,
                                            reset1 || mode == 'f' ? cudaGraphCondAssignDefault : 0));
        if (!one_loop) CK(cudaGraphConditionalHandleCreate(&h2, g, 2, cudaGraphCondAssignDefault));
        cudaGraphNode_t start = nullptr;
        unsigned zero = 0, three = 3, one = 1, limit0 = 0, n = N, half = N / 2, quarter = N / 4;
        float two = 2.0f, minus2 = -2.0f;
        if (!reset1 && mode != 'd') {
            void* a[] = {&h1, &zero};
            start = kernel(g, nullptr, 0, (void*)wp_cond_const, 1, 1, a);
        }
        size_t nr = start ? 1 : 0;
        // The captured prefix: scale the first half of d1.
        void* sa[] = {&d1, &two, &half};
        cudaGraphNode_t scale = kernel(g, &start, nr, (void*)wp_scale, 1, 256, sa);
        // add: d1[3/4..] = d2[1/4..1/2] - 2
        float* dst = d1 + 3 * N / 4;
        float* src = d2 + N / 4;
        void* aa[] = {&dst, &src, &minus2, &quarter};
        cudaGraphNode_t add = kernel(g, &start, nr, (void*)wp_add, 1, 256, aa);
        // while 1: set to 3, count to 3.
        cudaGraphNode_t m1 = memset0(g, &scale, 1, count1);
        void* c1[] = {&h1, &three};
        cudaGraphNode_t set1 = kernel(g, &scale, 1, (void*)wp_cond_const, 1, 1, c1);
        cudaGraphNode_t pre1[] = {m1, set1, add};
        cudaGraph_t body1;
        cudaGraphNode_t w1 = while_node(g, pre1, 3, h1, &body1);
        {
            unsigned lim = 3;
            void* a[] = {&count1, &h1, &lim};
            kernel(body1, nullptr, 0, (void*)wp_while_step, 1, 1, a);
        }
        // while 2: default 2 at each launch, set to 1, limit 0: one iteration of its body.
        if (!one_loop) {
            cudaGraphNode_t m2 = memset0(g, &start, nr, count2);
            void* c2[] = {&h2, &one};
            cudaGraphNode_t set2 = kernel(g, &start, nr, (void*)wp_cond_const, 1, 1, c2);
            cudaGraphNode_t pre2[] = {m2, set2, w1};
            cudaGraph_t body2;
            while_node(g, pre2, serial ? 3 : 2, h2, &body2);
            void* a[] = {&count2, &h2, &limit0};
            cudaGraphNode_t step = kernel(body2, nullptr, 0, (void*)wp_while_step, 1, 1, a);
            void* r[] = {&d1, &d2, &n};
            cudaGraphNode_t rev = kernel(body2, &step, 1, (void*)wp_block_reverse, N / 16, 16, r);
            cudaGraphNode_t cp;
            CK(cudaGraphAddMemcpyNode1D(&cp, body2, &rev, 1, d1, d0, N, cudaMemcpyDeviceToDevice));
        }
        cudaGraphExec_t exec;
        CK(cudaGraphInstantiateWithFlags(&exec, g, 0));
        CK(cudaGraphLaunch(exec, s));
        if (start && mode == 'a') CK(cudaGraphNodeSetEnabled(exec, start, 0));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaStreamSynchronize(s));
        unsigned got1 = 0, got2 = 0;
        CK(cudaMemcpy(&got1, count1, 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&got2, count2, 4, cudaMemcpyDeviceToHost));
        unsigned want1 = mode == 'i' || mode == 'g' ? 1 : 3;
        if (got1 != want1 || (!one_loop && got2 != 1)) {
            std::fprintf(stderr, "iteration %ld: counts %u %u, want %u 1\n", it, got1, got2, want1);
            return 1;
        }
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(g));
    }
    std::printf("ok %ld\n", it);
    return 0;
}

/* A stand-in CUDA driver (libcuda.so.1) that does nothing and succeeds: every function the
 * backend calls returns CUDA_SUCCESS at once, out-parameters get plausible values (one
 * device of compute capability 9.0, or NULL_CUDA_DEVICES of them, fresh handles, real host memory for host allocations),
 * work "completes" the moment it is enqueued and host functions run at once. It exists to
 * count the instructions cueflow's own host code spends per call (callgrind) on a machine
 * without a GPU; it computes nothing, so results are meaningless. See README.md. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* H; /* any opaque handle */

static H fresh(void) { return calloc(1, 64); }
static __thread H t_ctx;

/* NULL_CUDA_CHECK_CONTEXT=1: streams and events remember the context current at their
 * creation, and recording an event or launching a kernel answers CUDA_ERROR_INVALID_HANDLE
 * (400) when the stream or event is not of the thread's current context, as the real driver
 * does. For finding calls made with another device's context current (D2) without a GPU. */
static int checking(void) {
    static int on = -1;
    if (on < 0) on = getenv("NULL_CUDA_CHECK_CONTEXT") != NULL;
    return on;
}
static H owned(void) { H h = fresh(); *(H*)h = t_ctx; return h; }
/* The legacy and per-thread streams (0, 1, 2) belong to whatever context is current. */
static int foreign(H s) { return checking() && (uintptr_t)s > 2 && *(H*)s != t_ctx; }
/* Primary contexts by device; NULL_CUDA_DEVICES (1 to 8, default 1) devices. */
static H g_primary[8];

static int devices(void) {
    const char* e = getenv("NULL_CUDA_DEVICES");
    int n = e ? atoi(e) : 1;
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = devices(); return 0; }
CUresult cuDeviceGet(CUdevice* d, int i) { *d = i; return i >= 0 && i < devices() ? 0 : 101; }
CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
    (void)d;
    strncpy(name, "null device (no GPU: tools/null-driver)", (size_t)len);
    if (len > 0) name[len - 1] = 0;
    return 0;
}
CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice d) { (void)d; *b = (size_t)80 << 30; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
    (void)d;
    switch (attr) {
    case 1: *v = 1024; break;                      /* max threads per block */
    case 2: case 3: *v = 1024; break;              /* max block dim x, y */
    case 4: *v = 64; break;                        /* max block dim z */
    case 5: *v = 0x7fffffff; break;                /* max grid dim x */
    case 6: case 7: *v = 65535; break;             /* max grid dim y, z */
    case 8: *v = 48 << 10; break;                  /* shared memory per block */
    case 10: *v = 32; break;                       /* warp size */
    case 16: *v = 132; break;                      /* multiprocessors */
    case 40: *v = 2; break;                        /* async engines */
    case 75: *v = 9; break;                        /* compute capability major */
    case 76: *v = 0; break;                        /* minor */
    case 97: *v = 227 << 10; break;                /* shared memory per block, opt-in */
    default: *v = 1; break;
    }
    return 0;
}
/* NULL_CUDA_PEER=1: every pair of devices has peer access (the peer paths run); else none. */
CUresult cuDeviceCanAccessPeer(int* can, CUdevice a, CUdevice b) { (void)a; (void)b; *can = getenv("NULL_CUDA_PEER") != NULL; return 0; }
CUresult cuDevicePrimaryCtxRetain(H* c, CUdevice d) {
    if (d < 0 || d >= devices()) return 101;
    if (!g_primary[d]) g_primary[d] = fresh();
    *c = g_primary[d];
    return 0;
}
CUresult cuCtxCreate_v2(H* c, unsigned f, CUdevice d) { (void)f; (void)d; *c = fresh(); t_ctx = *c; return 0; }
CUresult cuCtxCreate_v4(H* c, void* p, unsigned f, CUdevice d) { (void)p; return cuCtxCreate_v2(c, f, d); }
CUresult cuCtxGetCurrent(H* c) { *c = t_ctx; return 0; }
CUresult cuCtxSetCurrent(H c) { t_ctx = c; return 0; }
CUresult cuCtxPushCurrent_v2(H c) { t_ctx = c; return 0; }
CUresult cuCtxPopCurrent_v2(H* c) { if (c) *c = t_ctx; return 0; }
CUresult cuCtxGetDevice(CUdevice* d) {
    *d = 0;
    for (int i = 0; i < 8; i++)
        if (g_primary[i] && g_primary[i] == t_ctx) *d = i;
    return 0;
}
CUresult cuCtxGetFlags(unsigned* f) { *f = 0; return 0; }
CUresult cuCtxGetApiVersion(H c, unsigned* v) { (void)c; *v = 13000; return 0; }
CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) { *least = 0; *greatest = -5; return 0; }
CUresult cuStreamCreate(H* s, unsigned f) { (void)f; *s = owned(); return 0; }
CUresult cuStreamCreateWithPriority(H* s, unsigned f, int p) { (void)f; (void)p; *s = owned(); return 0; }
CUresult cuStreamGetFlags(H s, unsigned* f) { (void)s; *f = 1; return 0; }
CUresult cuStreamGetPriority(H s, int* p) { (void)s; *p = 0; return 0; }
CUresult cuEventCreate(H* e, unsigned f) { (void)f; *e = owned(); return 0; }
CUresult cuEventRecord(H e, H s) { return foreign(e) || foreign(s) ? 400 : 0; }
CUresult cuEventRecordWithFlags(H e, H s, unsigned f) { (void)f; return cuEventRecord(e, s); }
CUresult cuLaunchKernel(H f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, H s, void** params, void** extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared;
    (void)params; (void)extra;
    return foreign(s) ? 400 : 0;
}
CUresult cuEventElapsedTime(float* ms, H a, H b) { (void)a; (void)b; *ms = 0.001f; return 0; }
CUresult cuEventElapsedTime_v2(float* ms, H a, H b) { return cuEventElapsedTime(ms, a, b); }
CUresult cuStreamGetCaptureInfo_v3(H s, int* status, unsigned long long* id, H* g, const H** deps,
                                   const H** edges, size_t* n) {
    (void)s;
    if (status) *status = 0;
    if (id) *id = 0;
    if (g) *g = 0;
    if (deps) *deps = 0;
    if (edges) *edges = 0;
    if (n) *n = 0;
    return 0;
}
typedef void (*host_fn)(void*);
CUresult cuLaunchHostFunc(H s, host_fn f, void* data) { (void)s; f(data); return 0; }

/* Memory: device addresses are host allocations nobody reads; host memory is real. */
CUresult cuMemAlloc_v2(uint64_t* p, size_t n) { *p = (uint64_t)(uintptr_t)malloc(n ? n : 1); return 0; }
CUresult cuMemAllocAsync(uint64_t* p, size_t n, H s) { (void)s; return cuMemAlloc_v2(p, n); }
CUresult cuMemAllocFromPoolAsync(uint64_t* p, size_t n, H pool, H s) { (void)pool; (void)s; return cuMemAlloc_v2(p, n); }
CUresult cuMemAllocManaged(uint64_t* p, size_t n, unsigned f) { (void)f; return cuMemAlloc_v2(p, n); }
CUresult cuMemFree_v2(uint64_t p) { free((void*)(uintptr_t)p); return 0; }
CUresult cuMemFreeAsync(uint64_t p, H s) { (void)s; return cuMemFree_v2(p); }
CUresult cuMemHostAlloc(void** p, size_t n, unsigned f) { (void)f; *p = calloc(1, n ? n : 1); return 0; }
CUresult cuMemFreeHost(void* p) { free(p); return 0; }
CUresult cuMemHostGetDevicePointer_v2(uint64_t* d, void* p, unsigned f) { (void)f; *d = (uint64_t)(uintptr_t)p; return 0; }
CUresult cuMemGetInfo_v2(size_t* free_, size_t* total) { *free_ = (size_t)79 << 30; *total = (size_t)80 << 30; return 0; }
CUresult cuDeviceGetDefaultMemPool(H* pool, CUdevice d) { (void)d; *pool = fresh(); return 0; }
CUresult cuMemPoolCreate(H* pool, const void* props) { (void)props; *pool = fresh(); return 0; }
CUresult cuMemPoolGetAttribute(H pool, int attr, void* v) { (void)pool; (void)attr; memset(v, 0, 8); return 0; }

/* Modules: any image loads; every name is a function with unknown parameters. */
CUresult cuModuleLoadData(H* m, const void* image) { (void)image; *m = fresh(); return 0; }
CUresult cuModuleGetFunction(H* f, H m, const char* name) { (void)m; (void)name; *f = fresh(); return 0; }
CUresult cuModuleGetFunctionCount(unsigned* n, H m) { (void)m; *n = 0; return 0; }
CUresult cuFuncGetParamInfo(H f, size_t i, size_t* off, size_t* size) { (void)f; (void)i; (void)off; (void)size; return 801; }
CUresult cuFuncGetAttribute(int* v, int attr, H f) { (void)attr; (void)f; *v = 0; return 0; }
CUresult cuLinkCreate_v2(unsigned n, void* o, void* v, H* state) { (void)n; (void)o; (void)v; *state = fresh(); return 0; }
CUresult cuLinkComplete(H state, void** cubin, size_t* size) { (void)state; static char img[16]; *cubin = img; *size = sizeof img; return 0; }

/* Graphs: handles only. */
CUresult cuGraphCreate(H* g, unsigned f) { (void)f; *g = fresh(); return 0; }
CUresult cuGraphInstantiateWithFlags(H* e, H g, unsigned long long f) { (void)g; (void)f; *e = fresh(); return 0; }
CUresult cuGraphAddKernelNode_v2(H* n, H g, const H* d, size_t k, const void* p) { (void)g; (void)d; (void)k; (void)p; *n = fresh(); return 0; }
CUresult cuGraphAddEmptyNode(H* n, H g, const H* d, size_t k) { (void)g; (void)d; (void)k; *n = fresh(); return 0; }
CUresult cuGraphAddMemcpyNode(H* n, H g, const H* d, size_t k, const void* p, H c) { (void)g; (void)d; (void)k; (void)p; (void)c; *n = fresh(); return 0; }
CUresult cuGraphAddMemsetNode(H* n, H g, const H* d, size_t k, const void* p, H c) { (void)g; (void)d; (void)k; (void)p; (void)c; *n = fresh(); return 0; }
CUresult cuGraphAddHostNode(H* n, H g, const H* d, size_t k, const void* p) { (void)g; (void)d; (void)k; (void)p; *n = fresh(); return 0; }
CUresult cuGraphAddEventRecordNode(H* n, H g, const H* d, size_t k, H e) { (void)g; (void)d; (void)k; (void)e; *n = fresh(); return 0; }
CUresult cuGraphAddEventWaitNode(H* n, H g, const H* d, size_t k, H e) { (void)g; (void)d; (void)k; (void)e; *n = fresh(); return 0; }
CUresult cuGraphAddChildGraphNode(H* n, H g, const H* d, size_t k, H c) { (void)g; (void)d; (void)k; (void)c; *n = fresh(); return 0; }
CUresult cuStreamEndCapture(H s, H* g) { (void)s; *g = fresh(); return 0; }

CUresult cuGetErrorName(CUresult r, const char** s) { (void)r; *s = "CUDA_ERROR_NULL_DRIVER"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { (void)r; *s = "the null driver refused"; return 0; }

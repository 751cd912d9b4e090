/* A stand-in NCCL (libnccl.so.2) beside the null driver: the functions cueflow and
 * percall_profile call, each succeeding at once without moving a byte, so callgrind counts
 * the host path of a collective (the one-thread all-reduce over several devices) without GPUs.
 * See README.md. */
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef void* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { memset(id, 7, sizeof *id); return 0; }
ncclResult_t ncclCommInitRank(ncclComm_t* c, int n, ncclUniqueId id, int rank) {
    (void)n; (void)id; (void)rank;
    *c = calloc(1, 64);
    return 0;
}
ncclResult_t ncclCommInitAll(ncclComm_t* c, int n, const int* devs) {
    (void)devs;
    for (int i = 0; i < n; i++) c[i] = calloc(1, 64);
    return 0;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) { free(c); return 0; }
const char* ncclGetErrorString(ncclResult_t r) { (void)r; return "null NCCL"; }
ncclResult_t ncclGroupStart(void) { return 0; }
ncclResult_t ncclGroupEnd(void) { return 0; }
ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, int t, int op, ncclComm_t c, void* st) {
    (void)s; (void)r; (void)n; (void)t; (void)op; (void)c; (void)st;
    return 0;
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, int t, int root, ncclComm_t c, void* st) {
    (void)s; (void)r; (void)n; (void)t; (void)root; (void)c; (void)st;
    return 0;
}
ncclResult_t ncclReduce(const void* s, void* r, size_t n, int t, int op, int root, ncclComm_t c,
                        void* st) {
    (void)s; (void)r; (void)n; (void)t; (void)op; (void)root; (void)c; (void)st;
    return 0;
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, int t, ncclComm_t c, void* st) {
    (void)s; (void)r; (void)n; (void)t; (void)c; (void)st;
    return 0;
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, int t, int op, ncclComm_t c,
                               void* st) {
    (void)s; (void)r; (void)n; (void)t; (void)op; (void)c; (void)st;
    return 0;
}

/* A stand-in NVRTC (libnvrtc.so) for tools/null-driver: every program "compiles" to a
 * comment as its PTX. See README.md. */
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef void* nvrtcProgram;
static const char PTX[] = "// null-driver: no code\n";

nvrtcResult nvrtcVersion(int* major, int* minor) { *major = 13; *minor = 0; return 0; }
nvrtcResult nvrtcGetNumSupportedArchs(int* n) { *n = 1; return 0; }
nvrtcResult nvrtcGetSupportedArchs(int* a) { a[0] = 90; return 0; }
nvrtcResult nvrtcCreateProgram(nvrtcProgram* p, const char* src, const char* name, int n,
                               const char* const* h, const char* const* hn) {
    (void)src; (void)name; (void)n; (void)h; (void)hn;
    *p = calloc(1, 64);
    return 0;
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* p) { free(*p); *p = 0; return 0; }
nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int n, const char* const* o) { (void)p; (void)n; (void)o; return 0; }
nvrtcResult nvrtcAddNameExpression(nvrtcProgram p, const char* e) { (void)p; (void)e; return 0; }
nvrtcResult nvrtcGetLoweredName(nvrtcProgram p, const char* e, const char** lowered) { (void)p; *lowered = e; return 0; }
nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t* n) { (void)p; *n = sizeof PTX; return 0; }
nvrtcResult nvrtcGetPTX(nvrtcProgram p, char* out) { (void)p; memcpy(out, PTX, sizeof PTX); return 0; }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t* n) { (void)p; *n = 0; return 0; }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char* out) { (void)p; (void)out; return 0; }
nvrtcResult nvrtcGetLTOIRSize(nvrtcProgram p, size_t* n) { (void)p; *n = 0; return 0; }
nvrtcResult nvrtcGetLTOIR(nvrtcProgram p, char* out) { (void)p; (void)out; return 0; }
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t* n) { (void)p; *n = 1; return 0; }
nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char* out) { (void)p; out[0] = 0; return 0; }
const char* nvrtcGetErrorString(nvrtcResult r) { (void)r; return "null nvrtc"; }

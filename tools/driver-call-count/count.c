// Driver call counter: forwards every driver function to the real libcuda (the path build.sh
// found, or CC_REAL) and counts calls per function. A program reads the counts by calling
// `cueflow_driver_counts(label)` (found with dlsym in libcuda.so.1): it prints every function
// called since the last such call, with its count, to stderr, and starts counting afresh.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern void* cc_ptrs[];
extern unsigned long cc_counts[];
extern const char cc_names[];
extern int cc_count;
static const char* real_path(void) {
  const char* env = getenv("CC_REAL");
  if (env) return env;
  Dl_info info;
  static char path[4096];
  // build.sh wrote the real driver's path into the file `real` beside this library.
  if (dladdr((void*)real_path, &info) && info.dli_fname) {
    snprintf(path, sizeof path, "%s", info.dli_fname);
    char* slash = strrchr(path, '/');
    if (slash) {
      strcpy(slash + 1, "real");
      FILE* f = fopen(path, "r");
      if (f) {
        if (fgets(path, sizeof path, f)) path[strcspn(path, "\n")] = 0;
        fclose(f);
        return path;
      }
    }
  }
  fprintf(stderr, "driver-call-count: no file `real` beside the library and no CC_REAL\n");
  abort();
}
__attribute__((constructor)) static void cc_init(void) {
  const char* real = real_path();
  void* h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "driver-call-count: cannot open %s\n", real); abort(); }
  const char* p = cc_names;
  for (int i = 0; i < cc_count; i++) { cc_ptrs[i] = dlsym(h, p); p += strlen(p) + 1; }
}
void cueflow_driver_counts(const char* label) {
  fprintf(stderr, "COUNTS %s:", label);
  const char* p = cc_names;
  for (int i = 0; i < cc_count; i++) {
    if (cc_counts[i]) fprintf(stderr, " %s=%lu", p, cc_counts[i]);
    cc_counts[i] = 0;
    p += strlen(p) + 1;
  }
  fprintf(stderr, "\n");
}
// With CC_AT_EXIT set, what was counted since the last `cueflow_driver_counts` is printed when
// the program exits (for programs that do not call it).
__attribute__((destructor)) static void cc_exit(void) {
  if (getenv("CC_AT_EXIT")) cueflow_driver_counts("at exit");
}

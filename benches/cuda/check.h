// Shared by the raw CUDA reference programs: check every runtime call, print where it failed
// and exit 1 (exit code 0 must mean every call succeeded).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(call)                                                                               \
    do {                                                                                       \
        cudaError_t ck_err_ = (call);                                                          \
        if (ck_err_ != cudaSuccess) {                                                          \
            std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,     \
                         cudaGetErrorName(ck_err_), cudaGetErrorString(ck_err_));              \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

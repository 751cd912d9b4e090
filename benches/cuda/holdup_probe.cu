// Which driver calls that wait for running kernels also hold up other threads' calls while they
// wait. A kernel spins until a flag in device memory is set (or ~1 s passes); one thread makes a
// call that waits for running kernels (sync_calls_probe.cu lists them); 50 ms later the main
// thread sets the flag, either with a 4-byte copy from pinned memory on another stream or with
// a one-thread kernel. When the waiting call holds that up, the setter returns only after the
// spinning kernel gave up (~1 s) and the kernel reports a timeout. cueflow ends registrations on
// a freeing thread; this says which of that thread's calls must not be the ones that wait.
//
// On an H200 (driver 580.159, before the kernels were loaded up front): cudaHostUnregister,
// cudaFreeHost and cudaFree of device and of managed memory each held up the other thread's
// copy and its kernel launch until the spinning kernel gave up (~950 ms); cudaDeviceSynchronize,
// which waits as long, held up neither (0.04–0.07 ms).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o holdup_probe benches/cuda/holdup_probe.cu && ./holdup_probe
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "check.h"

__global__ void spin(volatile int* flag, int* timed_out, long long limit) {
    long long start = clock64();
    while (*flag == 0) {
        if (clock64() - start > limit) {
            *timed_out = 1;
            return;
        }
    }
}

__global__ void set_flag(int* flag) { *flag = 1; }

using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point a) {
    return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const long long limit = (long long)khz * 1000;  // ~1 s of the SM clock
    cudaStream_t spin_s, set_s;
    CK(cudaStreamCreateWithFlags(&spin_s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&set_s, cudaStreamNonBlocking));
    int *flag, *timed_out, *one;
    CK(cudaMalloc(&flag, sizeof(int)));
    CK(cudaMallocManaged(&timed_out, sizeof(int)));
    CK(cudaMallocHost(&one, sizeof(int)));
    *one = 1;
    // Load both kernels now: a first launch loads its function (lazy loading), and loading
    // waits for running kernels too.
    spin<<<1, 1, 0, spin_s>>>(flag, timed_out, 0);
    set_flag<<<1, 1, 0, set_s>>>(flag);
    CK(cudaDeviceSynchronize());
    const char* calls[] = {"nothing", "cudaHostUnregister", "cudaFreeHost", "cudaFree (device)",
                           "cudaFree (managed)", "cudaDeviceSynchronize"};
    const char* setters[] = {"4-byte copy from pinned", "kernel"};
    int failures = 0;
    for (int setter = 0; setter < 2; setter++) {
        for (int c = 0; c < 6; c++) {
            // What the waiting call will end or free, made before the kernel runs.
            static char host_buf[1 << 16];
            void *pinned = nullptr, *device = nullptr, *managed = nullptr;
            if (c == 1) CK(cudaHostRegister(host_buf, sizeof host_buf, cudaHostRegisterDefault));
            if (c == 2) CK(cudaMallocHost(&pinned, 1 << 16));
            if (c == 3) CK(cudaMalloc(&device, 1 << 16));
            if (c == 4) CK(cudaMallocManaged(&managed, 1 << 16));
            CK(cudaMemset(flag, 0, sizeof(int)));
            *timed_out = 0;
            CK(cudaDeviceSynchronize());
            spin<<<1, 1, 0, spin_s>>>(flag, timed_out, limit);
            CK(cudaGetLastError());
            double call_ms = 0;
            std::thread waiter([&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
                auto a = Clock::now();
                switch (c) {
                    case 1: CK(cudaHostUnregister(host_buf)); break;
                    case 2: CK(cudaFreeHost(pinned)); break;
                    case 3: CK(cudaFree(device)); break;
                    case 4: CK(cudaFree(managed)); break;
                    case 5: CK(cudaDeviceSynchronize()); break;
                }
                call_ms = ms_since(a);
            });
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            auto a = Clock::now();
            if (setter == 0) {
                CK(cudaMemcpyAsync(flag, one, sizeof(int), cudaMemcpyHostToDevice, set_s));
            } else {
                set_flag<<<1, 1, 0, set_s>>>(flag);
                CK(cudaGetLastError());
            }
            double set_ms = ms_since(a);
            waiter.join();
            CK(cudaDeviceSynchronize());
            bool held = *timed_out != 0;
            std::printf(
                "RESULT holdup setter=%-24s call=%-22s call %8.2f ms, setter call %8.3f ms, "
                "kernel %s\n",
                setters[setter], calls[c], call_ms, set_ms,
                held ? "TIMED OUT (the setter was held up)" : "released by the setter");
            // Only the baseline must release the kernel: it checks the probe itself.
            if (c == 0 && held) failures++;
        }
    }
    std::printf("device: %s\n", prop.name);
    return failures ? 1 : 0;
}

// Kernels of the graphConditionalNodes port. Instead of printing, every kernel appends its id
// to a log (log[0] counts the entries, log[1..] hold them), which the host reads back to see
// which bodies ran and how often.
#include "cueflow_conditional.h"

__device__ void append(unsigned int *log, unsigned int id) {
  unsigned int at = atomicAdd(&log[0], 1u);
  atomicExch(&log[1 + at], id);
}

// Kernel A of the if and if/else graphs: the condition is set when the byte is odd.
extern "C" __global__ void set_if_odd(const unsigned char *byte, cudaGraphConditionalHandle h,
                                      unsigned int *log, unsigned int id) {
  cudaGraphSetConditional(h, byte[0] & 1u);
  append(log, id);
}

// Kernel A of the switch graph: the condition is the byte.
extern "C" __global__ void set_to_byte(const unsigned char *byte, cudaGraphConditionalHandle h,
                                       unsigned int *log, unsigned int id) {
  cudaGraphSetConditional(h, byte[0]);
  append(log, id);
}

// A body kernel that only reports that it ran.
extern "C" __global__ void report(unsigned int *log, unsigned int id) { append(log, id); }

// The do-while body's last kernel: count down, and clear the condition at zero.
extern "C" __global__ void count_down(unsigned char *counter, cudaGraphConditionalHandle h,
                                      unsigned int *log, unsigned int id) {
  if (--counter[0] == 0) cudaGraphSetConditional(h, 0);
  append(log, id);
}

// The captured while loop's test (before the loop and as its body): count down while non-zero
// and keep looping while the counter is.
extern "C" __global__ void test_and_count(unsigned char *counter, cudaGraphConditionalHandle h,
                                          unsigned int *log, unsigned int id) {
  if (counter[0]) counter[0]--;
  cudaGraphSetConditional(h, counter[0]);
  append(log, id);
}

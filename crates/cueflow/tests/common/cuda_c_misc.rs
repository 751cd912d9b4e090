//! CUDA C shared by the CUDA C test files: a kernel that prints and asserts, and one that traps.

/// `checked` prints each thread's input (returning printf's length) and asserts it is not 13;
/// `trapper` traps in thread 3.
pub const MISC: &str = r#"
#include <assert.h>
extern "C" __global__ void checked(const int* in, int* out)
{
    int v = in[threadIdx.x];
    assert(v != 13);
    out[threadIdx.x] = printf("thread %u has %d\n", threadIdx.x, v);
}
extern "C" __global__ void trapper() { if (threadIdx.x == 3) __trap(); }
"#;

// simpleMultiCopy's kernel: out = in + 1 for the first N elements, `inner_reps` times over (a
// kernel long enough to overlap with the copies).
extern "C" __global__ void inc_kernel(int *g_out, const int *g_in, int N, int inner_reps)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        for (int i = 0; i < inner_reps; ++i) {
            g_out[idx] = g_in[idx] + 1;
        }
    }
}

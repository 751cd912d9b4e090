// asyncAPI's kernel: add `inc_value` to every element, one thread per element (the grid covers
// the array exactly, as in the original: n is a multiple of the block size).
extern "C" __global__ void increment_kernel(int *g_data, int inc_value)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    g_data[i] += inc_value;
}

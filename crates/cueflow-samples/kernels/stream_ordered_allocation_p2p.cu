// streamOrderedAllocationP2P's kernel: reads `src` (another GPU's stream-ordered memory, through
// peer access) and stores twice each element in `dst`.
extern "C" __global__ void copy_p2p_and_scale(const int *src, int *dst, int N)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        dst[idx] = 2 * src[idx];
    }
}

// simpleP2P's kernel, written for cueflow: dst = 2 * src, where src may be another GPU's
// memory reached over the peer path.
extern "C" __global__ void simple_kernel(const float* src, float* dst) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    dst[i] = src[i] * 2.0f;
}

// simpleStreams' kernel, written for cueflow: each thread adds *factor to its element
// `iterations` times (uncoalesced on purpose in the original, to take time).
extern "C" __global__ void init_array(int* data, const int* factor, int iterations) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < iterations; ++k) {
        data[i] += *factor;
    }
}

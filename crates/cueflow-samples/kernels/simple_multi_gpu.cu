// simpleMultiGPU's kernel, written for cueflow: each thread sums the elements of `input` at
// its position and every `gridDim.x * blockDim.x` after it, and writes its partial sum.
extern "C" __global__ void reduce_kernel(float* result, const float* input, int n) {
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int threads = gridDim.x * blockDim.x;
    float sum = 0.0f;
    for (int pos = tid; pos < n; pos += threads) {
        sum += input[pos];
    }
    result[tid] = sum;
}

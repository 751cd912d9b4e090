// simpleCallback's kernel, written for cueflow: every element is incremented once.
extern "C" __global__ void inc_kernel(int* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        data[i]++;
    }
}

// cudaOpenMP's kernel, written for cueflow: every element of `a` grows by `b`.
extern "C" __global__ void kernel_add_constant(int* a, const int b) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    a[idx] += b;
}

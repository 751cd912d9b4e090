// UnifiedMemoryStreams' device operation, written for cueflow in place of cuBLAS's DGEMV:
// result = A x for a row-major n x n matrix, one thread per row.
extern "C" __global__ void gemv(const double* a, const double* x, double* result, int n) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) {
        double sum = 0.0;
        for (int j = 0; j < n; ++j) {
            sum += a[(long long)row * n + j] * x[j];
        }
        result[row] = sum;
    }
}

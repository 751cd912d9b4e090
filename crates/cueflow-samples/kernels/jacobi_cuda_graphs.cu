// Kernels of the jacobiCudaGraphs port: one Jacobi step for A x = b (A is N_ROWS x N_ROWS,
// row-major floats) and the final error |x - 1|_1. N_ROWS comes from the compile options.
// Each block of jacobi_step owns ROWS_PER_BLOCK rows; blocks past the last row add nothing.

#ifndef N_ROWS
#define N_ROWS 512
#endif
#define ROWS_PER_BLOCK 8

extern "C" __global__ void jacobi_step(const float *A, const double *b,
                                       float conv_threshold, const double *x,
                                       double *x_new, double *sum) {
  __shared__ double xs[N_ROWS];
  __shared__ double dot[ROWS_PER_BLOCK];
  (void)conv_threshold;
  for (int i = threadIdx.x; i < N_ROWS; i += blockDim.x) xs[i] = x[i];
  if (threadIdx.x < ROWS_PER_BLOCK) dot[threadIdx.x] = 0.0;
  __syncthreads();
  int first = blockIdx.x * ROWS_PER_BLOCK;
  for (int k = 0; k < ROWS_PER_BLOCK && first + k < N_ROWS; k++) {
    int row = first + k;
    double part = 0.0;
    for (int j = threadIdx.x; j < N_ROWS; j += blockDim.x) {
      part += A[row * N_ROWS + j] * xs[j];
    }
    for (int off = 16; off > 0; off >>= 1) part += __shfl_down_sync(0xffffffffu, part, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(&dot[k], part);
  }
  __syncthreads();
  if (threadIdx.x < ROWS_PER_BLOCK) {
    int row = first + threadIdx.x;
    double dx = 0.0;
    if (row < N_ROWS) {
      dx = (b[row] - dot[threadIdx.x]) / A[row * N_ROWS + row];
      x_new[row] = xs[row] + dx;
    }
    atomicAdd(sum, fabs(dx));
  }
}

extern "C" __global__ void final_error(const double *x, double *g_sum) {
  extern __shared__ double warp_sums[];
  double s = 0.0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N_ROWS; i += blockDim.x * gridDim.x) {
    s += fabs(x[i] - 1.0);
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (unsigned int w = 0; w < blockDim.x / 32; w++) total += warp_sums[w];
    atomicAdd(g_sum, total);
  }
}

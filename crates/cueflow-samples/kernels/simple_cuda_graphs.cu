// Kernels of the simpleCudaGraphs port: a two-pass sum of a float vector in double precision.
// Pass 1: each block sums a grid-strided share of the input into one partial; pass 2: one
// block sums the partials. Tree reductions in shared memory; THREADS must be a power of two.

#define THREADS 512

extern "C" __global__ void sum_partials(const float *in, double *partials,
                                        unsigned long long n,
                                        unsigned long long n_partials) {
  __shared__ double acc[THREADS];
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  double mine = 0.0;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    mine += (double)in[i];
  }
  acc[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0 && blockIdx.x < n_partials) partials[blockIdx.x] = acc[0];
}

extern "C" __global__ void sum_final(const double *partials, double *result,
                                     unsigned long long n) {
  __shared__ double acc[THREADS];
  double mine = 0.0;
  for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) mine += partials[i];
  acc[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) result[0] = acc[0];
}

//! HK1: shared memory, barriers and atomics.

use super::*;

const SHARED: &str = r#"
extern "C" __global__ void block_sum(const float* in, float* out, unsigned n)
{
    __shared__ float s[256];
    unsigned t = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (t < o) s[t] = __fadd_rn(s[t], s[t + o]);
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

extern "C" __global__ void reverse_block(int* data)
{
    extern __shared__ int tmp[];
    unsigned t = threadIdx.x, b = blockIdx.x * blockDim.x;
    tmp[t] = data[b + t];
    __syncthreads();
    data[b + t] = tmp[blockDim.x - 1 - t];
}

extern "C" __global__ void histogram(const unsigned* in, unsigned n, unsigned* bins, unsigned* block_max)
{
    __shared__ unsigned local[16];
    if (threadIdx.x < 16) local[threadIdx.x] = 0;
    __syncthreads();
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[in[i] % 16], 1u);
    __syncthreads();
    if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
    atomicMax(block_max, blockIdx.x);
}

extern "C" __global__ void early_exit(int* out)
{
    if (threadIdx.x >= 50) return; // exited threads do not hold barriers up
    int a = __syncthreads_and(threadIdx.x < 50);
    int c = __syncthreads_count(1);
    if (threadIdx.x == 0) { out[0] = a; out[1] = c; }
}

extern "C" __global__ void counts(int* out)
{
    unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int c = __syncthreads_count(t % 3 == 0);
    int a = __syncthreads_and(t < 1000);
    int o = __syncthreads_or(t == 5);
    int z = __syncthreads_or(0);
    if (t == 0) { out[0] = c; out[1] = a; out[2] = o; out[3] = z; }
}
"#;

/// HK1: static shared memory and `__syncthreads` (a tree reduction writing `out[blockIdx.x]`).
#[test]
fn hk1_static_shared_memory_and_barriers_reduce_per_block() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 1000usize;
        let data: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 0.25).collect();
        let blocks = n.div_ceil(256);
        let input = upload(&s, &data);
        let out = upload(&s, &vec![0f32; blocks]);
        s.launch(
            &c_kernel("block_sum", SHARED),
            LaunchConfig::new(blocks as u32, 256),
            KernelArgs::new().read(&input).write(&out).scalar(n as u32),
        )
        .unwrap();
        let got = download(&s, &out);
        for b in 0..blocks {
            // The same tree, in Rust.
            let mut v: Vec<f32> = (0..256)
                .map(|t| data.get(b * 256 + t).copied().unwrap_or(0.0))
                .collect();
            let mut o = 128;
            while o > 0 {
                for t in 0..o {
                    v[t] += v[t + o];
                }
                o /= 2;
            }
            assert_eq!(got[b].to_bits(), v[0].to_bits(), "{dev:?} block {b}");
        }
    }
}

/// HK1: dynamic shared memory (`extern __shared__`), sized at launch.
#[test]
fn hk1_dynamic_shared_memory_is_per_block() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let data: Vec<i32> = (0..4 * 96).collect();
        let d = upload(&s, &data);
        s.launch(
            &c_kernel("reverse_block", SHARED),
            LaunchConfig::new(4, 96).shared(96 * 4),
            KernelArgs::new().write(&d),
        )
        .unwrap();
        let want: Vec<i32> = data
            .chunks(96)
            .flat_map(|c| c.iter().rev().copied())
            .collect();
        assert_eq!(download(&s, &d), want, "{dev:?}");
    }
}

/// HK1: atomics on shared and global memory (a histogram over several blocks).
#[test]
fn hk1_atomics_on_shared_and_global_memory() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 5000u32;
        let data: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2654435761) >> 7).collect();
        let input = upload(&s, &data);
        let bins = upload(&s, &[0u32; 16]);
        let mx = upload(&s, &[0u32]);
        s.launch(
            &c_kernel("histogram", SHARED),
            LaunchConfig::new(7, 128),
            KernelArgs::new()
                .read(&input)
                .scalar(n)
                .atomic(&bins)
                .atomic(&mx),
        )
        .unwrap();
        let mut want = [0u32; 16];
        for v in &data {
            want[(v % 16) as usize] += 1;
        }
        assert_eq!(download(&s, &bins), want.to_vec(), "{dev:?}");
        assert_eq!(download(&s, &mx), vec![6], "{dev:?}");
    }
}

/// HK1: `__syncthreads_count`, `_and`, `_or`.
#[test]
fn hk1_barrier_predicates() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        // 100 threads (a partial warp), and the largest block, (32, 8, 4): 1024 threads.
        for block in [(100, 1, 1), (32, 8, 4)] {
            let out = upload(&s, &[-1i32; 4]);
            s.launch(
                &c_kernel("counts", SHARED),
                LaunchConfig::new(1, block),
                KernelArgs::new().write(&out),
            )
            .unwrap();
            let threads = block.0 * block.1 * block.2;
            let c = (0..threads).filter(|t| t % 3 == 0).count() as i32;
            let a = (threads <= 1000) as i32;
            assert_eq!(download(&s, &out), vec![c, a, 1, 0], "{dev:?} {block:?}");
        }
        let out = upload(&s, &[-1i32; 2]);
        s.launch(
            &c_kernel("early_exit", SHARED),
            LaunchConfig::new(1, 96),
            KernelArgs::new().write(&out),
        )
        .unwrap();
        assert_eq!(download(&s, &out), vec![1, 50], "{dev:?}");
    }
}

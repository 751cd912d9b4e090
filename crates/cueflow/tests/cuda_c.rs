//! CUDA C on the host backend (SPEC HK1–HK3, KC1): kernels given only as CUDA C run on the
//! host backend with CUDA's execution model. Each test computes its expected values in Rust,
//! independently of the kernel, and runs on the host backend and, when one is present, on
//! CUDA device 0 (`SKIP cuda: …` otherwise; `CUEFLOW_REQUIRE_CUDA=1` makes that a failure).
#![allow(clippy::needless_range_loop)] // Index loops mirror the kernels' thread indices.

#[path = "common/cuda_c_misc.rs"]
mod cuda_c_misc;
use cuda_c_misc::MISC;

use cueflow::kernels::{self, BUILTINS_CU};
use cueflow::{
    CompileOptions, Device, DeviceBuffer, Error, Kernel, KernelArgs, LaunchConfig, Stream,
};

fn cuda() -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("CUEFLOW_REQUIRE_CUDA=1 but CUDA is unavailable: {e}");
            }
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("SKIP cuda: {e}"));
            None
        }
    }
}

/// The host device, then CUDA 0 when present.
fn devices() -> Vec<Device> {
    let mut v = vec![Device::host().unwrap()];
    v.extend(cuda());
    v
}

fn c_kernel(name: &str, src: &'static str) -> Kernel {
    Kernel::new(name).cuda_source(src, name).build()
}

fn upload<T: bytemuck::Pod>(s: &Stream, data: &[T]) -> DeviceBuffer<T> {
    let d = DeviceBuffer::<T>::new(s.device(), data.len()).unwrap();
    s.write_pageable(&d, data).unwrap();
    d
}

fn download<T: bytemuck::Pod + Default>(s: &Stream, d: &DeviceBuffer<T>) -> Vec<T> {
    let mut out = vec![T::default(); d.len()];
    s.read_pageable(&mut out, d).unwrap();
    out
}

fn inputs(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.37 + (i as f32) * 1e-4)
        .collect()
}

/// HK1/HK2: every built-in kernel runs from `builtins.cu` alone (no closure) on the host
/// backend, bit-identical to its Rust closure.
#[test]
fn hk2_builtins_from_cuda_c_match_their_closures_bit_for_bit() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let n = 1000; // not a multiple of the block: the tail block checks `i >= n`
    let x0 = inputs(n);
    let y0: Vec<f32> = inputs(n).iter().map(|v| v * 3.0 + 0.5).collect();
    let cfg = LaunchConfig::for_elements(n, kernels::BLOCK);
    let run = |closure: bool, which: &str| -> Vec<f32> {
        let y = upload(&s, &y0);
        let x = upload(&s, &x0);
        let k = |name: &str| c_kernel(name, BUILTINS_CU);
        match (which, closure) {
            ("fill", true) => kernels::fill(&s, &y, 1.25).unwrap(),
            ("fill", false) => s
                .launch(
                    &k("cf_fill_f32"),
                    cfg,
                    KernelArgs::new().write(&y).scalar(1.25f32).scalar(n as u64),
                )
                .unwrap(),
            ("scale", true) => kernels::scale(&s, &y, 1.7).unwrap(),
            ("scale", false) => s
                .launch(
                    &k("cf_scale_f32"),
                    cfg,
                    KernelArgs::new().write(&y).scalar(1.7f32).scalar(n as u64),
                )
                .unwrap(),
            ("saxpy", true) => kernels::saxpy(&s, 0.3, &x, &y).unwrap(),
            ("saxpy", false) => s
                .launch(
                    &k("cf_saxpy_f32"),
                    cfg,
                    KernelArgs::new()
                        .write(&y)
                        .read(&x)
                        .scalar(0.3f32)
                        .scalar(n as u64),
                )
                .unwrap(),
            ("compute", true) => kernels::compute(&s, &y, 37).unwrap(),
            ("compute", false) => s
                .launch(
                    &k("cf_compute_f32"),
                    cfg,
                    KernelArgs::new().write(&y).scalar(37u32).scalar(n as u64),
                )
                .unwrap(),
            _ => unreachable!(),
        }
        download(&s, &y)
    };
    // The GPU, when present, computes the same bits (HK2).
    let gpu = cuda().map(|d| {
        let g = Stream::new(&d).unwrap();
        let mut out = Vec::new();
        for which in ["fill", "scale", "saxpy", "compute"] {
            let y = upload(&g, &y0);
            let x = upload(&g, &x0);
            match which {
                "fill" => kernels::fill(&g, &y, 1.25).unwrap(),
                "scale" => kernels::scale(&g, &y, 1.7).unwrap(),
                "saxpy" => kernels::saxpy(&g, 0.3, &x, &y).unwrap(),
                _ => kernels::compute(&g, &y, 37).unwrap(),
            }
            out.push(download(&g, &y));
        }
        out
    });
    for (w, which) in ["fill", "scale", "saxpy", "compute"]
        .into_iter()
        .enumerate()
    {
        let a = run(true, which);
        let b = run(false, which);
        if let Some(g) = &gpu {
            for i in 0..n {
                assert_eq!(
                    a[i].to_bits(),
                    g[w][i].to_bits(),
                    "{which} on the GPU: element {i}"
                );
            }
        }
        for i in 0..n {
            assert_eq!(
                a[i].to_bits(),
                b[i].to_bits(),
                "{which}: element {i}: {} vs {}",
                a[i],
                b[i]
            );
        }
    }
    // The tools: empty, spin, flags.
    s.launch(
        &c_kernel("cf_empty", BUILTINS_CU),
        LaunchConfig::new(3, 64),
        KernelArgs::new(),
    )
    .unwrap();
    s.launch(
        &c_kernel("cf_spin_ns", BUILTINS_CU),
        LaunchConfig::new(2, 1),
        KernelArgs::new().scalar(1000u64),
    )
    .unwrap();
    let flag = upload(&s, &[0u32]);
    s.launch(
        &c_kernel("cf_set_flag", BUILTINS_CU),
        LaunchConfig::new(1, 32),
        KernelArgs::new().atomic(&flag).scalar(7u32),
    )
    .unwrap();
    s.launch(
        &c_kernel("cf_wait_flag", BUILTINS_CU),
        LaunchConfig::new(1, 32),
        KernelArgs::new()
            .atomic(&flag)
            .scalar(7u32)
            .scalar(1_000_000_000u64),
    )
    .unwrap();
    s.synchronize().unwrap();
    assert_eq!(download(&s, &flag), vec![7]);
}

/// HK3/KN2: the built-in fault kernel from CUDA C (a write to address 0x10) is a sticky kernel
/// fault naming the kernel; the process goes on.
#[test]
fn hk3_wild_access_to_unmapped_memory_is_a_sticky_fault() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let k = c_kernel("cf_fault", BUILTINS_CU);
    s.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().scalar(0x10u64),
    )
    .unwrap();
    let e = s.synchronize().unwrap_err();
    match &e {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "cf_fault");
            assert!(detail.contains("illegal address"), "{detail}");
        }
        other => panic!("expected a kernel fault, got {other}"),
    }
    // Sticky (ER2).
    assert!(matches!(s.synchronize(), Err(Error::KernelFault { .. })));
    // Another device works.
    let d2 = Device::host().unwrap();
    let s2 = Stream::new(&d2).unwrap();
    let b = upload(&s2, &[1.0f32; 4]);
    kernels::scale(&s2, &b, 2.0).unwrap();
    assert_eq!(download(&s2, &b), vec![2.0; 4]);
}

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

const WARPS: &str = r#"
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void warp_ops(const int* in, int* out)
{
    unsigned t = threadIdx.x, lane = t % 32;
    int v = in[t];
    int sum = v;
    for (int o = 16; o > 0; o /= 2) sum += __shfl_down_sync(0xffffffff, sum, o);
    int x = v;
    for (int o = 1; o < 32; o *= 2) x += __shfl_xor_sync(0xffffffff, x, o);
    int up = __shfl_up_sync(0xffffffff, v, 3);
    int bc = __shfl_sync(0xffffffff, v, 7);
    unsigned ballot = __ballot_sync(0xffffffff, v % 2 == 0);
    int any = __any_sync(0xffffffff, v == 40);
    int all = __all_sync(0xffffffff, v >= 0);
    int* o = out + t * 8;
    o[0] = lane == 0 ? sum : 0;
    o[1] = x;
    o[2] = up;
    o[3] = bc;
    o[4] = (int)ballot;
    o[5] = any;
    o[6] = all;
    o[7] = (int)__activemask();
}

// Half the warp makes an extra warp operation, then the whole warp shuffles: lanes that made
// different numbers of warp operations must still exchange with each other.
extern "C" __global__ void partial_then_full(int* out)
{
    unsigned lane = threadIdx.x % 32;
    int v = (int)lane;
    if (lane < 16) v += __shfl_down_sync(0x0000ffffu, v, 8, 16);
    int w = __shfl_xor_sync(0xffffffffu, v, 16);
    out[threadIdx.x] = w;
}

extern "C" __global__ void groups(const int* in, int* out)
{
    cg::thread_block block = cg::this_thread_block();
    __shared__ int s[64];
    s[block.thread_rank()] = in[block.thread_rank()];
    block.sync();
    int v = s[(block.thread_rank() + 1) % block.size()];
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
    int r = cg::reduce(tile, v, cg::plus<int>());
    int d = tile.shfl_down(v, 1);
    out[block.thread_rank() * 3] = r;
    out[block.thread_rank() * 3 + 1] = d;
    out[block.thread_rank() * 3 + 2] = (int)tile.meta_group_rank();
}
"#;

/// HK1: warp shuffles and votes, 32 lanes a warp (the last warp partial: 48 threads).
#[test]
fn hk1_warp_shuffles_and_votes() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 64usize;
        let data: Vec<i32> = (0..n as i32).map(|i| (i * 37) % 50).collect();
        let input = upload(&s, &data);
        let out = upload(&s, &vec![0i32; n * 8]);
        s.launch(
            &c_kernel("warp_ops", WARPS),
            LaunchConfig::new(1, n as u32),
            KernelArgs::new().read(&input).write(&out),
        )
        .unwrap();
        let got = download(&s, &out);
        for t in 0..n {
            let w = t / 32 * 32;
            let lane = t % 32;
            let warp = &data[w..w + 32];
            let o = &got[t * 8..t * 8 + 8];
            let total: i32 = warp.iter().sum();
            assert_eq!(o[0], if lane == 0 { total } else { 0 }, "sum, thread {t}");
            assert_eq!(o[1], total, "xor butterfly, thread {t}");
            assert_eq!(
                o[2],
                if lane >= 3 {
                    warp[lane - 3]
                } else {
                    warp[lane]
                },
                "up, thread {t}"
            );
            assert_eq!(o[3], warp[7], "broadcast, thread {t}");
            let ballot = warp
                .iter()
                .enumerate()
                .fold(0u32, |m, (i, v)| m | (((v % 2 == 0) as u32) << i));
            assert_eq!(o[4] as u32, ballot, "ballot, thread {t}");
            assert_eq!(o[5], warp.contains(&40) as i32, "any, thread {t}");
            assert_eq!(o[6], 1, "all, thread {t}");
            assert_eq!(o[7] as u32, u32::MAX, "activemask, thread {t}");
        }
    }
}

/// HK1: lanes that made different numbers of warp operations (a partial mask, then the full
/// warp) still exchange the values of the same operation.
#[test]
fn hk1_warp_operations_after_a_partial_mask() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let out = upload(&s, &[0i32; 64]);
        s.launch(
            &c_kernel("partial_then_full", WARPS),
            LaunchConfig::new(1, 64),
            KernelArgs::new().write(&out),
        )
        .unwrap();
        let v: Vec<i32> = (0..32)
            .map(|l| {
                if l < 16 {
                    l + if l + 8 < 16 { l + 8 } else { l }
                } else {
                    l
                }
            })
            .collect();
        let want: Vec<i32> = (0..64).map(|t| v[(t % 32) ^ 16]).collect();
        assert_eq!(download(&s, &out), want, "{dev:?}");
    }
}

/// HK1: cooperative groups: thread block, sync, tiles of 16, `cg::reduce`, tile shuffles.
#[test]
fn hk1_cooperative_groups() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 64usize;
        let data: Vec<i32> = (0..n as i32).map(|i| i * i % 23).collect();
        let input = upload(&s, &data);
        let out = upload(&s, &vec![0i32; n * 3]);
        s.launch(
            &c_kernel("groups", WARPS),
            LaunchConfig::new(1, n as u32),
            KernelArgs::new().read(&input).write(&out),
        )
        .unwrap();
        let got = download(&s, &out);
        let v: Vec<i32> = (0..n).map(|t| data[(t + 1) % n]).collect();
        for t in 0..n {
            let tile = t / 16 * 16;
            let sum: i32 = v[tile..tile + 16].iter().sum();
            assert_eq!(got[t * 3], sum, "reduce, thread {t}");
            let d = if t % 16 < 15 { v[t + 1] } else { v[t] };
            assert_eq!(got[t * 3 + 1], d, "shfl_down, thread {t}");
            assert_eq!(
                got[t * 3 + 2],
                (t / 16) as i32,
                "meta_group_rank, thread {t}"
            );
        }
    }
}

/// HK1: `printf` formats and writes (its return value is the formatted length); HK3/KN2: a
/// failed `assert` is a sticky fault naming the kernel.
#[test]
fn hk1_printf_and_hk3_assert_faults() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let k = c_kernel("checked", MISC);
    let input = upload(&s, &[1i32, 22, 333]);
    let out = upload(&s, &[0i32; 3]);
    s.launch(
        &k,
        LaunchConfig::new(1, 3),
        KernelArgs::new().read(&input).write(&out),
    )
    .unwrap();
    let want: Vec<i32> = [1, 22, 333]
        .iter()
        .enumerate()
        .map(|(t, v)| format!("thread {t} has {v}\n").len() as i32)
        .collect();
    assert_eq!(download(&s, &out), want);

    let bad = upload(&s, &[1i32, 13, 2]);
    s.launch(
        &k,
        LaunchConfig::new(1, 3),
        KernelArgs::new().read(&bad).write(&out),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "checked");
            assert!(detail.contains("v != 13"), "{detail}");
        }
        e => panic!("expected a kernel fault, got {e}"),
    }
    assert!(matches!(s.synchronize(), Err(Error::KernelFault { .. })));

    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    s.launch(
        &c_kernel("trapper", MISC),
        LaunchConfig::new(2, 8),
        KernelArgs::new(),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "trapper");
            assert!(detail.contains("__trap"), "{detail}");
        }
        e => panic!("expected a kernel fault, got {e}"),
    }
}

/// KC1: options reach the compiler (a define, an include directory, a header given as text);
/// a compile error is `Error::Compile` with the compiler's log; a parameter mismatch is
/// refused at launch (ER3) with nothing enqueued.
#[test]
fn kc1_options_errors_and_parameter_checks() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let dir = std::env::temp_dir().join(format!("cueflow-cuda-c-inc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("twice.h"), "#define TWICE(x) ((x) * 2)\n").unwrap();
    let src = r#"
#include "twice.h"
#include "plus.h"
extern "C" __global__ void opts(int* out) { out[threadIdx.x] = PLUS(TWICE(VALUE), 1); }
"#;
    let k = Kernel::new("opts")
        .cuda_source(src, "opts")
        .cuda_options(
            CompileOptions::new()
                .define("VALUE", "20")
                .include_dir(&dir)
                .header("plus.h", "#define PLUS(a, b) ((a) + (b))\n")
                .std("c++17"),
        )
        .build();
    let out = upload(&s, &[0i32; 2]);
    s.launch(&k, LaunchConfig::new(1, 2), KernelArgs::new().write(&out))
        .unwrap();
    assert_eq!(download(&s, &out), vec![41, 41]);

    let broken = Kernel::new("broken")
        .cuda_source(
            "extern \"C\" __global__ void broken(int* o) { o[0] = undefined_name; }",
            "broken",
        )
        .build();
    match s.launch(
        &broken,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&out),
    ) {
        Err(Error::Compile { kernel, log }) => {
            assert_eq!(kernel, "broken");
            assert!(log.contains("undefined_name"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    match s.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&out).scalar(1u32),
    ) {
        Err(Error::InvalidArgument { why, .. }) => assert!(why.contains("1 parameters"), "{why}"),
        other => panic!("expected a parameter mismatch, got {other:?}"),
    }
    s.synchronize().unwrap();
}

/// HK1: a templated kernel by name expression, with a struct parameter passed by value (KC4).
#[test]
fn hk1_templates_and_struct_parameters() {
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Affine {
        a: f32,
        b: f32,
        n: u32,
        _pad: u32,
    }
    let src = r#"
struct Affine { float a, b; unsigned n, pad; };
template <class T> __global__ void affine(T* d, Affine p)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) d[i] = __fadd_rn(__fmul_rn(d[i], p.a), p.b);
}
"#;
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let k = Kernel::new("affine")
            .cuda_source(src, "affine<float>")
            .build();
        let data = inputs(300);
        let d = upload(&s, &data);
        let p = Affine {
            a: 1.5,
            b: -0.25,
            n: 300,
            _pad: 0,
        };
        s.launch(
            &k,
            LaunchConfig::for_elements(300, 128),
            KernelArgs::new().write(&d).scalar(p),
        )
        .unwrap();
        let got = download(&s, &d);
        for (g, x) in got.iter().zip(&data) {
            assert_eq!(g.to_bits(), (x * 1.5 - 0.25).to_bits());
        }
    }
}

//! HK1: warp operations and cooperative groups.

use super::*;

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

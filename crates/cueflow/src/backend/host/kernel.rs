//! Host kernels: a launch runs its closure once per block on the compute workers, each block
//! seeing its arguments through [`BlockArgs`], or its CUDA C ([`cuda_c`]) for a range of
//! blocks at a time.

use std::ops::Range;

use super::cuda_c;
use crate::backend::contract::kernel::{BlockArgs, BlockCtx, Dim3, Launch};

/// Run blocks `range` of a host launch (called by the compute workers).
pub(super) fn run_host_blocks(launch: &Launch, range: Range<u64>) {
    if cuda_c::uses_c(&launch.kernel) {
        let m = cuda_c::load(&launch.kernel)
            .unwrap_or_else(|e| panic!("the kernel's CUDA C could not be loaded: {e}"));
        if let Err(fault) = cuda_c::run_blocks(&m, launch, range) {
            panic!("{fault}");
        }
        return;
    }
    let f = launch
        .kernel
        .host
        .as_ref()
        .expect("core checked the kernel has a host implementation");
    let [gx, gy, _] = launch.grid;
    let threads = launch.threads_per_block();
    for b in range {
        let (x, rest) = (b % gx as u64, b / gx as u64);
        let (y, z) = (rest % gy as u64, rest / gy as u64);
        let ctx = BlockCtx {
            block_idx: Dim3 {
                x: x as u32,
                y: y as u32,
                z: z as u32,
            },
            grid_dim: launch.grid.into(),
            block_dim: launch.block.into(),
            linear_block: b,
            threads,
            shared_bytes: launch.shared_bytes,
        };
        let args = BlockArgs::new(launch, ctx.thread_range());
        f(&ctx, &args);
    }
}

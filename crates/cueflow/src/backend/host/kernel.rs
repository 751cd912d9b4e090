//! Host kernels: a launch runs its closure once per block on the compute workers, each block
//! seeing its arguments through [`BlockArgs`], or its CUDA C ([`cuda_c`]) for a range of
//! blocks at a time.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use super::cuda_c;
use super::isolate::WorkerSlot;
use crate::backend::contract::kernel::Launch;
use crate::types::BlockArgs;
use crate::types::{BlockCtx, Dim3};

thread_local! {
    /// The kernel worker of the device whose engine thread this is (set at the thread's start).
    static WORKER: RefCell<Option<Arc<WorkerSlot>>> = const { RefCell::new(None) };
}

/// Make `slot` the kernel worker of this engine thread's device (the CUDA-C path runs there).
pub(super) fn bind_worker(slot: Arc<WorkerSlot>) {
    WORKER.with(|w| *w.borrow_mut() = Some(slot));
}

/// Whether `l` may go to the kernel worker in one request with the launches after it in its
/// stream (R5 in `isolate/ring.rs`): a one-part CUDA C launch ready to run there.
pub(super) fn c_batchable(l: &Launch) -> bool {
    let one_part = l.serial() || l.blocks() == 1;
    one_part
        && WORKER.with(|w| {
            w.borrow()
                .as_deref()
                .is_some_and(|s| cuda_c::batchable(l, s))
        })
}

/// Run `launches` ([`c_batchable`], of one stream, in order) in the kernel worker, as few
/// requests as fit (R5). A fault panics (the scheduler makes it the sticky error naming the
/// kernel) after setting `failed` to the index of the launch it belongs to; the launches
/// after that one did not run.
pub(super) fn run_c_batch(launches: &[&Launch], failed: &mut Option<usize>) {
    let with_modules: Vec<_> = launches
        .iter()
        .map(|l| {
            let m = cuda_c::load(&l.kernel)
                .unwrap_or_else(|e| panic!("the kernel's CUDA C could not be loaded: {e}"));
            (m, *l)
        })
        .collect();
    let slot = WORKER
        .with(|w| w.borrow().clone())
        .expect("c_batchable found the worker");
    if let Err((i, fault)) = cuda_c::run_batch(&with_modules, &slot) {
        *failed = Some(i);
        std::panic::resume_unwind(Box::new(fault));
    }
}

/// Run blocks `range` of a host launch (called by the compute workers).
pub(super) fn run_host_blocks(launch: &Launch, range: Range<u64>) {
    if cuda_c::uses_c(&launch.kernel) {
        let m = cuda_c::load(&launch.kernel)
            .unwrap_or_else(|e| panic!("the kernel's CUDA C could not be loaded: {e}"));
        let slot = WORKER.with(|w| w.borrow().clone());
        if let Err(fault) = cuda_c::run_blocks(&m, launch, range, slot.as_deref()) {
            std::panic::resume_unwind(Box::new(fault));
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

//! A stream's queued CUDA C launches as one piece of engine work (R5 in `isolate/ring.rs`,
//! node rule 5): the compute worker that claims a one-part CUDA C launch takes the launches
//! queued behind it in its stream that wait for nothing else, sends them all to the kernel
//! worker in one request, and completes them in order once they ran. One hand-over to the
//! worker process and back serves many launches instead of one each (on a 2-core machine a
//! launch through the worker cost 2.4-2.9x a closure's in a stream, each hand-over a process
//! switch or two).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{fault_error, ComputeJob, Finish, Scheduler};
use crate::backend::contract::op::{Op, Work};
use crate::backend::host::kernel;
use crate::backend::host::sched_node::SchedNode;
use crate::panics;

/// Most launches one compute worker takes from a stream at once for the kernel worker (R5):
/// enough to share one hand-over among many, few enough that the stream's completions and
/// other streams' work wait little for them.
const MAX_CHAIN: usize = 16;

/// Whether `op` may join a chain of a stream's CUDA C launches (R5): untraced (each traced
/// launch reports its own times), unchecked by the sanitizer, one part, for the worker.
fn chainable(op: &Op) -> bool {
    match &op.work {
        Work::Launch(l) => {
            op.trace.is_none() && op.read_check().is_none() && kernel::c_batchable(l)
        }
        _ => false,
    }
}

impl Scheduler {
    /// The launches queued behind `job` in its stream that go to the kernel worker in one
    /// request with it (R5, node rule 5), taken from their nodes; `None` when there are none.
    pub(super) fn c_chain(&self, job: &ComputeJob) -> Option<Vec<(Arc<SchedNode>, Op)>> {
        let Finish::SchedNode(node) = &job.done else {
            return None;
        };
        if job.parts != 1 || self.poisoned.load(Ordering::Acquire) || !chainable(&job.op) {
            return None;
        }
        let mut chain: Vec<(Arc<SchedNode>, Op)> = Vec::new();
        while chain.len() + 1 < MAX_CHAIN {
            let tail = chain.last().map_or(node, |(n, _)| n);
            let Some(next) = tail.take_successor(chainable) else {
                break;
            };
            chain.push(next);
        }
        (!chain.is_empty()).then_some(chain)
    }

    /// Run `job`'s launch and `chain`'s after it in one request, then complete `job`'s node,
    /// which completes the chain's in order (node rule 5). A fault is the device's sticky
    /// error naming the launch that made it; the launches after it do not run.
    pub(super) fn run_c_chain(
        self: &Arc<Self>,
        job: Arc<ComputeJob>,
        chain: Vec<(Arc<SchedNode>, Op)>,
    ) {
        job.started.store(true, Ordering::Release);
        if !self.poisoned.load(Ordering::Acquire) {
            self.run_c_launches(&job.op, &chain);
        }
        job.finished.store(job.parts, Ordering::Release);
        let done = job.done.clone();
        drop(chain); // MM2: the ops' references go before completion.
        drop(job);
        self.finish(done);
    }

    /// Run `first` and `chain`'s launches in one request; a fault poisons the device.
    fn run_c_launches(&self, first: &Op, chain: &[(Arc<SchedNode>, Op)]) {
        let ops: Vec<&Op> = std::iter::once(first)
            .chain(chain.iter().map(|(_, op)| op))
            .collect();
        let launches: Vec<_> = ops
            .iter()
            .map(|op| match &op.work {
                Work::Launch(l) => l,
                _ => unreachable!("chainable took launches only"),
            })
            .collect();
        let mut failed = None;
        let run = panics::catch(|| kernel::run_c_batch(&launches, &mut failed));
        if let Err(payload) = run {
            let op = ops[failed.unwrap_or(0)];
            self.set_poison(fault_error(&self.name, op, payload));
        }
    }
}

//! Graph runs on the host scheduler (graph rules 2 and 4 of `graph.rs`): a launch's stream
//! node starts its run at the graph's roots, each completed node makes its dependents ready,
//! record nodes complete their markers, gates release the nodes they hold, and the run
//! completes the stream node after its last node.

use crate::backend::contract::device::done_target;
use crate::backend::contract::op::Op;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::exec;
use super::graph::{EventNode, GraphJob, GraphRun};
use super::sched::{Finish, Scheduler};
use super::sched_node::{SchedNode, SchedWork};
use crate::trace::Engine;

impl Scheduler {
    /// A launch's stream node became ready: start its run at the graph's roots (graph rule 2).
    pub(super) fn start_graph(self: &Arc<Self>, node: Arc<SchedNode>, job: GraphJob) {
        if let Some(slot) = &job.trace {
            slot.start_ns.store(self.now_ns(), Ordering::Relaxed);
        }
        // GR9: conditions that reset take their default as the launch starts.
        for c in &job.compiled.conds {
            c.start_launch();
        }
        let run = GraphRun::new(node, job);
        if run.job.compiled.nodes.is_empty() {
            return self.graph_finished(&run);
        }
        // Graph rule 4: nodes held until pending work get a gate, one more dependency each,
        // before any node runs; the gates go once the roots are out.
        let mut gates = Vec::new();
        let gated = run.job.events.iter().flat_map(|e| &e.gated);
        for (nodes, after) in gated {
            // Another backend's completions were waited for at the launch (HostStream).
            let pending: Vec<&SchedNode> = after
                .iter()
                .filter_map(|d| done_target(d).downcast_ref::<SchedNode>())
                .filter(|n| !n.is_done())
                .collect();
            if pending.is_empty() {
                continue;
            }
            for &i in nodes {
                run.hold(i);
            }
            let work = SchedWork::GraphGate(run.clone(), nodes.clone());
            let gate = self.begin(work, run.node.priority, None);
            for n in pending {
                gate.depend_on(n);
            }
            gates.push(gate);
        }
        for &r in &run.job.compiled.roots {
            if !run.held(r) {
                self.graph_node_ready(&run, r);
            }
        }
        for g in gates {
            self.release(g);
        }
    }

    /// SchedNode `i` of `run` is ready: dispatch it, or finish it at once when it has no work.
    fn graph_node_ready(self: &Arc<Self>, run: &Arc<GraphRun>, i: usize) {
        match &run.job.compiled.nodes[i].op {
            Some(op) => self.dispatch(Finish::Graph(run.clone(), i), Op::clone(op)),
            None => self.graph_node_done(run.clone(), i),
        }
    }

    /// SchedNode `i` of `run` completed: release its dependents. On a compute worker of this
    /// device, one ready single-block kernel runs right here as the continuation (the graph
    /// fast path), after every other ready node was dispatched — so a kernel that waits for a
    /// sibling (a flag) never holds up the sibling's dispatch. Another device's worker (whose
    /// completion started this launch) dispatches instead: its thread runs kernels in its own
    /// device's kernel worker, where this device's memory is not mapped.
    pub(super) fn graph_node_done(self: &Arc<Self>, run: Arc<GraphRun>, i: usize) {
        let inline = self.on_own_compute_worker();
        let nodes = &run.job.compiled.nodes;
        let mut completed = vec![i];
        while let Some(n) = completed.pop() {
            if let (Some(EventNode::Record(k)), Some(e)) = (nodes[n].event, &run.job.events) {
                // Graph rule 4: the record node's dependencies completed.
                self.release(e.markers[k].clone());
            }
            let mut next = None;
            for &d in &nodes[n].dependents {
                if !run.release(d) {
                    continue;
                }
                match &nodes[d].op {
                    None => completed.push(d),
                    Some(op)
                        if inline
                            && next.is_none()
                            && op.engine() == Engine::Compute
                            && exec::parts(op) <= 1 =>
                    {
                        next = Some(d)
                    }
                    Some(op) => self.dispatch(Finish::Graph(run.clone(), d), Op::clone(op)),
                }
            }
            if run.finish_one() {
                self.graph_finished(&run);
            }
            if let Some(d) = next {
                if let Some(op) = &nodes[d].op {
                    self.run_compute_part(op);
                }
                completed.push(d);
            }
        }
    }

    /// The run's last node completed: its stream node completes once the run is dropped,
    /// after the job it holds ([`GraphRun`]'s drop).
    fn graph_finished(self: &Arc<Self>, run: &GraphRun) {
        if let Some(slot) = &run.job.trace {
            slot.end_ns.store(self.now_ns(), Ordering::Release);
        }
        let (me, node) = (self.clone(), run.node.clone());
        run.on_drop(Box::new(move || me.complete(node)));
    }

    /// A gate of graph nodes completed (graph rule 4): one dependency of each less.
    pub(super) fn gate_opened(self: &Arc<Self>, run: &Arc<GraphRun>, nodes: &[usize]) {
        for &i in nodes {
            if run.release(i) {
                self.graph_node_ready(run, i);
            }
        }
    }
}

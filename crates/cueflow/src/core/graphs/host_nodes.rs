//! A graph's host nodes as the sanitizer sees them (HF1 in graphs, GR8): a host node's unchecked
//! host accesses (`as_slice_unchecked`) come after the work its launch is ordered after and its
//! graph's nodes upstream of it, before the work ordered after it, and beside the nodes of its
//! graph that no path of dependencies orders with it — which the launch's clocks cannot tell
//! apart (a launch stamps its nodes alike), so each host node keeps their writes.
//!
//! Rules:
//! 1. Each host node of the launched graph (not of a conditional body, which may run it any
//!    number of times) runs, at instantiation and every update, as a function that first takes
//!    its launch's place from a queue of its own, then runs the node's function with its host
//!    accesses checked there ([`hostfn::in_place`]).
//! 2. A launch pushes one empty place per host node before the tracking layer sees it, which
//!    fills them while it stamps the launch (the sanitizer on), before the backend may run
//!    the graph; a refused launch takes them back. Launches of one instantiation run one
//!    after another, each host node once per launch (GR3), so a node takes its own launch's.
//! 3. A place is after the stream's clock before the launch, the snapshots of the wait nodes
//!    upstream of the node, and every stamp of the launch (the nodes beside it are the node's
//!    own list); its own stamp is its group's: work after it covers that one.

use crate::backend::contract::node_op::NodeOp;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::graph::{ancestors, GraphNode, GraphWork};
use crate::backend::contract::op::{HostCall, Op, Work};
use crate::core::graphs::order::node_operation;
use crate::core::streams::hostfn::{self, GraphHostNode, HostFnOrder, NodeWrite, OrderSlot};
use crate::core::tracking::call::{LaunchPlace, Site};
use crate::types::Access;

/// One host node: its index, what is beside it, the wait nodes upstream of it and its group
/// (the graph's event scope's, rule 3), and the places of its launches to come.
struct HostNode {
    index: usize,
    beside: Arc<GraphHostNode>,
    waits: Vec<usize>,
    group: usize,
    places: Arc<Mutex<VecDeque<Arc<OrderSlot>>>>,
}

/// The host nodes of one instantiation (rule 1).
#[derive(Default)]
pub(crate) struct HostNodes(Vec<HostNode>);

impl HostNodes {
    /// The host nodes of `nodes`, each among the graph's event nodes where `among` says (the
    /// wait nodes upstream of it and its group, rule 3); `site` stands for a node's call site
    /// where it has none.
    pub fn new(
        nodes: &[GraphNode],
        among: &dyn Fn(usize) -> (Vec<usize>, usize),
        site: Site,
    ) -> HostNodes {
        let mut hosts = HostNodes(
            host_nodes(nodes)
                .map(|index| HostNode {
                    index,
                    beside: Arc::default(),
                    waits: Vec::new(),
                    group: 0,
                    places: Arc::default(),
                })
                .collect(),
        );
        hosts.update(nodes, among, site);
        hosts
    }

    /// After an update to `nodes` (the same shape): what is beside each node now, and where
    /// it is among the event nodes (`among`, as for [`new`](Self::new)).
    pub fn update(
        &mut self,
        nodes: &[GraphNode],
        among: &dyn Fn(usize) -> (Vec<usize>, usize),
        site: Site,
    ) {
        for h in &mut self.0 {
            h.beside = Arc::new(beside(nodes, h.index, site));
            (h.waits, h.group) = among(h.index);
        }
    }

    /// Rule 1: `nodes` with each host node's function taking its place first.
    pub fn wrap<'n>(&self, nodes: Cow<'n, [GraphNode]>) -> Cow<'n, [GraphNode]> {
        if self.0.is_empty() {
            return nodes;
        }
        let mut owned = nodes.into_owned();
        for h in &self.0 {
            if let GraphWork::Op(op) = &owned[h.index].work {
                owned[h.index].work = GraphWork::Op(NodeOp::new(self.wrap_op(h.index, op)));
            }
        }
        Cow::Owned(owned)
    }

    /// Rule 1 for node `i`'s operation `op` (an update's): wrapped where it is a host node.
    pub fn wrap_op(&self, i: usize, op: &Op) -> Op {
        let (Some(h), Work::HostFn(call)) = (self.0.iter().find(|h| h.index == i), &op.work) else {
            return op.clone();
        };
        let (places, inner) = (h.places.clone(), call.f.clone());
        let mut out = op.clone();
        out.work = Work::HostFn(Box::new(HostCall {
            f: Arc::new(move || {
                let slot = places.lock().pop_front();
                let place = slot.and_then(|s| s.lock().clone());
                hostfn::in_place(place, || inner());
            }),
            ..(**call).clone()
        }));
        out
    }

    /// Rule 2: a launch begins (`None` when the graph has no host node); unless it is marked
    /// [`launched`](Begun::launched), dropping what this returns takes its places back.
    pub fn begin_launch(&self) -> Option<Begun<'_>> {
        if self.0.is_empty() {
            return None;
        }
        for h in &self.0 {
            h.places.lock().push_back(Arc::default());
        }
        Some(Begun(Some(self)))
    }

    /// Rule 3: fill the places the launch begun last pushed, where `at` says it runs.
    pub fn place(&self, at: &LaunchPlace<'_>) {
        for h in &self.0 {
            let mut after = (**at.before).clone();
            for &w in &h.waits {
                if let Some(Some(snap)) = at.waited.get(w) {
                    after.join(snap);
                }
            }
            for &(actor, time) in &at.stamps {
                after.raise(actor, time);
            }
            let place = HostFnOrder {
                after: Arc::new(after),
                stamp: at.stamps[h.group],
                graph: Some(h.beside.clone()),
            };
            if let Some(slot) = h.places.lock().back() {
                *slot.lock() = Some(place);
            }
        }
    }
}

/// A launch begun (rule 2): its places go back unless it was launched — also when the launch
/// unwinds (the sanitizer's panic mode).
pub(crate) struct Begun<'a>(Option<&'a HostNodes>);

impl Begun<'_> {
    /// The backend took the launch: its host nodes will take their places.
    pub fn launched(mut self) {
        self.0 = None;
    }
}

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        for h in self.0.iter().flat_map(|hosts| &hosts.0) {
            h.places.lock().pop_back();
        }
    }
}

/// The host nodes of `nodes`, by index.
fn host_nodes(nodes: &[GraphNode]) -> impl Iterator<Item = usize> + '_ {
    nodes.iter().enumerate().filter_map(|(i, n)| match &n.work {
        GraphWork::Op(op) if matches!(op.work, Work::HostFn(_)) => Some(i),
        _ => None,
    })
}

/// The writes and atomic accesses of host memory (what an unchecked host read can touch) by
/// the nodes of `nodes` that no path of dependencies orders with node `j`.
fn beside(nodes: &[GraphNode], j: usize, site: Site) -> GraphHostNode {
    let before = ancestors(nodes, j);
    let mut after = vec![false; nodes.len()];
    for (k, n) in nodes.iter().enumerate().skip(j + 1) {
        after[k] = n.deps.iter().any(|&d| d == j || after[d]);
    }
    let mut beside = Vec::new();
    for (k, n) in nodes.iter().enumerate() {
        if k == j || before[k] || after[k] {
            continue;
        }
        n.for_each_access(&mut |m, kind, part| {
            if kind != Access::Read && m.len > 0 && m.kind().is_host() {
                beside.push(NodeWrite {
                    alloc: m.alloc.clone(),
                    bytes: m.range(),
                    kind,
                    node: k,
                    stream: n.stream,
                    operation: node_operation(n, &m.alloc, part),
                    site: n.site.unwrap_or(site),
                });
            }
        });
    }
    GraphHostNode { node: j, beside }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::contract::memory::{Allocation, MemRef};
    use crate::types::MemKind;

    fn node(work: Work, deps: &[usize]) -> GraphNode {
        GraphNode {
            work: GraphWork::Op(NodeOp::new(Op::new(work))),
            deps: deps.into(),
            lane: 0,
            stream: 0,
            site: None,
        }
    }

    #[test]
    fn a_host_node_is_beside_exactly_the_nodes_unordered_with_it() {
        let pinned = Allocation::borrowed(0x1000, 64, MemKind::Pinned, 0);
        let memset = |deps: &[usize]| {
            let dst = MemRef {
                alloc: pinned.clone(),
                offset: 0,
                len: 64,
            };
            node(Work::Memset { dst, value: 0 }, deps)
        };
        let host = node(Work::HostFn(Box::new(HostCall::new(Arc::new(|| {})))), &[0]);
        // 0 -> host (1) -> 2; 3 beside; 4 after 3 and the host node.
        let nodes = [
            memset(&[]),
            host,
            memset(&[1]),
            memset(&[]),
            memset(&[3, 1]),
        ];
        let site = std::panic::Location::caller();
        let b = beside(&nodes, 1, site);
        let which: Vec<usize> = b.beside.iter().map(|w| w.node).collect();
        assert_eq!(which, vec![3]);
        assert_eq!(
            HostNodes::new(&nodes, &|_| (Vec::new(), 0), site).0.len(),
            1
        );
    }
}

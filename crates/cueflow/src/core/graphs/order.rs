//! Conflicting graph nodes (AC3, AC4, AC6): which nodes of a graph touch the same bytes, at
//! least one writing, with nothing in the graph ordering them — what the sanitizer reports at
//! instantiation (naming each node by what it runs, [`node_operation`]), and what a backend
//! whose engines share the host's memory must keep apart.
//!
//! Rules:
//! 1. Capture order is a topological order: a node depends only on earlier nodes. The walk
//!    visits the nodes in that order.
//! 2. Happens-before between nodes is reachability over their dependencies, kept as vector
//!    clocks over *chains*: a node extends the chain its stream's (lane's) previous node is on
//!    when that chain's last node is among its ancestors (always so in a captured graph,
//!    capture rule 2), else the first chain whose last node is among them, and starts a chain
//!    of its own otherwise; its clock is the join of its dependencies' clocks with its own chain ticked.
//!    Each chain is totally ordered, so node `i` is an ancestor of node `j` exactly when `j`'s
//!    clock covers `i`'s chain position. (Starting a chain whenever the lane's last node was
//!    not an ancestor made each branch of each fork of a built graph a chain: L fork/join
//!    stages of width W had (W − 1)·L chains, every clock up to that many entries, and
//!    instantiation grew with the square of the stages.)
//! 3. Accesses are kept per allocation in an [`AccessMap`] (byte ranges; the last write and the
//!    reads and atomics since), one actor per node; a node's accesses are checked against the
//!    map (AC3's conflicts, as for stream operations) before they are recorded.
//! 4. Race pass (AC4): a conflicting earlier node whose position the node's clock does not
//!    cover is a race, reported with both nodes. Only the graph's own dependencies count: what
//!    CUDA would run at once.
//! 5. Serialization pass (AC6): the same walk, but each unordered conflicting earlier node
//!    becomes an extra dependency whose clock is joined before the node's own is ticked. The
//!    map keeps the last write and the reads since, so ordering a node after those orders it,
//!    through them, after every earlier conflicting node. Extra edges go from an earlier node
//!    to a later one, so the graph stays acyclic, and the order they impose is capture order:
//!    what the same calls on streams run in under AC6.
//! 6. Allocation and free nodes touch no bytes of their own: capture rule 7 already orders every
//!    use of graph memory between them. Graph memory itself (placeholders) is tracked like any
//!    allocation, so two unordered nodes writing it conflict too.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use crate::backend::contract::device::DoneSignal;
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::Part;
use crate::core::tracking::access::{AccessMap, Rec};
use crate::core::tracking::call::What;
use crate::core::tracking::clock::{Actor, SharedClock, VClock};
use crate::types::{Access, CondKind};

crate::backend::contract::downcast::as_any!(Planned);

/// One side of an unordered conflict.
#[derive(Clone, Debug)]
pub(crate) struct NodeAccess {
    pub node: usize,
    pub kind: Access,
    pub part: Part,
    pub bytes: Range<usize>,
}

/// Two nodes that conflict with no path between them (rule 4).
pub(crate) struct Unordered {
    pub alloc: Arc<Allocation>,
    pub overlap: Range<usize>,
    pub earlier: NodeAccess,
    pub later: NodeAccess,
}

/// An access of a node not yet run: entries stay in the map whatever happens (rule 3).
struct Planned;

impl DoneSignal for Planned {
    fn is_done(&self) -> bool {
        false
    }
}

/// The races of `nodes` (rule 4), in node order of the later side.
pub(crate) fn races(nodes: &[GraphNode]) -> Vec<Unordered> {
    walk(nodes, false).1
}

/// The extra dependencies of each node that keep conflicting nodes apart (rule 5); all empty
/// for a graph without unordered conflicts.
pub(crate) fn extra_deps(nodes: &[GraphNode]) -> Vec<Vec<usize>> {
    walk(nodes, true).0
}

/// `nodes` with `extra` added to their dependencies (what a serializing backend instantiates).
pub(crate) fn with_extra(nodes: &[GraphNode], extra: &[Vec<usize>]) -> Vec<GraphNode> {
    nodes
        .iter()
        .zip(extra)
        .map(|(n, x)| {
            let mut n = n.clone();
            for &d in x {
                if !n.deps.contains(&d) {
                    n.deps.push(d);
                }
            }
            n
        })
        .collect()
}

/// What graph node `n` does when it accesses `alloc` as `part`: its operation, or for a
/// conditional node the operation of its body that makes the access (GR9), for memory nodes
/// the allocation or free (GR7, GR10).
pub(crate) fn node_operation(n: &GraphNode, alloc: &Arc<Allocation>, part: Part) -> String {
    match &n.work {
        GraphWork::Op(op) => What::of(op).describe(part),
        GraphWork::Conditional(c) => {
            let inner = c
                .bodies
                .iter()
                .flat_map(|b| b.iter())
                .find(|b| {
                    let mut hit = false;
                    b.for_each_access(&mut |m, _, p| {
                        hit |= Arc::ptr_eq(&m.alloc, alloc) && p == part;
                    });
                    hit
                })
                .map_or_else(
                    || "an operation".to_string(),
                    |b| node_operation(b, alloc, part),
                );
            format!("{} node's body: {inner}", cond_name(c.kind))
        }
        // Memory, empty and event nodes, by their type.
        w => w.node_type().1.noun().into(),
    }
}

fn cond_name(k: CondKind) -> &'static str {
    match k {
        CondKind::If => "if",
        CondKind::IfElse => "if/else",
        CondKind::While => "while",
        CondKind::Switch => "switch",
    }
}

/// Rules 1–5: one walk; with `serialize`, unordered conflicts become extra dependencies.
fn walk(nodes: &[GraphNode], serialize: bool) -> (Vec<Vec<usize>>, Vec<Unordered>) {
    let mut w = Walk::new(nodes.len());
    let mut extra: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut unordered: Vec<Unordered> = Vec::new();
    for (j, n) in nodes.iter().enumerate() {
        let mut vc = w.joined_deps(&n.deps);
        let accs = w.accesses(j, n);
        for (i, u) in w.conflicts(j, &accs) {
            let (chain, pos) = w.places[i];
            if vc.covers(chain, pos) {
                continue;
            }
            if serialize {
                // Rule 5.
                extra[j].push(i);
                let mut joined = vc.to_clock();
                joined.join(&w.clocks[i].to_clock());
                vc = SharedClock::from(joined);
            } else if !unordered
                .iter()
                .any(|x| x.earlier.node == i && x.later.node == j)
            {
                // Rule 4: once per pair of nodes.
                unordered.push(u);
            }
        }
        w.place(n.lane, vc);
        w.record(j, accs);
    }
    (extra, unordered)
}

/// What the walk knows of the nodes it has visited: their clocks and places on the chains
/// (rule 2), and their accesses per allocation (rule 3).
struct Walk {
    /// Each node's clock, shared along a chain of single dependencies (`SharedClock`).
    clocks: Vec<SharedClock>,
    /// Each node's (chain, position), and the chain of each lane's last node.
    places: Vec<(Actor, u64)>,
    lane_chain: HashMap<usize, Actor>,
    /// Each chain's length, by chain (chains count from 1; entry 0 unused).
    chain_len: Vec<u64>,
    maps: Vec<(Arc<Allocation>, AccessMap)>,
    /// Index into `maps` by allocation (its address in this process).
    map_of: HashMap<*const Allocation, usize>,
    /// The completion of every recorded access: never done (rule 3).
    planned: Arc<dyn DoneSignal>,
}

impl Walk {
    fn new(nodes: usize) -> Walk {
        Walk {
            clocks: Vec::with_capacity(nodes),
            places: Vec::with_capacity(nodes),
            lane_chain: HashMap::new(),
            chain_len: vec![0],
            maps: Vec::new(),
            map_of: HashMap::new(),
            planned: Arc::new(Planned),
        }
    }

    /// The join of the clocks of a node's dependencies (rule 2): a single dependency's own
    /// (shared), else one sort of all their entries (a join of thousands of branches copied
    /// the growing clock per dependency).
    fn joined_deps(&self, deps: &[usize]) -> SharedClock {
        match deps {
            [] => SharedClock::from(VClock::default()),
            &[d] => self.clocks[d].clone(),
            deps => SharedClock::from(VClock::of_entries(
                deps.iter().flat_map(|&d| self.clocks[d].entries()),
            )),
        }
    }

    /// The accesses of node `j`, each with the index of its allocation's map (made on first
    /// use).
    fn accesses(&mut self, j: usize, n: &GraphNode) -> Vec<(usize, NodeAccess)> {
        let mut accs = Vec::new();
        // GR9: a conditional node accesses what any of its bodies may.
        n.for_each_access(&mut |m, kind, part| {
            if m.len == 0 {
                return;
            }
            let map = *self.map_of.entry(Arc::as_ptr(&m.alloc)).or_insert_with(|| {
                self.maps.push((m.alloc.clone(), AccessMap::default()));
                self.maps.len() - 1
            });
            let bytes = m.range();
            accs.push((
                map,
                NodeAccess {
                    node: j,
                    kind,
                    part,
                    bytes,
                },
            ));
        });
        accs
    }

    /// Rule 3: the earlier nodes whose accesses conflict with `accs` of node `j`, each with
    /// the conflict, latest node first (its clock covers most).
    fn conflicts(&self, j: usize, accs: &[(usize, NodeAccess)]) -> Vec<(usize, Unordered)> {
        let mut found: Vec<(usize, Unordered)> = Vec::new();
        for (map, acc) in accs {
            let (alloc, m) = &self.maps[*map];
            m.conflicts(&acc.bytes, acc.kind, j as Actor + 1, |rec, overlap| {
                let i = (rec.id - 1) as usize;
                let earlier = NodeAccess {
                    node: i,
                    kind: rec.kind,
                    part: rec.part,
                    bytes: rec.range.clone(),
                };
                let later = acc.clone();
                let alloc = alloc.clone();
                found.push((
                    i,
                    Unordered {
                        alloc,
                        overlap,
                        earlier,
                        later,
                    },
                ));
            });
        }
        found.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        found
    }

    /// Rule 2: the next node's chain, on `lane`, and its clock `vc` ticked to its place.
    fn place(&mut self, lane: usize, vc: SharedClock) {
        // A chain may be extended only after its last node (another lane's node may have
        // extended the lane's chain since).
        let last_covered = |c: Actor| vc.covers(c, self.chain_len[c as usize]);
        let lane_chain = self
            .lane_chain
            .get(&lane)
            .copied()
            .filter(|&c| last_covered(c));
        let chain = match lane_chain {
            Some(c) => c,
            // A chain whose last node is an ancestor, or a new one.
            None => (vc.entries())
                .find(|&(c, p)| self.chain_len[c as usize] == p)
                .map_or_else(
                    || {
                        self.chain_len.push(0);
                        (self.chain_len.len() - 1) as Actor
                    },
                    |(c, _)| c,
                ),
        };
        let pos = self.chain_len[chain as usize] + 1;
        self.chain_len[chain as usize] = pos;
        self.lane_chain.insert(lane, chain);
        self.places.push((chain, pos));
        self.clocks.push(vc.raised(chain, pos));
    }

    /// Rule 3: node `j`'s accesses go into their maps, never done.
    fn record(&mut self, j: usize, accs: Vec<(usize, NodeAccess)>) {
        for (map, acc) in accs {
            let rec = Rec {
                id: j as u64 + 1,
                actor: j as Actor + 1,
                kind: acc.kind,
                part: acc.part,
                range: acc.bytes.clone(),
                done: Some(self.planned.clone()),
                info: None,
            };
            self.maps[map].1.record(acc.bytes, &rec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::contract::graph::GraphWork;
    use crate::backend::contract::memory::MemRef;
    use crate::backend::contract::op::{Op, Work};
    use crate::types::MemKind;

    fn alloc() -> Arc<Allocation> {
        Allocation::placeholder(
            64,
            0,
            crate::backend::contract::memory::GraphSlot {
                capture: 1,
                slot: 0,
            },
        )
    }

    fn memset(a: &Arc<Allocation>, r: Range<usize>, lane: usize, deps: &[usize]) -> GraphNode {
        let dst = MemRef {
            alloc: a.clone(),
            offset: r.start,
            len: r.len(),
        };
        GraphNode {
            work: GraphWork::Op(crate::backend::contract::node_op::NodeOp::new(Op::new(
                Work::Memset { dst, value: 0 },
            ))),
            deps: deps.into(),
            lane,
            stream: lane as u64 + 1,
            site: None,
        }
    }

    /// The walk's clocks over `nodes` (rule 2), as `walk` places them.
    fn placed(nodes: &[GraphNode]) -> Walk {
        let mut w = Walk::new(nodes.len());
        for n in nodes {
            let vc = w.joined_deps(&n.deps);
            w.place(n.lane, vc);
        }
        w
    }

    /// Rule 2 on random graphs over three lanes: node `i` is an ancestor of node `j` exactly
    /// when `j`'s clock covers `i`'s place.
    #[test]
    fn clocks_tell_ancestors_exactly() {
        let a = alloc();
        let mut next = crate::core::graphs::chains::testing::numbers(0x005e_ed0f_c10c);
        for _ in 0..60 {
            let n = 2 + next(30);
            let nodes: Vec<GraphNode> = (0..n)
                .map(|i| {
                    let mut d: Vec<usize> = (0..next(4).min(i)).map(|_| next(i)).collect();
                    d.sort_unstable();
                    d.dedup();
                    memset(&a, 0..8, next(3), &d)
                })
                .collect();
            let w = placed(&nodes);
            for j in 0..n {
                let up = crate::backend::contract::graph::ancestors(&nodes, j);
                for (i, &is_ancestor) in up.iter().enumerate() {
                    let (c, p) = w.places[i];
                    assert_eq!(
                        w.clocks[j].covers(c, p),
                        is_ancestor || i == j,
                        "{i} -> {j}"
                    );
                }
            }
        }
    }

    /// Rule 2: fork/join stages on one lane (a built graph) lie on as many chains as a stage
    /// is wide, and a node after a wide join shares the join's clock along its chain.
    #[test]
    fn fork_join_stages_reuse_chains_and_chains_share_clocks() {
        let a = alloc();
        let mut nodes = vec![memset(&a, 0..8, 0, &[])];
        for _ in 0..50 {
            let fork = nodes.len() - 1;
            let branches: Vec<usize> = (0..4).map(|k| nodes.len() + k).collect();
            nodes.extend((0..4).map(|k| memset(&a, 8 * k..8 * k + 8, 0, &[fork])));
            nodes.push(memset(&a, 0..64, 0, &branches));
        }
        let join = nodes.len() - 1;
        nodes.extend((0..100).map(|k| memset(&a, 0..8, 0, &[join + k])));
        let w = placed(&nodes);
        assert_eq!(w.chain_len.len() - 1, 4, "chains");
        assert!((join + 1..nodes.len()).all(|j| w.clocks[j].same_base(&w.clocks[join + 1])));
        assert!(races(&nodes).is_empty());
    }

    #[test]
    fn unordered_writers_race_and_get_an_edge() {
        let a = alloc();
        assert_eq!(a.kind, MemKind::Device);
        // 0 on lane 0; 1 and 2 forked from it on lanes 1 and 2, unordered, both writing.
        let nodes = [
            memset(&a, 0..64, 0, &[]),
            memset(&a, 0..32, 1, &[0]),
            memset(&a, 16..48, 2, &[0]),
            memset(&a, 0..64, 0, &[1, 2]),
        ];
        let r = races(&nodes);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].earlier.node, r[0].later.node), (1, 2));
        assert_eq!(r[0].overlap, 16..32);
        assert_eq!(extra_deps(&nodes), vec![vec![], vec![], vec![1], vec![]]);
        // Disjoint bytes do not conflict.
        let ok = [
            memset(&a, 0..64, 0, &[]),
            memset(&a, 0..32, 1, &[0]),
            memset(&a, 32..64, 2, &[0]),
            memset(&a, 0..64, 0, &[1, 2]),
        ];
        assert!(races(&ok).is_empty());
        assert!(extra_deps(&ok).iter().all(Vec::is_empty));
    }

    #[test]
    fn ordering_through_another_lane_counts() {
        let a = alloc();
        // Node 2 (lane 1) is ordered after node 0 (lane 0) through node 1 of lane 2.
        let nodes = [
            memset(&a, 0..8, 0, &[]),
            memset(&a, 32..40, 2, &[0]),
            memset(&a, 0..8, 1, &[1]),
        ];
        assert!(races(&nodes).is_empty());
        // Three unordered writers: the serialized graph chains them in capture order.
        let three = [
            memset(&a, 0..8, 0, &[]),
            memset(&a, 0..8, 1, &[]),
            memset(&a, 0..8, 2, &[]),
        ];
        assert_eq!(races(&three).len(), 2);
        assert_eq!(extra_deps(&three), vec![vec![], vec![0], vec![1]]);
    }

    #[test]
    fn nodes_without_an_operation_are_named_by_their_type() {
        let a = alloc();
        let node = |work| GraphNode {
            work,
            deps: Default::default(),
            lane: 0,
            stream: 1,
            site: None,
        };
        let named = |work| node_operation(&node(work), &a, Part::Whole);
        assert_eq!(
            named(GraphWork::Alloc { slot: 0, bytes: 64 }),
            "graph memory allocation node"
        );
        assert_eq!(named(GraphWork::Free { slot: 0 }), "graph memory free node");
        let other = GraphWork::FreeOther { mem: a.clone() };
        assert_eq!(named(other), "graph memory free node");
        assert_eq!(named(GraphWork::Empty), "empty node");
        let set = memset(&a, 0..8, 0, &[]);
        assert!(node_operation(&set, &a, Part::Whole).contains("memset"));
    }
}

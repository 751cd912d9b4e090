//! Graphs as built node by node (GR8), and captured graphs in the same shape: a list of nodes
//! with explicit dependencies that may name any node (so cycles can be written), child graphs,
//! event record and wait nodes, and empty nodes. Instantiation *flattens* such a graph into the
//! topologically ordered [`GraphNode`] list that core's graph rules and every backend take.
//!
//! Rules:
//! 1. A dependency names a node of the same graph; anything else is refused when added (an
//!    unknown node, GR8), and again at flattening.
//! 2. Flattening orders the nodes topologically, stably (a graph whose nodes already depend
//!    only on earlier ones — every captured graph — keeps its order and indices); a cycle is a
//!    typed error naming a node on it (GR8).
//! 3. A child graph is inlined: its roots depend on the child node's dependencies, and an
//!    empty join node after its leaves stands for the child node, so what depends on the child
//!    depends on all of it. A child graph may not hold memory nodes (as in CUDA).
//! 4. Event record and wait nodes stay nodes of the flattened graph, with CUDA's scope (GR8):
//!    a record node's event captures the node's ancestors (and the stream's work before the
//!    launch), a wait node holds back only its descendants. Backends run them as nodes
//!    (`cuGraphAddEventRecordNode`, `cuGraphAddEventWaitNode` on CUDA); core tracks what each
//!    orders ([`crate::core::graphs::events`]). A child graph's event nodes are the parent's.
//! 5. Graph memory (GR7) of a built graph is numbered per graph; every node that uses it must
//!    be ordered after its allocation node and before its free node, checked on the flattened
//!    graph and reported with the offending node's index and label (GR8).
//! 6. A graph is a value: cloning copies it (cudaGraphClone) — node indices stay valid in the
//!    clone — and changing one leaves the other as it was. The copy keeps the graph's identity
//!    (its id): node handles, conditions and graph memory of the original are the copy's too,
//!    and a graph with memory nodes has one instantiation at a time across its copies
//!    ([`GraphDef::claim`]), as CUDA allows one (and no clone) for such a graph.
//! 7. Conditional nodes keep their bodies as graphs until instantiation
//!    ([`crate::core::graphs::cond`]).

use crate::backend::contract::node_op::OpArena;
use std::any::Any;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::contract::graph::{ancestors, GraphNode, GraphWork, NodeDeps};
use crate::backend::contract::memory::{Allocation, GraphSlot};
use crate::backend::contract::op::{Op, Work};
use crate::core::graphs::capture::{Captured, Conditional};
use crate::core::graphs::cond::BuildCond;
use crate::core::streams::event::EventCore;
use crate::core::tracking::call::Site;
use crate::error::{Error, Result};
use crate::trace::OpKind;
use crate::types::NodeType;

/// Graph ids for built graphs; far above capture session ids, which share the slot id space.
static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1 << 40);

/// What a node of a graph under construction does.
#[derive(Clone)]
pub(crate) enum BuildWork {
    /// An operation, or a memory node: as a backend runs it.
    Node(GraphWork),
    /// Record `event` (rule 4).
    Record(Arc<EventCore>),
    /// Wait on `event` (rule 4).
    Wait(Arc<EventCore>),
    /// A whole graph (rule 3).
    Child(Arc<GraphDef>),
    /// A conditional node with its bodies as graphs (rule 7).
    Cond(Arc<BuildCond>),
}

impl BuildWork {
    /// An empty node: an ordering point.
    pub fn empty() -> BuildWork {
        BuildWork::Node(GraphWork::Empty)
    }

    /// A free node of the graph's own allocation `slot` (GR7).
    pub fn free(slot: usize) -> BuildWork {
        BuildWork::Node(GraphWork::Free { slot })
    }

    /// A free node of memory another graph's allocation node hands out (GR10).
    pub fn free_other(mem: Arc<Allocation>) -> BuildWork {
        BuildWork::Node(GraphWork::FreeOther { mem })
    }
}

/// One node of a graph under construction.
#[derive(Clone)]
pub(crate) struct BuildNode {
    pub work: BuildWork,
    pub deps: NodeDeps,
    /// The captured stream's lane (0 for built nodes) and id (0 for built nodes).
    pub lane: usize,
    pub stream: u64,
    pub site: Option<Site>,
}

impl BuildNode {
    /// A captured node as it is.
    pub fn captured(n: GraphNode) -> BuildNode {
        BuildNode {
            work: BuildWork::Node(n.work),
            deps: n.deps,
            lane: n.lane,
            stream: n.stream,
            site: n.site,
        }
    }
}

/// A graph under construction, or captured (rule 6: a value).
#[derive(Clone)]
pub(crate) struct GraphDef {
    /// The id its memory nodes' placeholders carry (a capture's session id when captured).
    pub id: u64,
    pub nodes: Vec<BuildNode>,
    /// Placeholder allocations by slot.
    pub slots: Vec<Arc<Allocation>>,
    pub lanes: usize,
    /// Set while an instantiation of a graph with memory nodes lives (rule 6); shared by
    /// the graph's copies.
    pub claim: Arc<AtomicBool>,
    /// What the graph's nodes need alive beyond their operations: the program's hold on
    /// other graphs' memory that free nodes free (GR10, [`crate::core::graphs::mem`]).
    pub keep: Vec<Arc<dyn Any + Send + Sync>>,
    /// Where the operations of nodes added to this graph are kept (a copy of the graph
    /// keeps its own for the nodes added to it).
    pub ops: OpArena,
}

/// A graph flattened for instantiation (rules 2–4).
pub(crate) struct Flat {
    pub nodes: Vec<GraphNode>,
    /// Where each node of the definition went (its join node, for a child graph).
    pub index: Vec<usize>,
    /// The event record and wait nodes (rule 4): flat index and event, in node order.
    pub records: Vec<(usize, Arc<EventCore>)>,
    pub waits: Vec<(usize, Arc<EventCore>)>,
}

impl GraphDef {
    /// An empty graph.
    pub fn new() -> Self {
        GraphDef {
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            slots: Vec::new(),
            lanes: 1,
            claim: Arc::default(),
            keep: Vec::new(),
            ops: OpArena::default(),
        }
    }

    /// A captured graph, node for node (its id the capture session's), with its conditional
    /// nodes at their indices.
    pub fn captured(c: Captured) -> Self {
        let mut nodes: Vec<BuildNode> = c.nodes.into_iter().map(BuildNode::captured).collect();
        for (i, cond) in c.conds {
            nodes[i].work = cond_work(cond);
        }
        GraphDef {
            id: c.id,
            nodes,
            slots: c.slots,
            lanes: c.lanes,
            claim: Arc::default(),
            keep: c.keep,
            ops: OpArena::default(),
        }
    }

    /// Add an operation node running `work` after `deps` (rule 1), its operation kept in this
    /// graph's chunks of operations (no allocation a node); returns its index.
    pub fn add_op(&mut self, work: Work, deps: NodeDeps, site: Site) -> Result<usize> {
        let node = BuildWork::Node(GraphWork::Op(self.ops.push(Op::new(work))));
        self.add(node, deps, site)
    }

    /// Rule 1 for `deps`, for a node that `what` describes.
    fn check_deps(&self, deps: &[usize], what: impl FnOnce() -> String) -> Result<()> {
        // The node's description is made only for the error: a graph of thousands of nodes
        // formatted one per node at every instantiation.
        match deps.iter().find(|&&d| d >= self.nodes.len()) {
            Some(&d) => Err(unknown(d, self.nodes.len(), &what())),
            None => Ok(()),
        }
    }

    /// Add a node after `deps` (rule 1); returns its index.
    pub fn add(&mut self, work: BuildWork, mut deps: NodeDeps, site: Site) -> Result<usize> {
        self.check_deps(&deps, || label(&work))?;
        if let BuildWork::Node(GraphWork::Op(op)) = &work {
            self.check_memory_owner(op)?;
        }
        if let BuildWork::Child(c) = &work {
            if c.has_memory_nodes() {
                return Err(graph_err(format!(
                    "a child graph may not hold memory allocation or free nodes (as in CUDA); \
                     add its memory nodes to the parent graph (rule 3 of {})",
                    "core::graphs::def"
                )));
            }
        }
        deps.dedup();
        self.nodes.push(BuildNode {
            work,
            deps,
            lane: 0,
            stream: 0,
            site: Some(site),
        });
        Ok(self.nodes.len() - 1)
    }

    /// Capture rule 9: append what a capture into this graph captured, its first nodes after
    /// `deps` (the nodes its stand-ins stood for); returns the new nodes' indices.
    pub fn splice(&mut self, captured: Captured, deps: &[usize]) -> Result<Vec<usize>> {
        let base = self.nodes.len();
        let stubs = captured.stubs;
        if self.slots.len() + captured.slots.len()
            != captured
                .slots
                .last()
                .map_or(self.slots.len(), |p| p.graph_slot.map_or(0, |g| g.slot + 1))
        {
            return Err(graph_err(
                "a capture into the graph numbered its allocations from another count (the \
                 graph changed during the capture)"
                    .into(),
            ));
        }
        let at = |k: usize| if k < stubs { deps[k] } else { base + k - stubs };
        for n in captured.nodes.into_iter().skip(stubs) {
            let mut node = BuildNode::captured(n);
            node.deps = node.deps.iter().map(|&d| at(d)).collect();
            node.deps.sort_unstable();
            node.deps.dedup();
            self.nodes.push(node);
        }
        for (k, c) in captured.conds {
            self.nodes[at(k)].work = cond_work(c);
        }
        self.slots.extend(captured.slots);
        self.keep.extend(captured.keep);
        self.lanes = self.lanes.max(captured.lanes);
        Ok((base..self.nodes.len()).collect())
    }

    /// Add the edge `from` → `to` (cudaGraphAddDependencies); it may close a cycle, which
    /// instantiation reports (rule 2).
    pub fn add_edge(&mut self, from: usize, to: usize) -> Result<()> {
        let n = self.nodes.len();
        for i in [from, to] {
            if i >= n {
                return Err(unknown(i, n, "an edge"));
            }
        }
        if !self.nodes[to].deps.contains(&from) {
            self.nodes[to].deps.push(from);
        }
        Ok(())
    }

    /// An allocation node of `bytes` after `deps` (GR7): its index and placeholder memory.
    pub fn add_alloc(
        &mut self,
        bytes: usize,
        device_id: u64,
        deps: &[usize],
        site: Site,
    ) -> Result<(usize, Arc<Allocation>)> {
        self.check_deps(deps, || "an allocation node".into())?;
        let (slot, mem) = self.new_slot(bytes, device_id);
        let node = self.add(
            BuildWork::Node(GraphWork::Alloc { slot, bytes }),
            deps.into(),
            site,
        )?;
        Ok((node, mem))
    }

    /// A new allocation node's placeholder (GR7) and slot.
    fn new_slot(&mut self, bytes: usize, device_id: u64) -> (usize, Arc<Allocation>) {
        let slot = self.slots.len();
        let mem = Allocation::placeholder(
            bytes,
            device_id,
            GraphSlot {
                capture: self.id,
                slot,
            },
        );
        self.slots.push(mem.clone());
        (slot, mem)
    }

    /// The slot of `alloc` if this graph allocated it.
    pub fn slot_of(&self, alloc: &Allocation) -> Option<usize> {
        alloc
            .graph_slot
            .filter(|g| g.capture == self.id)
            .map(|g| g.slot)
    }

    /// GR7: an operation of this graph touches no other graph's memory.
    fn check_memory_owner(&self, op: &Op) -> Result<()> {
        let mut bad = false;
        op.for_each_access(|m, _, _| {
            bad |= m.alloc.graph_slot.is_some_and(|g| g.capture != self.id)
        });
        if bad {
            return Err(Error::InvalidHandle(
                "a graph node touches memory another graph allocated: it is usable only by \
                 that graph's own nodes (GR7)"
                    .into(),
            ));
        }
        Ok(())
    }

    fn has_memory_nodes(&self) -> bool {
        self.nodes.iter().any(|n| match &n.work {
            BuildWork::Node(w) => w.is_memory(),
            BuildWork::Child(c) => c.has_memory_nodes(),
            _ => false,
        })
    }

    /// Rule 2: a stable topological order, or the cycle error; `None` when it is the nodes'
    /// own order.
    fn topo(&self) -> Result<Option<Vec<usize>>> {
        let n = self.nodes.len();
        // Every node after its dependencies (a capture's nodes, most built graphs): the order
        // below, smallest ready index first, is the nodes' own order, and there is no cycle
        // (nor a dependency on a node that is not there).
        let mut nodes = self.nodes.iter().enumerate();
        if nodes.all(|(i, x)| x.deps.iter().all(|&d| d < i)) {
            return Ok(None);
        }
        for (i, node) in self.nodes.iter().enumerate() {
            self.check_deps(&node.deps, || format!("node {i} ({})", label(&node.work)))?;
        }
        let mut left: Vec<usize> = self.nodes.iter().map(|x| x.deps.len()).collect();
        // Each node's dependents, packed: those of node `d` are `dependents[start[d]..start[d
        // + 1]]` (one allocation, not one per node).
        let mut start = vec![0usize; n + 1];
        for node in &self.nodes {
            for &d in &node.deps {
                start[d + 1] += 1;
            }
        }
        for d in 0..n {
            start[d + 1] += start[d];
        }
        let mut fill = start.clone();
        let mut dependents = vec![0usize; start[n]];
        for (i, node) in self.nodes.iter().enumerate() {
            for &d in &node.deps {
                dependents[fill[d]] = i;
                fill[d] += 1;
            }
        }
        let mut ready: BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
            .filter(|&i| left[i] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let mut order = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(i);
            for &j in &dependents[start[i]..start[i + 1]] {
                left[j] -= 1;
                if left[j] == 0 {
                    ready.push(std::cmp::Reverse(j));
                }
            }
        }
        if order.len() < n {
            let on = (0..n).find(|&i| left[i] > 0).unwrap_or(0);
            return Err(graph_err(format!(
                "node {on} ({}) is on a dependency cycle (or depends on one): a graph must be \
                 acyclic",
                label(&self.nodes[on].work)
            )));
        }
        Ok(Some(order))
    }

    /// Rules 2–5 and 7: the graph as core instantiates it.
    pub fn flatten(&self) -> Result<Flat> {
        crate::core::graphs::cond::check_owners(self, &mut vec![self.id], "")?;
        self.flatten_nested()
    }

    /// [`flatten`](Self::flatten) of a graph nested in another (a conditional body), whose
    /// conditions the outermost graph checks.
    pub fn flatten_nested(&self) -> Result<Flat> {
        let mut out = Flat {
            nodes: Vec::with_capacity(self.nodes.len()),
            index: vec![usize::MAX; self.nodes.len()],
            records: Vec::new(),
            waits: Vec::new(),
        };
        out.index = self.flatten_into(&mut out, &[])?;
        check_memory(self, &out)?;
        Ok(out)
    }

    /// Append this graph's nodes to `out`, its roots after `entry` (rule 3); returns where
    /// each of its nodes went.
    fn flatten_into(&self, out: &mut Flat, entry: &[usize]) -> Result<Vec<usize>> {
        let order = self.topo()?;
        out.nodes.reserve(self.nodes.len());
        let mut index = vec![usize::MAX; self.nodes.len()];
        // A graph in its own order, appended to nothing, keeps its nodes' indices until a
        // child graph's nodes come in before one: until then their dependencies need no
        // mapping (most graphs throughout; the cost of a node here halves).
        let mut same = order.is_none() && out.nodes.is_empty();
        let order = order.unwrap_or_else(|| (0..self.nodes.len()).collect());
        for i in order {
            let node = &self.nodes[i];
            let mut deps = if same {
                // A copy of the inline slots (the small vector's clone took ~75 instructions).
                NodeDeps::from_slice(&node.deps)
            } else {
                // Pushed one by one: collecting into the small vector cost ~60 instructions.
                let mut deps = NodeDeps::new();
                for &d in &node.deps {
                    deps.push(index[d]);
                }
                deps
            };
            if deps.is_empty() {
                deps = entry.into();
            }
            let work = match &node.work {
                // An operation's node, most of a graph, without the enum's whole clone.
                BuildWork::Node(GraphWork::Op(op)) => GraphWork::Op(op.clone()),
                BuildWork::Node(w) => w.clone(),
                BuildWork::Record(e) => {
                    out.records.push((out.nodes.len(), e.clone()));
                    GraphWork::EventRecord(e.backend.clone())
                }
                BuildWork::Wait(e) => {
                    out.waits.push((out.nodes.len(), e.clone()));
                    GraphWork::EventWait(e.backend.clone())
                }
                BuildWork::Child(c) => {
                    // The child's leaves stand for it: its dependents follow them.
                    deps = c.leaves(&c.flatten_into(out, &deps)?).into();
                    GraphWork::Empty
                }
                BuildWork::Cond(c) => GraphWork::Conditional(Box::new(c.node()?)),
            };
            out.nodes.push(GraphNode {
                work,
                deps,
                lane: node.lane,
                stream: node.stream,
                site: node.site,
            });
            index[i] = out.nodes.len() - 1;
            same &= index[i] == i;
        }
        Ok(index)
    }

    /// The flat indices (`index`, as [`flatten_into`](Self::flatten_into) placed them) of the
    /// nodes no node depends on.
    fn leaves(&self, index: &[usize]) -> Vec<usize> {
        let mut has_dependents = vec![false; self.nodes.len()];
        for node in &self.nodes {
            for &d in &node.deps {
                has_dependents[d] = true;
            }
        }
        (0..self.nodes.len())
            .filter(|&i| !has_dependents[i])
            .map(|i| index[i])
            .collect()
    }
}

/// A captured conditional node as a node of the graph (rule 7).
fn cond_work(c: Conditional) -> BuildWork {
    match c.downcast::<BuildCond>() {
        Ok(c) => BuildWork::Cond(c),
        Err(_) => BuildWork::Node(GraphWork::Empty), // Only graph_cond makes them.
    }
}

/// Rule 5 on the flattened graph: every use of a slot between its allocation and free nodes.
fn check_memory(def: &GraphDef, flat: &Flat) -> Result<()> {
    let slots = def.slots.len();
    if slots == 0 {
        return Ok(());
    }
    let nodes = &flat.nodes;
    let mut alloc_of = vec![None; slots];
    let mut free_of = vec![None; slots];
    for (i, n) in nodes.iter().enumerate() {
        match n.work {
            GraphWork::Alloc { slot, .. } => alloc_of[slot] = Some(i),
            GraphWork::Free { slot } if free_of[slot].replace(i).is_some() => {
                return Err(graph_err(format!(
                    "node {i} (free) frees graph allocation {slot} a second time"
                )));
            }
            _ => {}
        }
    }
    // Definition index of a flat node, for messages.
    let name = |i: usize| {
        let d = flat.index.iter().position(|&x| x == i).unwrap_or(i);
        format!("node {d} ({})", work_label(&nodes[i].work))
    };
    for slot in 0..slots {
        let Some(alloc) = alloc_of[slot] else {
            continue;
        };
        let before_free = free_of[slot].map(|f| ancestors(nodes, f));
        for (i, n) in nodes.iter().enumerate() {
            let uses = match &n.work {
                GraphWork::Op(op) => {
                    let mut uses = false;
                    op.for_each_access(|m, _, _| {
                        uses |= m.alloc.graph_slot.is_some_and(|g| g.slot == slot)
                    });
                    uses
                }
                GraphWork::Free { slot: s } => *s == slot,
                _ => false,
            };
            if !uses {
                continue;
            }
            if !ancestors(nodes, i)[alloc] {
                return Err(graph_err(format!(
                    "{} uses graph allocation {slot} without being ordered after its allocation \
                     {} (GR7)",
                    name(i),
                    name(alloc)
                )));
            }
            if let (Some(free), Some(before)) = (free_of[slot], &before_free) {
                if i != free && !before[i] {
                    return Err(graph_err(format!(
                        "{} uses graph allocation {slot} without being ordered before its free \
                         {} (GR7)",
                        name(i),
                        name(free)
                    )));
                }
            }
        }
    }
    Ok(())
}

fn unknown(d: usize, n: usize, what: &str) -> Error {
    graph_err(format!(
        "{what} names node {d}, which is not a node of this graph (it has {n} nodes)"
    ))
}

/// The error of a malformed graph (GR8).
pub(crate) fn graph_err(why: String) -> Error {
    Error::Graph(why)
}

/// A short label of a flattened node's work.
/// The label of an operation node running `work` (for errors only: it copies the work).
pub(crate) fn op_label(work: &Work) -> String {
    Op::new(work.clone()).name()
}

pub(crate) fn work_label(w: &GraphWork) -> String {
    match w {
        GraphWork::Op(op) => op.name(),
        GraphWork::Alloc { bytes, .. } => format!("alloc {bytes} bytes"),
        GraphWork::Free { .. } => "free".into(),
        GraphWork::FreeOther { mem } => format!("free {} bytes of another graph", mem.bytes),
        GraphWork::Empty => "empty".into(),
        GraphWork::EventRecord(_) => "event record".into(),
        GraphWork::EventWait(_) => "event wait".into(),
        GraphWork::Conditional(c) => format!(
            "{:?} on condition {} ({} bodies)",
            c.kind,
            c.cell.id,
            c.bodies.len()
        )
        .to_lowercase(),
    }
}

/// What kind of node `w` is (`Graph::nodes`, `Graph::to_dot`), with its operation's kind.
pub(crate) fn node_type(w: &BuildWork) -> (Option<OpKind>, NodeType) {
    match w {
        BuildWork::Node(w) => w.node_type(),
        BuildWork::Cond(_) => (None, NodeType::Conditional),
        BuildWork::Record(_) => (None, NodeType::EventRecord),
        BuildWork::Wait(_) => (None, NodeType::EventWait),
        BuildWork::Child(_) => (None, NodeType::Graph),
    }
}

/// A short label of a node under construction.
pub(crate) fn label(w: &BuildWork) -> String {
    match w {
        BuildWork::Node(w) => work_label(w),
        BuildWork::Record(_) => "event record".into(),
        BuildWork::Wait(_) => "event wait".into(),
        BuildWork::Child(c) => format!("child graph of {} nodes", c.nodes.len()),
        BuildWork::Cond(c) => format!(
            "{:?} on condition {} ({} bodies)",
            c.kind,
            c.cell.id,
            c.bodies.len()
        )
        .to_lowercase(),
    }
}

/// Flattening (rules 2 and 3) without a device.
#[cfg(test)]
#[path = "def_tests.rs"]
mod tests;

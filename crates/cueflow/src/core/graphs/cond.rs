//! Conditional nodes as graphs are built and captured (GR9): a node holds its condition and its
//! bodies as graphs of their own, which the program may still change after the node was added
//! (a body filled by node calls or by a capture into it, `cudaStreamBeginCaptureToGraph`);
//! instantiation flattens them into the [`CondNode`] backends run.
//!
//! Rules:
//! 1. A condition belongs to one graph (contract rule 4 of `conditional`): a conditional node
//!    on it may sit in that graph or in a graph nested in it (a body, a child graph), as CUDA
//!    asks of a handle ("associated with a conditional node in this graph or one of its
//!    children"). Anything else — graph A's condition driving a node of graph B — is refused at
//!    instantiation, naming the node: two graphs would share one value.
//! 2. A body holds no event, memory or host nodes and uses no graph memory, as in CUDA (whose
//!    bodies hold kernel, empty, child graph, memset, memcpy and conditional nodes); checked
//!    when the node is added and again at instantiation (a body changed since).
//! 3. A condition drives one conditional node of a graph (bodies included), and every kernel
//!    given a condition as an argument must be in a graph one of whose conditional nodes it
//!    drives: a CUDA handle of no node of the graph is undefined (the driver may fault), so
//!    both backends refuse it at instantiation, naming the node.
//! 4. A flattened body is kept with the node once computed, so flattening the same graph twice
//!    gives bodies with the same identity (an update compares them so, GR6).

use std::sync::{Arc, OnceLock};

use crate::backend::contract::conditional::{condition_args, CondCell};
use crate::backend::contract::graph::{CondNode, GraphNode, GraphWork};
use crate::backend::contract::op::Work;
use crate::core::graphs::def::{graph_err, GraphDef};
use crate::error::Result;
use crate::types::CondKind;

/// A conditional node under construction.
pub(crate) struct BuildCond {
    pub kind: CondKind,
    pub cell: Arc<CondCell>,
    pub bodies: Vec<Arc<GraphDef>>,
    /// Rule 4.
    flat: OnceLock<Vec<Arc<Vec<GraphNode>>>>,
}

impl BuildCond {
    /// The node `kind` on `cell` with `bodies`, added to graph `graph` (which the condition
    /// is tied to if it belongs to none yet); its bodies are checked now (rule 2).
    pub fn new(
        kind: CondKind,
        cell: Arc<CondCell>,
        bodies: Vec<Arc<GraphDef>>,
        graph: u64,
    ) -> Result<Arc<BuildCond>> {
        cell.tie(graph);
        let c = BuildCond {
            kind,
            cell,
            bodies,
            flat: OnceLock::new(),
        };
        c.flat_bodies()?;
        Ok(Arc::new(c))
    }

    /// This node with body `i` replaced by `body` (checked at instantiation, rule 2).
    pub fn with_body(&self, i: usize, body: Arc<GraphDef>) -> Arc<BuildCond> {
        let mut bodies = self.bodies.clone();
        bodies[i] = body;
        Arc::new(BuildCond {
            kind: self.kind,
            cell: self.cell.clone(),
            bodies,
            flat: OnceLock::new(),
        })
    }

    /// Rules 2 and 4.
    fn flat_bodies(&self) -> Result<&Vec<Arc<Vec<GraphNode>>>> {
        if let Some(f) = self.flat.get() {
            return Ok(f);
        }
        let mut out = Vec::with_capacity(self.bodies.len());
        for (i, b) in self.bodies.iter().enumerate() {
            let f = b.flatten_nested()?;
            if !f.records.is_empty() || !f.waits.is_empty() {
                return Err(graph_err(format!(
                    "conditional body {i} holds event nodes, which a body may not (as in CUDA)"
                )));
            }
            let mut memory = false;
            for n in &f.nodes {
                n.for_each_access(&mut |m, _, _| memory |= m.alloc.graph_slot.is_some());
                memory |= n.work.is_memory();
            }
            if memory {
                return Err(graph_err(format!(
                    "conditional body {i} allocates, frees or uses graph memory, which a body \
                     may not (as in CUDA)"
                )));
            }
            if let Some(n) = f.nodes.iter().position(
                |n| matches!(&n.work, GraphWork::Op(op) if matches!(op.work, Work::HostFn(_))),
            ) {
                return Err(graph_err(format!(
                    "conditional body {i} holds a host node (its node {n}), which a body may not \
                     (as in CUDA: a body holds kernel, empty, child graph, memset, memcpy and \
                     conditional nodes); run the host function after the conditional node"
                )));
            }
            out.push(Arc::new(f.nodes));
        }
        Ok(self.flat.get_or_init(|| out))
    }

    /// The node as backends run it.
    pub fn node(&self) -> Result<CondNode> {
        Ok(CondNode {
            kind: self.kind,
            cell: self.cell.clone(),
            bodies: self.flat_bodies()?.clone(),
        })
    }
}

/// Rule 1 over `def` and what is nested in it; `ancestors` holds the ids of `def` and of the
/// graphs it is nested in.
pub(crate) fn check_owners(def: &GraphDef, ancestors: &mut Vec<u64>, path: &str) -> Result<()> {
    use crate::core::graphs::def::BuildWork;
    for (i, n) in def.nodes.iter().enumerate() {
        match &n.work {
            BuildWork::Cond(c) => {
                let owner = c.cell.owner();
                if owner != 0 && !ancestors.contains(&owner) {
                    return Err(graph_err(format!(
                        "{path}node {i} ({:?} node): its condition belongs to another graph; a \
                         condition drives conditional nodes of the graph that made it and of \
                         graphs nested in that one, as a CUDA handle does (GR9)",
                        c.kind
                    )));
                }
                for (b, body) in c.bodies.iter().enumerate() {
                    ancestors.push(body.id);
                    let r = check_owners(body, ancestors, &format!("{path}node {i} body {b}: "));
                    ancestors.pop();
                    r?;
                }
            }
            BuildWork::Child(c) => {
                ancestors.push(c.id);
                let r = check_owners(c, ancestors, &format!("{path}child graph node {i}: "));
                ancestors.pop();
                r?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Rule 3 over flattened `nodes` (bodies included).
pub(crate) fn check_conditions(nodes: &[GraphNode]) -> Result<()> {
    let mut cells: Vec<Arc<CondCell>> = Vec::new();
    let mut seen: Vec<u64> = Vec::new();
    one_node_per_condition(nodes, &mut seen, &mut cells, "")?;
    kernels_name_own_conditions(nodes, &cells, "")
}

/// Rule 3, first half: collects the conditions of the conditional nodes into `cells`.
fn one_node_per_condition(
    nodes: &[GraphNode],
    seen: &mut Vec<u64>,
    cells: &mut Vec<Arc<CondCell>>,
    path: &str,
) -> Result<()> {
    for (i, n) in nodes.iter().enumerate() {
        let GraphWork::Conditional(c) = &n.work else {
            continue;
        };
        let here = format!("{path}node {i}");
        // CUDA's driver refuses a second node on one handle (CUDA_ERROR_INVALID_VALUE, seen
        // on an H200).
        if seen.contains(&c.cell.id) {
            return Err(graph_err(format!(
                "{here}: its condition already drives another conditional node of the graph; \
                 a condition (a CUDA conditional handle) drives one node (GR9)"
            )));
        }
        seen.push(c.cell.id);
        cells.push(c.cell.clone());
        for (b, body) in c.bodies.iter().enumerate() {
            one_node_per_condition(body, seen, cells, &format!("{here} body {b} "))?;
        }
    }
    Ok(())
}

/// Rule 3, second half.
fn kernels_name_own_conditions(
    nodes: &[GraphNode],
    cells: &[Arc<CondCell>],
    path: &str,
) -> Result<()> {
    for (i, n) in nodes.iter().enumerate() {
        match &n.work {
            GraphWork::Op(op) => {
                let Work::Launch(l) = &op.work else { continue };
                for id in condition_args(l) {
                    if !cells.iter().any(|c| c.id == id) {
                        return Err(graph_err(format!(
                            "{path}node {i}: kernel `{}` is given condition {id}, which drives \
                             no conditional node of this graph: a condition is set only by \
                             kernels of the graph whose conditional node it drives (GR9)",
                            l.kernel.name
                        )));
                    }
                }
            }
            GraphWork::Conditional(c) => {
                for (b, body) in c.bodies.iter().enumerate() {
                    kernels_name_own_conditions(body, cells, &format!("{path}node {i} body {b} "))?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

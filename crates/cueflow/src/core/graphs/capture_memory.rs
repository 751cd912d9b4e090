//! Rule 7 of `core::graphs::capture` (GR7): the graph memory of a capture is used only between its
//! allocation node and its free node, checked when the capture ends.

use crate::backend::contract::graph::{ancestors, GraphNode, GraphWork};
use crate::error::{Error, Result};

/// Rule 7 for the `slots` slots numbered from `first` (rule 9: a capture into a graph checks
/// its own; the graph's older slots are checked when it is instantiated).
pub(crate) fn check_graph_memory_from(
    nodes: &[GraphNode],
    first: usize,
    slots: usize,
) -> Result<()> {
    if slots == 0 {
        return Ok(());
    }
    let mut alloc_of = vec![None; slots];
    let mut free_of = vec![None; slots];
    for (i, n) in nodes.iter().enumerate() {
        match n.work {
            GraphWork::Alloc { slot, .. } if slot >= first => alloc_of[slot - first] = Some(i),
            GraphWork::Free { slot }
                if slot >= first && free_of[slot - first].replace(i).is_some() =>
            {
                return Err(Error::Capture(format!(
                    "graph allocation {slot} is freed twice in the capture (GR7)"
                )));
            }
            _ => {}
        }
    }
    for k in 0..slots {
        let slot = first + k;
        // GR10: an allocation the capture does not free outlives each launch; its uses in
        // the graph need only follow the allocation node.
        let free = free_of[k];
        let alloc = alloc_of[k].expect("every slot has its allocation node");
        let before_free = free.map(|f| ancestors(nodes, f)).unwrap_or_default();
        for (i, n) in nodes.iter().enumerate() {
            let Some(op) = n.op() else { continue };
            let mut uses = false;
            op.for_each_access(|m, _, _| {
                uses |= m.alloc.graph_slot.is_some_and(|g| g.slot == slot)
            });
            if !uses {
                continue;
            }
            if !ancestors(nodes, i)[alloc] {
                return Err(Error::Capture(format!(
                    "node {i} uses graph allocation {slot} without being ordered after its \
                     allocation node {alloc} (GR7)"
                )));
            }
            if free.is_some() && !before_free[i] {
                return Err(Error::Capture(format!(
                    "node {i} uses graph allocation {slot} without being ordered before its \
                     free node {} (GR7)",
                    free.unwrap_or_default()
                )));
            }
        }
    }
    Ok(())
}

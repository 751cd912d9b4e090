//! Reachability between a graph's nodes as vector clocks over chains, for the event nodes'
//! groups ([`super::events`]): linear in the graph where it is a few chains side by side,
//! however many event nodes follow one another.
//!
//! Rules:
//! 1. The nodes come in a topological order (a node depends only on earlier ones).
//! 2. A node extends the chain of the first of its dependencies that is still the last node of
//!    its chain, and starts a chain of its own otherwise; positions on a chain count from 1.
//!    Each next node of a chain depends on the one before it, so the nodes of a chain are a
//!    path: of two nodes of one chain, the earlier is an ancestor of the later.
//! 3. A node's clock holds, for each chain, the last position on it among the node's
//!    ancestors and itself (the join of its dependencies' clocks, its own position raised). By
//!    rule 2 the ancestors of a node on a chain are exactly the positions up to that entry, so
//!    node `a` is an ancestor of node `b` when `b`'s clock covers `a`'s place.

use crate::backend::contract::graph::GraphNode;
use crate::core::tracking::clock::VClock;

/// The chains of a graph's nodes and their clocks.
pub(crate) struct Chains {
    /// Each node's chain and position on it (rule 2).
    pub place: Vec<(usize, u64)>,
    /// Each chain's nodes, in order.
    pub members: Vec<Vec<usize>>,
    /// Each node's clock (rule 3), chains as actors.
    clock: Vec<VClock>,
}

impl Chains {
    /// The chains of `nodes` (rule 1: topologically ordered).
    pub fn of(nodes: &[GraphNode]) -> Chains {
        let mut c = Chains {
            place: Vec::with_capacity(nodes.len()),
            members: Vec::new(),
            clock: Vec::with_capacity(nodes.len()),
        };
        for (i, node) in nodes.iter().enumerate() {
            let mut vc = c.ancestors(node);
            let extends = node.deps.iter().find(|&&d| {
                let (chain, _) = c.place[d];
                c.members[chain].last() == Some(&d)
            });
            let (chain, pos) = match extends {
                Some(&d) => (c.place[d].0, c.place[d].1 + 1),
                None => {
                    c.members.push(Vec::new());
                    (c.members.len() - 1, 1)
                }
            };
            c.members[chain].push(i);
            vc.raise(chain as u64, pos);
            c.place.push((chain, pos));
            c.clock.push(vc);
        }
        c
    }

    /// The last position of node `i`'s ancestors (itself left out) on each chain that has
    /// one, by chain, ascending.
    pub fn upstream(&self, i: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (own, pos) = self.place[i];
        self.clock[i].entries().iter().filter_map(move |&(c, p)| {
            // On its own chain the node is the last: its ancestors there are the positions
            // before it.
            let p = if c as usize == own { pos - 1 } else { p };
            (p > 0).then_some((c as usize, p))
        })
    }

    /// The clock of `node`'s ancestors, itself left out: the join of its dependencies' clocks
    /// (which must be among the nodes placed so far).
    fn ancestors(&self, node: &GraphNode) -> VClock {
        if node.deps.len() > 8 {
            // A join of thousands of branches: one sort, not a copy of the growing clock per
            // dependency.
            return VClock::join_all(node.deps.iter().map(|&d| &self.clock[d]));
        }
        let mut vc = VClock::default();
        for &d in node.deps.iter() {
            vc.join(&self.clock[d]);
        }
        vc
    }

    /// True if node `a` is an ancestor of node `b` (rule 3).
    #[cfg(test)]
    pub fn reaches(&self, a: usize, b: usize) -> bool {
        let (chain, pos) = self.place[a];
        self.upstream(b).any(|(c, p)| c == chain && p >= pos)
    }
}

/// Random graphs for the tests of reachability here and in [`super::event_sets`].
#[cfg(test)]
pub(crate) mod testing {
    use crate::backend::contract::graph::{GraphNode, GraphWork};

    /// A small xorshift generator: `next(m)` is in `0..m` (0 for `m` = 0).
    pub fn numbers(mut seed: u64) -> impl FnMut(usize) -> usize {
        move |m| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m.max(1) as u64) as usize
        }
    }

    /// Empty nodes with dependencies `deps`.
    pub fn nodes(deps: &[Vec<usize>]) -> Vec<GraphNode> {
        deps.iter()
            .map(|d| GraphNode {
                work: GraphWork::Empty,
                deps: d.iter().copied().collect(),
                lane: 0,
                stream: 0,
                site: None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{nodes, numbers};
    use super::Chains;
    use crate::backend::contract::graph::ancestors;

    /// Random DAGs (each node after up to three earlier ones): `reaches` is reachability.
    #[test]
    fn chains_tell_ancestors_exactly() {
        let mut next = numbers(0x9e37_79b9_7f4a_7c15);
        for _ in 0..40 {
            let n = 2 + next(40);
            let deps: Vec<Vec<usize>> = (0..n)
                .map(|i| {
                    let mut d: Vec<usize> = (0..next(4).min(i)).map(|_| next(i)).collect();
                    d.sort_unstable();
                    d.dedup();
                    d
                })
                .collect();
            let nodes = nodes(&deps);
            let chains = Chains::of(&nodes);
            for b in 0..n {
                let up = ancestors(&nodes, b);
                for (a, &is_ancestor) in up.iter().enumerate() {
                    assert_eq!(chains.reaches(a, b), is_ancestor, "{a} -> {b} in {deps:?}");
                }
            }
        }
    }

    #[test]
    fn a_chain_of_nodes_is_one_chain() {
        let deps: Vec<Vec<usize>> = (0..100)
            .map(|i| (i > 0).then(|| i - 1).into_iter().collect())
            .collect();
        let chains = Chains::of(&nodes(&deps));
        assert_eq!(chains.members.len(), 1);
        assert_eq!(chains.place[99], (0, 100));
    }
}

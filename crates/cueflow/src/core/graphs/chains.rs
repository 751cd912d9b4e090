//! Reachability between a graph's nodes as vector clocks over chains, for the event nodes'
//! groups ([`super::events`]): linear in the graph where it is a few chains side by side,
//! however many event nodes follow one another.
//!
//! Rules:
//! 1. The nodes come in a topological order (a node depends only on earlier ones).
//! 2. A node extends the chain of the first of its dependencies that is still the last node of
//!    its chain; failing that, the first chain whose last node is an ancestor of it; it starts
//!    a chain of its own otherwise. Positions on a chain count from 1. Of two nodes of one
//!    chain the earlier is an ancestor of the later. (Extending only a dependency's chain made
//!    every branch of every fork a chain of its own: a graph of L fork/join stages of width W
//!    had (W − 1)·L chains, and each node's clock up to that many entries.)
//! 3. A node's clock holds, for each chain, the last position on it among the node's
//!    ancestors (itself left out): the join of its dependencies' clocks, each dependency's own
//!    place raised. By rule 2 the ancestors of a node on a chain are exactly the positions up
//!    to that entry, so node `a` is an ancestor of node `b` when `b`'s clock covers `a`'s place.
//! 4. A node with one dependency shares that dependency's clock, with the dependency's place
//!    raised on top ([`SharedClock`]); a run of such nodes on one chain shares one clock. A chain
//!    after a join of W branches otherwise copied the join's W entries at every node.

use crate::backend::contract::graph::GraphNode;
use crate::core::tracking::clock::{SharedClock, VClock};

/// The chains of a graph's nodes and their clocks.
pub(crate) struct Chains {
    /// Each node's chain and position on it (rule 2).
    pub place: Vec<(usize, u64)>,
    /// Each chain's nodes, in order.
    pub members: Vec<Vec<usize>>,
    /// Each node's ancestors (rules 3 and 4), chains as actors.
    up: Vec<SharedClock>,
    /// The clock of a node without dependencies, shared.
    empty: SharedClock,
}

impl Chains {
    /// The chains of `nodes` (rule 1: topologically ordered).
    pub fn of(nodes: &[GraphNode]) -> Chains {
        let mut c = Chains {
            place: Vec::with_capacity(nodes.len()),
            members: Vec::new(),
            up: Vec::with_capacity(nodes.len()),
            empty: SharedClock::from(VClock::default()),
        };
        for (i, node) in nodes.iter().enumerate() {
            let up = c.ancestors(node);
            let chain = c.chain_for(node, &up);
            let chain = chain.unwrap_or_else(|| {
                c.members.push(Vec::new());
                c.members.len() - 1
            });
            c.members[chain].push(i);
            c.place.push((chain, c.members[chain].len() as u64));
            c.up.push(up);
        }
        c
    }

    /// Rule 2: the chain a node with ancestors `up` extends, if any.
    fn chain_for(&self, node: &GraphNode, up: &SharedClock) -> Option<usize> {
        let last = |chain: usize, node: usize| self.members[chain].last() == Some(&node);
        if let Some(&d) = node.deps.iter().find(|&&d| last(self.place[d].0, d)) {
            return Some(self.place[d].0);
        }
        // A chain whose last node is an ancestor: its last position is covered.
        up.entries()
            .find(|&(chain, p)| self.members[chain as usize].len() as u64 == p)
            .map(|(chain, _)| chain as usize)
    }

    /// The last position of node `i`'s ancestors (itself left out) on each chain that has
    /// one, by chain, ascending.
    pub fn upstream(&self, i: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.up[i].entries().map(|(c, p)| (c as usize, p))
    }

    /// The last position of node `i`'s ancestors on `chain` (0: none).
    pub fn upstream_on(&self, i: usize, chain: usize) -> u64 {
        self.up[i].get(chain as u64)
    }

    /// How many chains node `i` has ancestors on.
    pub fn upstream_len(&self, i: usize) -> usize {
        self.up[i].len()
    }

    /// Rules 3 and 4: the ancestors of `node` (whose dependencies must be placed already).
    fn ancestors(&self, node: &GraphNode) -> SharedClock {
        let place = |d: usize| (self.place[d].0 as u64, self.place[d].1);
        match node.deps.as_slice() {
            [] => self.empty.clone(),
            &[d] => {
                let (chain, pos) = place(d);
                self.up[d].raised(chain, pos)
            }
            deps => {
                // One sort of every dependency's entries and place, not a copy of the growing
                // clock per dependency (a join of thousands of branches).
                let entries = deps
                    .iter()
                    .flat_map(|&d| self.up[d].entries().chain(std::iter::once(place(d))));
                SharedClock::from(VClock::of_entries(entries))
            }
        }
    }

    /// True if node `a` is an ancestor of node `b` (rule 3).
    #[cfg(test)]
    pub fn reaches(&self, a: usize, b: usize) -> bool {
        let (chain, pos) = self.place[a];
        self.upstream_on(b, chain) >= pos
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

    /// Rule 2: L fork/join stages of width 4 (a node, four branches after it, a join after
    /// them) lie on four chains, not one chain and three more per stage.
    #[test]
    fn fork_join_stages_reuse_the_branches_chains() {
        let mut deps: Vec<Vec<usize>> = vec![Vec::new()];
        for _ in 0..50 {
            let fork = deps.len() - 1;
            let branches: Vec<usize> = (0..4).map(|k| deps.len() + k).collect();
            deps.extend((0..4).map(|_| vec![fork]));
            deps.push(branches);
        }
        let chains = Chains::of(&nodes(&deps));
        assert_eq!(chains.members.len(), 4);
        let last = deps.len() - 1;
        assert_eq!(chains.upstream_len(last), 4);
        assert!(chains.reaches(0, last) && chains.reaches(1, last));
        assert!(!chains.reaches(1, 2), "two branches of one stage");
    }

    /// Rule 4: a chain after a join of many branches shares the join's clock, one base for
    /// all its nodes, and still knows every branch upstream.
    #[test]
    fn a_chain_after_a_wide_join_shares_one_clock() {
        let (w, l) = (300, 2_000);
        let mut deps: Vec<Vec<usize>> = (0..w).map(|_| Vec::new()).collect();
        deps.push((0..w).collect());
        deps.extend((0..l).map(|i| vec![w + i]));
        let chains = Chains::of(&nodes(&deps));
        let after_join = &chains.up[w + 1];
        assert!((w + 1..w + l + 1).all(|i| chains.up[i].same_base(after_join)));
        let last = w + l;
        assert_eq!(chains.upstream_len(last), w);
        assert!((0..w).all(|b| chains.reaches(b, last)));
        assert!(chains.reaches(w + l - 1, last) && !chains.reaches(last, last));
    }
}

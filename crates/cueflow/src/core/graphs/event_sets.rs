//! What each node of a graph with event nodes has upstream and downstream of it — the wait
//! nodes upstream, the record nodes downstream (rules 2 and 3 of [`super::events`]) — kept
//! without a list per node: a chain of N event nodes had each node list up to N of them
//! (quadratic instantiation, and sanitized launches that joined and searched those lists).
//!
//! Rules:
//! 1. Reachability is [`Chains`]': the nodes of a chain upstream of a node are a prefix of the
//!    chain, so a set of nodes that is closed upstream (every ancestor of a member that is an
//!    event node of the kind is a member) is, on each chain, its first few event nodes.
//! 2. **Waits upstream.** A node's wait nodes upstream are, on each chain with wait nodes, the
//!    first `k` of them ([`WaitsUp`]): `k` counts those up to the node's last ancestor there.
//!    Two nodes have the same wait nodes upstream exactly when their [`WaitsUp`] are equal.
//! 3. **Records downstream.** Along a chain, the record nodes downstream only shrink (an
//!    earlier node is upstream of a later one). Each record node adds one to a count at the
//!    last position upstream of it on each chain; summed back along the chain, the count at a
//!    position is how many record nodes the node there has downstream, and where it does not
//!    drop the set is the same. A [`Group`] is such a run, stamped by its chain's actor
//!    ([`crate::core::tracking::track_scope`] rule 3) — a partition at least as fine as one
//!    by equal sets, which is all the stamps need.

use std::sync::atomic::Ordering;

use crate::core::graphs::chains::Chains;
use crate::core::streams::stream::NEXT_ACTOR;
use crate::core::tracking::track_scope::{Chain, Group, WaitsUp};

/// Rule 2: the graph's wait nodes by chain, and each node's wait nodes upstream.
pub(crate) struct WaitSets {
    /// Each chain with wait nodes: their indices (into the graph's waits), in chain order.
    pub chains: Vec<Vec<usize>>,
    /// Each node's wait nodes upstream.
    pub of_node: Vec<WaitsUp>,
}

impl WaitSets {
    /// The wait sets of the graph whose wait nodes are `waits` (node indices).
    pub fn new(reach: &Chains, waits: &[usize]) -> WaitSets {
        // Each chain's wait nodes, by position.
        let mut on_chain: Vec<Vec<(u64, usize)>> = vec![Vec::new(); reach.members.len()];
        for (k, &node) in waits.iter().enumerate() {
            let (c, pos) = reach.place[node];
            on_chain[c].push((pos, k));
        }
        let mut index = vec![usize::MAX; on_chain.len()];
        let mut chains = Vec::new();
        let mut positions = Vec::new();
        for (c, waits) in on_chain.iter_mut().enumerate() {
            if !waits.is_empty() {
                waits.sort_unstable();
                index[c] = chains.len();
                chains.push(waits.iter().map(|w| w.1).collect());
                positions.push(waits.iter().map(|w| w.0).collect::<Vec<u64>>());
            }
        }
        // Chain indices grow with the chains', so each node's list stays ascending.
        let of_node = (0..reach.place.len())
            .map(|i| {
                let on = |(c, last): (usize, u64)| {
                    let w = *index.get(c).filter(|&&w| w != usize::MAX)?;
                    let k = positions[w].partition_point(|&p| p <= last);
                    (k > 0).then_some((w, k))
                };
                reach.upstream(i).filter_map(on).collect()
            })
            .collect();
        WaitSets { chains, of_node }
    }

    /// Node `i`'s wait nodes upstream, as indices into the graph's waits, ascending.
    pub fn list(&self, i: usize) -> Vec<usize> {
        let mut waits: Vec<usize> = self.of_node[i]
            .iter()
            .flat_map(|&(c, k)| self.chains[c][..k].iter().copied())
            .collect();
        waits.sort_unstable();
        waits
    }
}

/// Rule 3's groups, over every node so that an update keeps them: each group with its chain,
/// each chain that has one with an actor of its own.
pub(crate) struct Grouping {
    pub groups: Vec<Group>,
    pub chains: Vec<Chain>,
    /// Each node's group (0: no record node downstream).
    pub node_group: Vec<usize>,
    /// Each record node's last position upstream on each chain (index into `chains`).
    pub upstream: Vec<Vec<(usize, u64)>>,
}

impl Grouping {
    /// Rule 3: the groups of the graph's nodes by its record nodes `records` (node indices)
    /// downstream of them.
    pub fn new(reach: &Chains, records: &[usize]) -> Grouping {
        // Where each chain's positions start in the flat per-position arrays.
        let mut start = Vec::with_capacity(reach.members.len());
        let mut n = 0;
        for m in &reach.members {
            start.push(n);
            n += m.len();
        }
        let ups: Vec<Vec<(usize, u64)>> = records
            .iter()
            .map(|&node| reach.upstream(node).collect())
            .collect();
        // How many record nodes, and the first, at the last position upstream of each.
        let mut count_at = vec![0usize; n];
        let mut first_at = vec![usize::MAX; n];
        for (k, up) in ups.iter().enumerate() {
            for &(c, pos) in up {
                let at = start[c] + pos as usize - 1;
                count_at[at] += 1;
                first_at[at] = first_at[at].min(k);
            }
        }
        let mut g = Grouping {
            groups: vec![Group::none()],
            chains: Vec::new(),
            node_group: vec![0; reach.place.len()],
            upstream: Vec::new(),
        };
        let mut chain_index = vec![usize::MAX; reach.members.len()];
        for (c, members) in reach.members.iter().enumerate() {
            // Back along the chain: a position has the record nodes of every later one.
            let at = start[c]..start[c] + members.len();
            let (mut count, mut first) = (0, usize::MAX);
            for a in at.clone().rev() {
                count += count_at[a];
                first = first.min(first_at[a]);
                (count_at[a], first_at[a]) = (count, first);
            }
            let mut previous = 0;
            for ((q, &node), a) in members.iter().enumerate().zip(at) {
                let count = count_at[a];
                if count == 0 {
                    break; // The counts only shrink along the chain.
                }
                if count != previous {
                    if chain_index[c] == usize::MAX {
                        chain_index[c] = g.chains.len();
                        let actor = NEXT_ACTOR.fetch_add(1, Ordering::Relaxed);
                        g.chains.push(Chain::new(actor, members.len() as u64));
                    }
                    g.groups.push(Group {
                        chain: chain_index[c],
                        pos: q as u64 + 1,
                        count,
                        first: first_at[a],
                    });
                    previous = count;
                }
                g.node_group[node] = g.groups.len() - 1;
            }
        }
        // Every chain upstream of a record node has a group (its nodes there have the record
        // node downstream); chain indices grow with the chains', so the lists stay ascending.
        g.upstream = ups
            .into_iter()
            .map(|up| up.into_iter().map(|(c, p)| (chain_index[c], p)).collect())
            .collect();
        g
    }
}

#[cfg(test)]
mod tests {
    use super::{Grouping, WaitSets};
    use crate::backend::contract::graph::{ancestors, GraphNode, GraphWork};
    use crate::core::graphs::chains::Chains;

    /// A random DAG of empty nodes and which of them are wait and record nodes.
    fn random_graph(
        next: &mut impl FnMut(usize) -> usize,
    ) -> (Vec<GraphNode>, Vec<usize>, Vec<usize>) {
        let n = 2 + next(30);
        let nodes: Vec<GraphNode> = (0..n)
            .map(|i| {
                let mut d: Vec<usize> = (0..next(3).min(i)).map(|_| next(i)).collect();
                // Mostly chains: each node after the one before it.
                if i > 0 && next(3) > 0 {
                    d.push(i - 1);
                }
                d.sort_unstable();
                d.dedup();
                GraphNode {
                    work: GraphWork::Empty,
                    deps: d.into_iter().collect(),
                    lane: 0,
                    stream: 0,
                    site: None,
                }
            })
            .collect();
        let waits = (0..n).filter(|_| next(4) == 0).collect();
        let records = (0..n).filter(|_| next(4) == 0).collect();
        (nodes, waits, records)
    }

    /// Random graphs: each node's wait nodes upstream and its group's record nodes
    /// downstream are what walking the graph gives, and nodes of one group have the same
    /// record nodes downstream.
    #[test]
    fn sets_are_those_of_walking_the_graph() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m.max(1) as u64) as usize
        };
        for _ in 0..200 {
            let (nodes, waits, records) = random_graph(&mut next);
            let reach = Chains::of(&nodes);
            let ws = WaitSets::new(&reach, &waits);
            let g = Grouping::new(&reach, &records);
            let up: Vec<Vec<bool>> = (0..nodes.len()).map(|i| ancestors(&nodes, i)).collect();
            for (i, above) in up.iter().enumerate() {
                let walked: Vec<usize> = (0..waits.len()).filter(|&k| above[waits[k]]).collect();
                assert_eq!(ws.list(i), walked, "waits upstream of {i}");
                let down: Vec<usize> = (0..records.len()).filter(|&k| up[records[k]][i]).collect();
                let group = &g.groups[g.node_group[i]];
                assert_eq!(group.count, down.len(), "records downstream of {i}");
                assert_eq!(group.first, down.first().copied().unwrap_or(usize::MAX));
                for (k, &r) in records.iter().enumerate() {
                    // The record node's chain positions cover the group exactly when it is
                    // downstream of the node.
                    let covers = g.node_group[i] != 0
                        && g.upstream[k]
                            .iter()
                            .any(|&(c, p)| c == group.chain && p >= group.pos);
                    assert_eq!(covers, up[r][i], "record {r} over node {i}");
                }
            }
        }
    }
}

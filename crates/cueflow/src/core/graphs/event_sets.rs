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
//!    drop the set is the same. A [`Group`] is the nodes with the same set: the runs of
//!    every chain with it, stamped by the first run's chain's actor at its first position
//!    ([`crate::core::tracking::track_scope`] rule 3). Runs of different chains are matched
//!    by the set's size, its first record node and a 128-bit sum of a hash of each of its
//!    record nodes (summed back along the chain like the count); the stamps need only that
//!    a group's nodes have the same set, so a fan of branches joined before one record node
//!    is one group, not one per branch.

use std::collections::HashMap;
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
        // Chain indices grow with the chains', so each node's list stays ascending. A node
        // with ancestors on more chains than have wait nodes looks those few up (a node after
        // a join of thousands of branches, with waits on a few chains).
        let wait_chains: Vec<usize> = (0..index.len())
            .filter(|&c| index[c] != usize::MAX)
            .collect();
        let count = |w: usize, last: u64| {
            let k = positions[w].partition_point(|&p| p <= last);
            (k > 0).then_some((w, k))
        };
        let of_node = (0..reach.place.len())
            .map(|i| {
                if wait_chains.len() < reach.upstream_len(i) {
                    let on = |&c: &usize| count(index[c], reach.upstream_on(i, c));
                    wait_chains.iter().filter_map(on).collect()
                } else {
                    let on = |(c, last): (usize, u64)| {
                        count(*index.get(c).filter(|&&w| w != usize::MAX)?, last)
                    };
                    reach.upstream(i).filter_map(on).collect()
                }
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

/// Rule 3's sums at each chain position (flat: chain `c`'s positions from `start[c]`): how
/// many record nodes the node there has downstream, the first of them, and the sum of their
/// hashes.
struct Sums {
    start: Vec<usize>,
    count: Vec<usize>,
    first: Vec<usize>,
    hash: Vec<u128>,
}

impl Sums {
    /// Each record node (`ups`: its last position upstream on each chain) adds itself there;
    /// summed back along each chain, a position has those of every later one.
    fn new(reach: &Chains, ups: &[Vec<(usize, u64)>]) -> Sums {
        let mut start = Vec::with_capacity(reach.members.len());
        let mut n = 0;
        for m in &reach.members {
            start.push(n);
            n += m.len();
        }
        let mut s = Sums {
            start,
            count: vec![0; n],
            first: vec![usize::MAX; n],
            hash: vec![0; n],
        };
        for (k, up) in ups.iter().enumerate() {
            for &(c, pos) in up {
                let at = s.start[c] + pos as usize - 1;
                s.count[at] += 1;
                s.first[at] = s.first[at].min(k);
                s.hash[at] = s.hash[at].wrapping_add(record_hash(k));
            }
        }
        for (c, members) in reach.members.iter().enumerate() {
            let (mut count, mut first, mut hash) = (0, usize::MAX, 0u128);
            for a in (s.start[c]..s.start[c] + members.len()).rev() {
                count += s.count[a];
                first = first.min(s.first[a]);
                hash = hash.wrapping_add(s.hash[a]);
                (s.count[a], s.first[a], s.hash[a]) = (count, first, hash);
            }
        }
        s
    }
}

impl Grouping {
    /// Rule 3: the groups of the graph's nodes by its record nodes `records` (node indices)
    /// downstream of them.
    pub fn new(reach: &Chains, records: &[usize]) -> Grouping {
        let ups: Vec<Vec<(usize, u64)>> = records
            .iter()
            .map(|&node| reach.upstream(node).collect())
            .collect();
        let sums = Sums::new(reach, &ups);
        let mut g = Grouping {
            groups: vec![Group::none()],
            chains: Vec::new(),
            node_group: vec![0; reach.place.len()],
            upstream: Vec::new(),
        };
        let mut chain_index = vec![usize::MAX; reach.members.len()];
        let mut group_of: HashMap<(usize, usize, u128), usize> = HashMap::new();
        for (c, members) in reach.members.iter().enumerate() {
            let (mut previous, mut group) = (0, 0);
            for (q, &node) in members.iter().enumerate() {
                let a = sums.start[c] + q;
                let count = sums.count[a];
                if count == 0 {
                    break; // The counts only shrink along the chain.
                }
                if count != previous {
                    let key = (count, sums.first[a], sums.hash[a]);
                    group = *group_of.entry(key).or_insert_with(|| {
                        if chain_index[c] == usize::MAX {
                            chain_index[c] = g.chains.len();
                            let actor = NEXT_ACTOR.fetch_add(1, Ordering::Relaxed);
                            g.chains.push(Chain::new(actor, members.len() as u64));
                        }
                        g.groups.push(Group {
                            chain: chain_index[c],
                            pos: q as u64 + 1,
                            count,
                            first: sums.first[a],
                        });
                        g.groups.len() - 1
                    });
                    previous = count;
                }
                g.node_group[node] = group;
            }
        }
        // Only chains that stamp a group matter to a record node; chain indices grow with the
        // chains', so the lists stay ascending.
        g.upstream = ups
            .into_iter()
            .map(|up| {
                let on = |(c, p): (usize, u64)| {
                    (chain_index[c] != usize::MAX).then(|| (chain_index[c], p))
                };
                up.into_iter().filter_map(on).collect()
            })
            .collect();
        g
    }
}

/// Record node `k`'s 128-bit hash for the sums of rule 3 (splitmix64, twice).
fn record_hash(k: usize) -> u128 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let k = k as u64;
    (u128::from(mix(k)) << 64) | u128::from(mix(k ^ 0x5851_f42d_4c95_7f2d))
}

#[cfg(test)]
mod tests {
    use super::{Grouping, WaitSets};
    use crate::backend::contract::graph::{ancestors, GraphNode};
    use crate::core::graphs::chains::testing::{nodes, numbers};
    use crate::core::graphs::chains::Chains;

    /// A random DAG of up to `size` empty nodes (each after a few earlier ones, after up to
    /// `wide` of them now and then, and often after the one before it), and which of them
    /// are wait and record nodes (about one in `every`).
    fn random_graph(
        next: &mut impl FnMut(usize) -> usize,
        (size, wide, every): (usize, usize, usize),
    ) -> (Vec<GraphNode>, Vec<usize>, Vec<usize>) {
        let n = 2 + next(size);
        let deps: Vec<Vec<usize>> = (0..n)
            .map(|i| {
                let k = if next(5) == 0 { next(wide) } else { next(3) };
                let mut d: Vec<usize> = (0..k.min(i)).map(|_| next(i)).collect();
                // Mostly chains: each node after the one before it.
                if i > 0 && next(3) > 0 {
                    d.push(i - 1);
                }
                d.sort_unstable();
                d.dedup();
                d
            })
            .collect();
        let nodes = nodes(&deps);
        let waits = (0..n).filter(|_| next(every) == 0).collect();
        let records = (0..n).filter(|_| next(every) == 0).collect();
        (nodes, waits, records)
    }

    /// Each node's wait nodes upstream and its group's record nodes downstream (their number
    /// and the first) are what walking the graph gives; nodes of one group have the same
    /// record nodes downstream; a record node's chain positions cover a group's stamp exactly
    /// when the group is upstream of it; groups stamped on one chain have strictly shrinking
    /// sets.
    fn check_against_walks(nodes: &[GraphNode], waits: &[usize], records: &[usize]) {
        let reach = Chains::of(nodes);
        let ws = WaitSets::new(&reach, waits);
        let g = Grouping::new(&reach, records);
        let up: Vec<Vec<bool>> = (0..nodes.len()).map(|i| ancestors(nodes, i)).collect();
        let downs: Vec<Vec<usize>> = (0..nodes.len())
            .map(|i| (0..records.len()).filter(|&k| up[records[k]][i]).collect())
            .collect();
        for (i, above) in up.iter().enumerate() {
            let walked: Vec<usize> = (0..waits.len()).filter(|&k| above[waits[k]]).collect();
            assert_eq!(ws.list(i), walked, "waits upstream of {i}");
            let group = &g.groups[g.node_group[i]];
            assert_eq!(group.count, downs[i].len(), "records downstream of {i}");
            if let Some(&first) = downs[i].first() {
                assert_eq!(group.first, first, "first record downstream of {i}");
            }
            for (j, other) in downs[..i].iter().enumerate() {
                let same = g.node_group[i] == g.node_group[j];
                assert_eq!(same, *other == downs[i], "groups of nodes {j} and {i}");
            }
            for (k, &r) in records.iter().enumerate() {
                let covers = g.node_group[i] != 0
                    && g.upstream[k]
                        .iter()
                        .any(|&(c, p)| c == group.chain && p >= group.pos);
                assert_eq!(covers, up[r][i], "record {r} over node {i}");
            }
        }
        let set_of = |group: usize| &downs[g.node_group.iter().position(|&x| x == group).unwrap()];
        for (a, ga) in g.groups.iter().enumerate().skip(1) {
            for (b, gb) in g.groups.iter().enumerate().skip(1) {
                if a != b && ga.chain == gb.chain && ga.pos < gb.pos {
                    assert!(ga.count > gb.count, "groups {a} and {b}");
                    assert!(set_of(b).iter().all(|k| set_of(a).contains(k)));
                }
            }
        }
    }

    /// Random graphs, mostly chains with a few event nodes.
    #[test]
    fn sets_are_those_of_walking_the_graph() {
        let mut next = numbers(0x2545_f491_4f6c_dd1d);
        for _ in 0..200 {
            let (nodes, waits, records) = random_graph(&mut next, (30, 3, 4));
            check_against_walks(&nodes, &waits, &records);
        }
    }

    /// Wider graphs (joins of up to 13 dependencies: the one-sort join), more event nodes.
    #[test]
    fn wide_graphs_match_walks() {
        let mut next = numbers(0x1234_5678_9abc_def1);
        for _ in 0..300 {
            let every = 2 + next(3);
            let (nodes, waits, records) = random_graph(&mut next, (60, 14, every));
            check_against_walks(&nodes, &waits, &records);
        }
    }
}

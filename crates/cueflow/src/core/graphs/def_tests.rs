//! Unit tests of flattening (rules 2 and 3 of `core::graphs::def`).
use super::*;

fn site() -> Site {
    std::panic::Location::caller()
}

fn empty_after(g: &mut GraphDef, deps: &[usize]) -> usize {
    g.add(BuildWork::empty(), deps.into(), site()).unwrap()
}

/// Each flat node's dependencies, by flat index.
fn deps_of(flat: &Flat) -> Vec<Vec<usize>> {
    flat.nodes.iter().map(|n| n.deps.to_vec()).collect()
}

#[test]
fn an_in_order_graph_keeps_its_indices_and_dependencies() {
    let mut g = GraphDef::new();
    let a = empty_after(&mut g, &[]);
    let b = empty_after(&mut g, &[a]);
    let c = empty_after(&mut g, &[a]);
    empty_after(&mut g, &[b, c]);
    let flat = g.flatten().unwrap();
    assert_eq!(flat.index, vec![0, 1, 2, 3]);
    assert_eq!(deps_of(&flat), vec![vec![], vec![0], vec![0], vec![1, 2]]);
}

/// A child graph in the middle shifts every later node: their dependencies, on nodes before
/// the child and on the child itself, follow the shift (the child's join node stands for it).
#[test]
fn nodes_after_a_child_graph_depend_on_the_shifted_indices() {
    let mut child = GraphDef::new();
    let x = empty_after(&mut child, &[]);
    empty_after(&mut child, &[x]);
    let mut g = GraphDef::new();
    let a = empty_after(&mut g, &[]);
    let c = g
        .add(
            BuildWork::Child(Arc::new(child)),
            NodeDeps::from_slice(&[a]),
            site(),
        )
        .unwrap();
    let d = empty_after(&mut g, &[a]);
    empty_after(&mut g, &[c, d]);
    let flat = g.flatten().unwrap();
    // a, the child's two nodes, its join, d, the last node.
    assert_eq!(flat.index, vec![0, 3, 4, 5]);
    assert_eq!(
        deps_of(&flat),
        vec![vec![], vec![0], vec![1], vec![2], vec![0], vec![3, 4]]
    );
}

#[test]
fn a_graph_out_of_order_is_flattened_in_dependency_order() {
    let mut g = GraphDef::new();
    let a = empty_after(&mut g, &[]);
    let b = empty_after(&mut g, &[a]);
    // Node 0 made to follow node 1 (an edge added later): 1 runs first.
    g.nodes[a].deps = NodeDeps::from_slice(&[b]);
    g.nodes[b].deps = NodeDeps::new();
    let flat = g.flatten().unwrap();
    assert_eq!(flat.index, vec![1, 0]);
    assert_eq!(deps_of(&flat), vec![vec![], vec![0]]);
}

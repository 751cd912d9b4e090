//! The import graph of a crate, file by file: an edge from each file to the file of the module
//! that defines each thing it names.

use std::collections::{BTreeMap, BTreeSet};

use crate::collect::collect;
pub use crate::collect::StrLit;
use crate::resolve::{Def, Resolver};
use crate::tree::{FileId, ModId, Tree};

/// One path of the code that names something of the crate.
pub struct Use {
    /// The file it is written in.
    pub file: FileId,
    /// The line it starts on.
    pub line: usize,
    /// The path as written (`super::cuda::Stream`).
    pub written: String,
    /// The modules it names on its way and the one that defines what it names in the end.
    pub reaches: Vec<ModId>,
    /// The file that defines what it names.
    pub defined_in: FileId,
}

/// A path of the code that names something outside the crate, its first segment spelled out
/// where a `use` renamed it (`cu::cuInit` → `cudarc::driver::sys::cuInit`).
pub struct Outside {
    /// The file it is written in.
    pub file: FileId,
    /// The line it starts on.
    pub line: usize,
    /// The path, spelled out.
    pub path: Vec<String>,
}

/// A crate's source, its paths resolved.
pub struct Analysis {
    /// The module tree and files.
    pub tree: Tree,
    /// Paths that name something of the crate.
    pub uses: Vec<Use>,
    /// Paths that name something outside it.
    pub outside: Vec<Outside>,
    /// The string literals of its code.
    pub literals: Vec<StrLit>,
    /// For each file, the files it imports from, each with the first use that does (index
    /// into `uses`).
    pub edges: BTreeMap<FileId, BTreeMap<FileId, usize>>,
}

impl Analysis {
    /// Resolve every path of `tree`.
    pub fn of(tree: Tree) -> Analysis {
        let (scopes, occurrences, literals) = collect(&tree);
        let resolver = Resolver::new(&tree, &scopes);
        let mut uses = Vec::new();
        let mut outside = Vec::new();
        for o in occurrences {
            let Some(r) = resolver.resolve(o.module, &o.path) else {
                outside.push(Outside {
                    file: o.file,
                    line: o.line,
                    path: resolver.spelled_out(o.module, &o.path),
                });
                continue;
            };
            // A lone name outside `use` cannot be a module: it is a variable or a field that
            // shares a module's name (`device` beside `mod device`).
            if !o.in_use && o.path.len() == 1 && matches!(r.def, Def::Module(_)) {
                continue;
            }
            let mut reaches = r.route;
            reaches.push(r.def.module());
            uses.push(Use {
                file: o.file,
                line: o.line,
                written: o.path.join("::"),
                reaches,
                defined_in: tree.modules[r.def.module()].file,
            });
        }
        let mut edges: BTreeMap<FileId, BTreeMap<FileId, usize>> = (0..tree.files.len())
            .map(|f| (f, BTreeMap::new()))
            .collect();
        for (i, u) in uses.iter().enumerate() {
            if u.defined_in != u.file {
                let out = edges.get_mut(&u.file).expect("every file has a row");
                out.entry(u.defined_in).or_insert(i);
            }
        }
        Analysis {
            tree,
            uses,
            outside,
            literals,
            edges,
        }
    }

    /// The number of import edges between files.
    pub fn edge_count(&self) -> usize {
        self.edges.values().map(BTreeMap::len).sum()
    }

    /// The import circles: strongly connected components of the graph (Tarjan), each sorted,
    /// single files without a self-edge left out.
    pub fn circles(&self) -> Vec<Vec<FileId>> {
        let adjacency: BTreeMap<FileId, BTreeSet<FileId>> = self
            .edges
            .iter()
            .map(|(f, out)| (*f, out.keys().copied().collect()))
            .collect();
        strongly_connected(&adjacency)
            .into_iter()
            .filter(|c| c.len() > 1)
            .collect()
    }
}

/// Tarjan's strongly connected components of a graph given as adjacency sets.
pub fn strongly_connected(graph: &BTreeMap<FileId, BTreeSet<FileId>>) -> Vec<Vec<FileId>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<FileId, BTreeSet<FileId>>,
        index: BTreeMap<FileId, usize>,
        low: BTreeMap<FileId, usize>,
        stack: Vec<FileId>,
        on_stack: BTreeSet<FileId>,
        out: Vec<Vec<FileId>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: FileId) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in self.graph.get(&v).into_iter().flatten() {
                if !self.index.contains_key(&w) {
                    self.visit(w);
                    let low = self.low[&v].min(self.low[&w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(&w) {
                    let low = self.low[&v].min(self.index[&w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[&v] == self.index[&v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().expect("v is on the stack");
                    self.on_stack.remove(&w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort_unstable();
                self.out.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !walk.index.contains_key(&v) {
            walk.visit(v);
        }
    }
    walk.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tarjan_finds_a_three_node_circle_and_leaves_a_tail_out() {
        let g: BTreeMap<FileId, BTreeSet<FileId>> = [
            (0, [1].into()),
            (1, [2].into()),
            (2, [0].into()),
            (3, [0].into()),
            (4, BTreeSet::new()),
        ]
        .into();
        let mut comps = strongly_connected(&g);
        comps.sort();
        assert_eq!(comps, vec![vec![0, 1, 2], vec![3], vec![4]]);
    }
}

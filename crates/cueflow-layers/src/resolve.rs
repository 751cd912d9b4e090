//! Paths resolved as the compiler resolves them, to the module that defines what they name:
//! `crate::`, `$crate::`, `self::` and `super::` chains; a first segment that is a child module,
//! an item or a `use` binding of the current module; `use` re-exports followed in any module
//! (`crate::Device` → `api::device`), globs included. What does not resolve inside the crate
//! (`std::…`, other crates, local variables, generic parameters) is outside the graph.

use crate::collect::Scope;
use crate::tree::{ModId, Tree};

/// What a path (or a prefix of it) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Def {
    /// A module.
    Module(ModId),
    /// An item defined in this module (a type, function, trait, constant, …); the rest of the
    /// path, if any, is inside the item (a variant, an associated function).
    Item(ModId),
}

impl Def {
    /// The module that defines it (a module defines itself).
    pub fn module(self) -> ModId {
        match self {
            Def::Module(m) | Def::Item(m) => m,
        }
    }
}

/// Where a path leads.
#[derive(Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The modules the path walks through as written (`crate::core::X` walks the root and
    /// `core`), which it names even where `X` is defined elsewhere.
    pub route: Vec<ModId>,
    /// What it names in the end, re-exports followed.
    pub def: Def,
}

/// Resolves paths among the modules of a tree.
pub struct Resolver<'a> {
    tree: &'a Tree,
    scopes: &'a [Scope],
}

impl<'a> Resolver<'a> {
    /// A resolver over `tree` with the scopes collected from it.
    pub fn new(tree: &'a Tree, scopes: &'a [Scope]) -> Self {
        Resolver { tree, scopes }
    }

    /// What `path`, written in module `m`, names; `None` when it leads outside the crate.
    pub fn resolve(&self, m: ModId, path: &[String]) -> Option<Resolved> {
        self.resolve_in(m, path, &mut Vec::new())
    }

    /// `path`'s first segment bound through a `use` of module `m` to an outside crate,
    /// spelled out (`cu::cuInit` after `use cudarc::driver::sys as cu` is
    /// `cudarc::driver::sys::cuInit`); the path itself otherwise.
    pub fn spelled_out(&self, m: ModId, path: &[String]) -> Vec<String> {
        let outside = |p: &Vec<String>| self.resolve(m, p).is_none();
        match path.first().and_then(|f| self.scopes[m].imports.get(f)) {
            Some(targets) => match targets.iter().find(|t| outside(t)) {
                Some(t) if t.as_slice() != path => {
                    let mut out = t.clone();
                    out.extend_from_slice(&path[1..]);
                    out
                }
                _ => path.to_vec(),
            },
            None => path.to_vec(),
        }
    }

    fn parent(&self, m: ModId) -> Option<ModId> {
        self.tree.modules[m].parent
    }

    fn resolve_in(
        &self,
        m: ModId,
        path: &[String],
        stack: &mut Vec<(ModId, String)>,
    ) -> Option<Resolved> {
        let (first, rest) = path.split_first()?;
        let mut def = match first.as_str() {
            "crate" | "$crate" => Def::Module(0),
            "self" => Def::Module(m),
            "super" => Def::Module(self.parent(m)?),
            "Self" => return None,
            name => self.lookup(m, name, stack)?,
        };
        let mut route = Vec::new();
        for seg in rest {
            let Def::Module(x) = def else { break };
            route.push(x);
            let next = match seg.as_str() {
                "super" => self.parent(x).map(Def::Module),
                "self" => Some(def),
                name => self.lookup(x, name, stack),
            };
            match next {
                Some(d) => def = d,
                // A name the checker does not see defined (a macro exported at the root, an
                // item made by a macro): the path leads to the module it was looked for in.
                None => return Some(Resolved { route, def }),
            }
        }
        if let Def::Module(x) = def {
            route.push(x);
        }
        Some(Resolved { route, def })
    }

    /// What `name` means in module `m`: a child module, an item, a `use` binding, or a name
    /// a glob import brings in.
    fn lookup(&self, m: ModId, name: &str, stack: &mut Vec<(ModId, String)>) -> Option<Def> {
        if let Some(&child) = self.tree.modules[m].children.get(name) {
            return Some(Def::Module(child));
        }
        let scope = &self.scopes[m];
        if scope.items.contains(name) {
            return Some(Def::Item(m));
        }
        // Re-exports may come round (`a` re-exports from `b`, which globs `a`): each name is
        // looked for once per chain.
        if stack.iter().any(|(sm, sn)| *sm == m && sn == name) {
            return None;
        }
        stack.push((m, name.to_string()));
        let found = scope
            .imports
            .get(name)
            .into_iter()
            .flatten()
            .find_map(|target| self.resolve_in(m, target, stack).map(|r| r.def))
            .or_else(|| {
                scope
                    .globs
                    .iter()
                    .find_map(|g| match self.resolve_in(m, g, stack)?.def {
                        Def::Module(x) if x != m => self.lookup(x, name, stack),
                        _ => None,
                    })
            });
        stack.pop();
        found
    }
}

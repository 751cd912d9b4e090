//! What each module defines and imports, and every path its code names: `use` trees, paths in
//! expressions, types, patterns and trait bounds, and path-shaped tokens inside macro calls and
//! `macro_rules!` bodies (which `syn` leaves as tokens).

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Attribute, ImplItem, Item, TraitItem, UseTree};

use crate::tree::{FileId, ModId, Tree};

/// A module's own names: what `use` and item declarations bind in it.
#[derive(Default)]
pub struct Scope {
    /// Items defined in the module (functions, types, traits, constants, macros, …),
    /// including those declared inside its function bodies.
    pub items: BTreeSet<String>,
    /// `use` bindings by the name they bind (`use a::b as c` binds `c` to `a::b`).
    pub imports: BTreeMap<String, Vec<Vec<String>>>,
    /// The paths of `use …::*` imports.
    pub globs: Vec<Vec<String>>,
}

/// One path written in the code.
pub struct Occurrence {
    /// The module whose names it is resolved among.
    pub module: ModId,
    /// The file it is written in.
    pub file: FileId,
    /// Its segments as written (`super`, `self`, `crate` and `$crate` included).
    pub path: Vec<String>,
    /// The line it starts on.
    pub line: usize,
    /// Whether it is (a leaf of) a `use` tree, which may name a module by itself.
    pub in_use: bool,
}

/// One string literal written in the code (in macro calls too; not in attributes or docs).
pub struct StrLit {
    /// The file it is written in.
    pub file: FileId,
    /// The line it starts on.
    pub line: usize,
    /// Its value.
    pub value: String,
}

/// Every module's scope (indexed by module), every path occurrence and every string literal
/// of the tree.
pub fn collect(tree: &Tree) -> (Vec<Scope>, Vec<Occurrence>, Vec<StrLit>) {
    let mut scopes: Vec<Scope> = tree.modules.iter().map(|_| Scope::default()).collect();
    let mut occurrences = Vec::new();
    let mut literals = Vec::new();
    for (m, module) in tree.file_modules() {
        let mut c = Collector {
            tree,
            stack: vec![m],
            file: module.file,
            scopes: &mut scopes,
            occurrences: &mut occurrences,
            literals: &mut literals,
        };
        for item in &tree.files[module.file].ast.items {
            c.visit_item(item);
        }
    }
    (scopes, occurrences, literals)
}

struct Collector<'t> {
    tree: &'t Tree,
    /// The module being walked, innermost last.
    stack: Vec<ModId>,
    file: FileId,
    scopes: &'t mut Vec<Scope>,
    occurrences: &'t mut Vec<Occurrence>,
    literals: &'t mut Vec<StrLit>,
}

impl Collector<'_> {
    fn module(&self) -> ModId {
        *self.stack.last().expect("inside a module")
    }

    fn record(&mut self, path: Vec<String>, line: usize, in_use: bool) {
        if path.is_empty() {
            return;
        }
        self.occurrences.push(Occurrence {
            module: self.module(),
            file: self.file,
            path,
            line,
            in_use,
        });
    }

    /// Each leaf of a `use` tree, as a binding (or a glob) of the module and an occurrence.
    fn use_tree(&mut self, tree: &UseTree, prefix: &mut Vec<String>) {
        let m = self.module();
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                let (path, bound) = leaf(prefix, &n.ident.to_string());
                if let Some(bound) = bound {
                    self.scopes[m]
                        .imports
                        .entry(bound)
                        .or_default()
                        .push(path.clone());
                }
                self.record(path, line, true);
            }
            UseTree::Rename(r) => {
                let line = r.ident.span().start().line;
                let (path, _) = leaf(prefix, &r.ident.to_string());
                let bound = r.rename.to_string();
                if bound != "_" {
                    self.scopes[m]
                        .imports
                        .entry(bound)
                        .or_default()
                        .push(path.clone());
                }
                self.record(path, line, true);
            }
            UseTree::Glob(g) => {
                self.scopes[m].globs.push(prefix.clone());
                self.record(prefix.clone(), g.star_token.span.start().line, true);
            }
            UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
        }
    }

    /// Path-shaped token runs in a macro's body: `a::b::C`, `$crate::x`, `super::y`; not a
    /// field or method after `.`, not a macro variable (`$x`), not an absolute `::a::b`.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let toks: Vec<TokenTree> = tokens.into_iter().collect();
        let punct = |i: usize, c: char| matches!(toks.get(i), Some(TokenTree::Punct(p)) if p.as_char() == c);
        let path_sep = |i: usize| {
            matches!(toks.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
                && punct(i + 1, ':')
        };
        let mut i = 0;
        while i < toks.len() {
            match &toks[i] {
                TokenTree::Group(g) => {
                    self.scan_tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(id) => {
                    let after_dollar = i > 0 && punct(i - 1, '$');
                    let after_dot = i > 0 && punct(i - 1, '.');
                    let absolute = i > 1 && path_sep(i - 2);
                    let first = id.to_string();
                    let mut path = vec![if after_dollar && first == "crate" {
                        "$crate".to_string()
                    } else {
                        first.clone()
                    }];
                    let mut j = i + 1;
                    while path_sep(j) {
                        let Some(TokenTree::Ident(next)) = toks.get(j + 2) else {
                            break;
                        };
                        path.push(next.to_string());
                        j += 3;
                    }
                    let variable = after_dollar && first != "crate";
                    if !(variable || after_dot || absolute) {
                        self.record(path, id.span().start().line, false);
                    }
                    i = j;
                }
                TokenTree::Literal(lit) => {
                    if let syn::Lit::Str(s) = syn::Lit::new(lit.clone()) {
                        self.visit_lit_str(&s);
                    }
                    i += 1;
                }
                _ => i += 1,
            }
        }
    }
}

/// A `use` leaf `name` under `prefix`: its path and the name it binds (`self` binds the
/// prefix's last segment; `use a::b::{self}` imports module `b`).
fn leaf(prefix: &[String], name: &str) -> (Vec<String>, Option<String>) {
    if name == "self" {
        (prefix.to_vec(), prefix.last().cloned())
    } else {
        let mut path = prefix.to_vec();
        path.push(name.to_string());
        (path, Some(name.to_string()))
    }
}

pub(crate) fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module's namespace, if any.
fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string()).filter(|n| n != "_")
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if !self.tree.keeps(item_attrs(item)) {
            return;
        }
        if let Some(name) = item_name(item) {
            let m = self.module();
            self.scopes[m].items.insert(name);
        }
        match item {
            Item::Mod(decl) => {
                // A file module is walked by itself; an inline one here, in its own scope.
                let child = self.tree.child(self.module(), &decl.ident.to_string());
                if let (Some(child), Some((_, items))) = (child, &decl.content) {
                    self.stack.push(child);
                    for i in items {
                        self.visit_item(i);
                    }
                    self.stack.pop();
                }
            }
            Item::Use(u) => {
                // `use ::a::b` names an outside crate.
                if u.leading_colon.is_none() {
                    self.use_tree(&u.tree, &mut Vec::new());
                }
            }
            _ => visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        let attrs: &[Attribute] = match item {
            ImplItem::Const(i) => &i.attrs,
            ImplItem::Fn(i) => &i.attrs,
            ImplItem::Type(i) => &i.attrs,
            ImplItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if self.tree.keeps(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast TraitItem) {
        let attrs: &[Attribute] = match item {
            TraitItem::Const(i) => &i.attrs,
            TraitItem::Fn(i) => &i.attrs,
            TraitItem::Type(i) => &i.attrs,
            TraitItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if self.tree.keeps(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    // Attributes (derives, lints, docs) and visibilities (`pub(in crate::a)`) say how an item
    // is built and who may see it, not what it uses.
    fn visit_attribute(&mut self, _: &'ast Attribute) {}
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            if let Some(first) = path.segments.first() {
                let line = first.ident.span().start().line;
                let segs = path.segments.iter().map(|s| s.ident.to_string()).collect();
                self.record(segs, line, false);
            }
        }
        visit::visit_path(self, path);
    }

    fn visit_lit_str(&mut self, s: &'ast syn::LitStr) {
        self.literals.push(StrLit {
            file: self.file,
            line: s.span().start().line,
            value: s.value(),
        });
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.scan_tokens(mac.tokens.clone());
    }
}

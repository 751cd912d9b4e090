//! Every function of a crate's code with its length and parameter count: free functions,
//! methods, trait methods with a body and functions declared inside function bodies, in file
//! modules and inline ones, test code left out as everywhere in the checker.

use syn::visit::{self, Visit};
use syn::{Block, ImplItem, Item, Signature, TraitItem};

use crate::collect::item_attrs;
use crate::tree::{FileId, ModId, Tree};

/// One function.
pub struct Function {
    /// The file it is written in.
    pub file: FileId,
    /// The module it belongs to.
    pub module: ModId,
    /// Its name, after the type or trait whose `impl` or definition holds it
    /// (`StreamCore::submit`, `walk`).
    pub name: String,
    /// The line of its `fn`.
    pub line: usize,
    /// Its lines, from the `fn` to the closing brace of its body.
    pub lines: usize,
    /// Its parameters, `self` not counted.
    pub params: usize,
}

/// The functions of `tree`.
pub fn functions(tree: &Tree) -> Vec<Function> {
    let mut out = Vec::new();
    for (m, module) in tree.file_modules() {
        let mut f = Finder {
            tree,
            stack: vec![m],
            file: module.file,
            owner: Vec::new(),
            out: &mut out,
        };
        for item in &tree.files[module.file].ast.items {
            f.visit_item(item);
        }
    }
    out
}

struct Finder<'t> {
    tree: &'t Tree,
    /// The module being walked, innermost last.
    stack: Vec<ModId>,
    file: FileId,
    /// The types and traits whose items are being walked, innermost last.
    owner: Vec<String>,
    out: &'t mut Vec<Function>,
}

impl Finder<'_> {
    fn add(&mut self, sig: &Signature, body: &Block) {
        let line = sig.fn_token.span.start().line;
        let end = body.brace_token.span.close().end().line;
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{}", sig.ident),
            None => sig.ident.to_string(),
        };
        self.out.push(Function {
            file: self.file,
            module: *self.stack.last().expect("inside a module"),
            name,
            line,
            lines: end + 1 - line,
            params: sig
                .inputs
                .iter()
                .filter(|a| matches!(a, syn::FnArg::Typed(_)))
                .count(),
        });
    }
}

/// The name an `impl` block's functions are shown after: its type's last segment.
fn self_type(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map_or_else(String::new, |s| s.ident.to_string()),
        syn::Type::Reference(r) => self_type(&r.elem),
        _ => "impl".to_string(),
    }
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if !self.tree.keeps(item_attrs(item)) {
            return;
        }
        match item {
            Item::Mod(decl) => {
                // A file module is walked by itself, an inline one here; one the tree left out
                // (`mod tests`) not at all.
                let here = *self.stack.last().expect("inside a module");
                let child = self.tree.child(here, &decl.ident.to_string());
                if let (Some(child), Some((_, items))) = (child, &decl.content) {
                    self.stack.push(child);
                    for i in items {
                        self.visit_item(i);
                    }
                    self.stack.pop();
                }
            }
            Item::Fn(f) => {
                self.add(&f.sig, &f.block);
                // Functions declared in its body are named by themselves.
                let owner = std::mem::take(&mut self.owner);
                visit::visit_item_fn(self, f);
                self.owner = owner;
            }
            Item::Impl(i) => {
                self.owner.push(self_type(&i.self_ty));
                visit::visit_item_impl(self, i);
                self.owner.pop();
            }
            Item::Trait(t) => {
                self.owner.push(t.ident.to_string());
                visit::visit_item_trait(self, t);
                self.owner.pop();
            }
            _ => visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        if let ImplItem::Fn(f) = item {
            if self.tree.keeps(&f.attrs) {
                self.add(&f.sig, &f.block);
                visit::visit_impl_item_fn(self, f);
            }
        }
    }

    fn visit_trait_item(&mut self, item: &'ast TraitItem) {
        if let TraitItem::Fn(f) = item {
            if let (true, Some(body)) = (self.tree.keeps(&f.attrs), &f.default) {
                self.add(&f.sig, body);
                visit::visit_trait_item_fn(self, f);
            }
        }
    }
}

//! A crate's module tree, read from its source: the root file, then every `mod` declaration
//! (`mod x;` to `x.rs` or `x/mod.rs`, `#[path = "…"] mod x;`, inline `mod x { … }`), as the
//! compiler finds them. Each file is parsed once with `syn`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use syn::Item;

use crate::attrs::{path_attr, test_only};

/// Index of a file in [`Tree::files`].
pub type FileId = usize;
/// Index of a module in [`Tree::modules`]; the crate root is 0.
pub type ModId = usize;

/// One source file of the crate.
pub struct SourceFile {
    /// The path relative to the directory the tree was loaded from (`src/api/device.rs`).
    pub rel: String,
    /// The parsed file.
    pub ast: syn::File,
}

/// One module: a file's, or an inline `mod x { … }` inside a file.
pub struct Module {
    /// The module's name (empty for the crate root).
    pub name: String,
    /// The module it is declared in (`None` for the crate root).
    pub parent: Option<ModId>,
    /// The file that holds its items.
    pub file: FileId,
    /// Its child modules by name.
    pub children: BTreeMap<String, ModId>,
    /// Where the files of its child modules are looked for.
    dir: PathBuf,
}

/// A crate's modules and files.
pub struct Tree {
    /// The directory the files' `rel` paths are relative to.
    pub base: PathBuf,
    /// Every file, the root first.
    pub files: Vec<SourceFile>,
    /// Every module, the root first.
    pub modules: Vec<Module>,
    /// Whether code compiled only for tests is part of the tree.
    pub with_tests: bool,
}

impl Tree {
    /// Module `module`'s child module named `name`, if the tree holds it (`mod tests` may be
    /// left out).
    pub fn child(&self, module: usize, name: &str) -> Option<usize> {
        self.modules[module].children.get(name).copied()
    }

    /// The modules that are files of their own, by index: inline modules are walked from
    /// their parent's file.
    pub fn file_modules(&self) -> impl Iterator<Item = (usize, &Module)> {
        self.modules.iter().enumerate().filter(|(_, module)| {
            module
                .parent
                .is_none_or(|p| self.modules[p].file != module.file)
        })
    }

    /// The crate whose root file is `base/root`. With `with_tests` false, items under
    /// `#[cfg(test)]` and modules named `tests` are left out, as in the library users build.
    pub fn load(base: &Path, root: &str, with_tests: bool) -> Result<Tree, String> {
        let mut tree = Tree {
            base: base.to_path_buf(),
            files: Vec::new(),
            modules: Vec::new(),
            with_tests,
        };
        let path = base.join(root);
        let dir = path.parent().unwrap_or(base).to_path_buf();
        tree.load_file(String::new(), None, &path, dir)?;
        Ok(tree)
    }

    /// Whether an item is part of the tree (not test code when tests are left out).
    pub(crate) fn keeps(&self, attrs: &[syn::Attribute]) -> bool {
        self.with_tests || !test_only(attrs)
    }

    /// The module's path from the crate root, `crate::a::b` style (`crate` for the root).
    pub fn module_path(&self, m: ModId) -> String {
        let mut names = Vec::new();
        let mut at = Some(m);
        while let Some(x) = at {
            if x != 0 {
                names.push(self.modules[x].name.as_str());
            }
            at = self.modules[x].parent;
        }
        names.push("crate");
        names.reverse();
        names.join("::")
    }

    /// `path` relative to the base, `..` folded (`tests/../examples/a.rs` is `examples/a.rs`).
    pub(crate) fn rel(&self, path: &Path) -> String {
        relative(&self.base, path)
    }

    fn load_file(
        &mut self,
        name: String,
        parent: Option<ModId>,
        path: &Path,
        dir: PathBuf,
    ) -> Result<ModId, String> {
        let rel = self.rel(path);
        let text = std::fs::read_to_string(path).map_err(|e| format!("{rel}: {e}"))?;
        let ast = syn::parse_file(&text).map_err(|e| {
            let at = e.span().start();
            format!("{rel}:{}:{}: {e}", at.line, at.column + 1)
        })?;
        let file = self.files.len();
        // The file's place is taken before its modules' files (which come after it); its
        // syntax tree moves in once its `mod` declarations are followed.
        let empty = syn::parse_file("").map_err(|e| e.to_string())?;
        self.files.push(SourceFile { rel, ast: empty });
        let m = self.add_module(name, parent, file, dir);
        let file_dir = path.parent().unwrap_or(&self.base).to_path_buf();
        self.load_items(m, &ast.items, &file_dir)?;
        self.files[file].ast = ast;
        Ok(m)
    }

    fn add_module(
        &mut self,
        name: String,
        parent: Option<ModId>,
        file: FileId,
        dir: PathBuf,
    ) -> ModId {
        let m = self.modules.len();
        if let Some(p) = parent {
            self.modules[p].children.insert(name.clone(), m);
        }
        self.modules.push(Module {
            name,
            parent,
            file,
            children: BTreeMap::new(),
            dir,
        });
        m
    }

    /// The `mod` declarations among `items` of module `m`; `file_dir` is the directory of the
    /// file they are written in (where a `#[path]` outside inline modules is relative to).
    fn load_items(&mut self, m: ModId, items: &[Item], file_dir: &Path) -> Result<(), String> {
        for item in items {
            let Item::Mod(decl) = item else { continue };
            let name = decl.ident.to_string();
            if !self.keeps(&decl.attrs) || (!self.with_tests && name == "tests") {
                continue;
            }
            let dir = self.modules[m].dir.clone();
            if let Some((_, inner)) = &decl.content {
                let file = self.modules[m].file;
                let child_dir = dir.join(&name);
                let child = self.add_module(name, Some(m), file, child_dir.clone());
                // A `#[path]` inside an inline module is relative to the module's directory.
                self.load_items(child, inner, &child_dir)?;
                continue;
            }
            let (path, child_dir) = match path_attr(&decl.attrs) {
                Some(p) => {
                    let path = file_dir.join(p);
                    let d = path.parent().unwrap_or(file_dir).to_path_buf();
                    (path, d)
                }
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    let nested = dir.join(&name).join("mod.rs");
                    let path = if flat.exists() || !nested.exists() {
                        flat
                    } else {
                        nested
                    };
                    (path, dir.join(&name))
                }
            };
            if !path.exists() {
                let at = decl.ident.span().start().line;
                return Err(format!(
                    "{}:{at}: `mod {name};` names {}, which does not exist",
                    self.files[self.modules[m].file].rel,
                    self.rel(&path)
                ));
            }
            self.load_file(name, Some(m), &path, child_dir)?;
        }
        Ok(())
    }
}

/// `path` relative to `base`, with `/` separators and `.`/`..` folded.
pub(crate) fn relative(base: &Path, path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.strip_prefix(base).unwrap_or(path).components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            c => parts.push(c.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

//! cueflow's layers, checked from its source without building it.
//!
//! The checker parses every file of the library with `syn` (following `mod` declarations from
//! `src/lib.rs`, leaving out `#[cfg(test)]` items and `mod tests`) and draws the import graph
//! file by file: every `use` tree, every path in an expression, type, pattern or bound, and the
//! path-shaped tokens inside macro calls resolve to the file of the module that *defines* what
//! they name. Resolution follows what the compiler follows: `crate::`, `self::`, `super::`
//! chains, a first segment that is a child module, an item or a `use` binding of the current
//! module, and `pub use` re-exports in any module (`crate::Device` leads to `api/device.rs`).
//!
//! A rule ([`Rule`], the table in [`cueflow::RULES`]) then reads that graph: which modules a
//! layer's code reaches (a path counts both for the modules it walks through and for where what
//! it names is defined), import circles, file lengths under `src/` and `tests/`, function
//! lengths and parameter counts, where driver calls may be, and whether every file under
//! `tests/` is compiled. `tests/cueflow.rs` runs the
//! table on cueflow; `tests/injected.rs` proves each kind of violation is caught, on small
//! trees written for the purpose.

mod attrs;
mod collect;
pub mod cueflow;
mod fns;
mod graph;
mod resolve;
mod rules;
mod tests_dir;
mod tree;

pub use graph::Analysis;
pub use rules::{check, Check, Finding, Report, Rule};
pub use tree::Tree;

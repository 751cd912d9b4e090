//! Conditional nodes (GR9): which kind, and a condition's id as a kernel argument.

/// A condition handle's id as a kernel argument (rule 1).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ConditionId(pub u64);

/// Which conditional node (rule 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondKind {
    /// Run the body when the condition is non-zero.
    If,
    /// Run the first body when non-zero, the second otherwise.
    IfElse,
    /// Run the body while the condition is non-zero.
    While,
    /// Run the body the condition's value selects, if any.
    Switch,
}

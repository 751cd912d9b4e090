//! The CUDA C source of cueflow's built-in kernels: a leaf that the CUDA backend (which loads
//! it with every device) and the public `kernels` module both use.

/// CUDA C source of every built-in kernel.
pub(crate) const BUILTINS_CU: &str = include_str!("kernels/builtins.cu");

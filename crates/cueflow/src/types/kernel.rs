//! Grid shapes and what a host kernel knows of its block, and how the host backend runs a CUDA
//! C kernel's threads.

use std::ops::Range;

/// How the host backend runs the threads of a CUDA C kernel's block
/// ([`Kernel::host_path`](crate::Kernel::host_path)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPath {
    /// As the lanes of loops over the block's threads, which the C++ compiler vectorizes
    /// (the work-item-loop compiler). Launches whose blocks are not 1-D, or have more than
    /// 1024 threads, still run as fibers.
    Lanes,
    /// One fiber per thread, switched at barriers and warp operations: what the work-item-loop
    /// compiler does not cover, with the reason (`barrier inside a divergent if at line 12`).
    Fibers {
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for HostPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPath::Lanes => f.write_str("lanes"),
            HostPath::Fibers { reason } => write!(f, "fibers: {reason}"),
        }
    }
}

/// Grid or block dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

impl Dim3 {
    pub(crate) fn as_array(self) -> [u32; 3] {
        [self.x, self.y, self.z]
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Self {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Self {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Dim3 { x, y, z }
    }
}

/// Where a host kernel's block sits in the grid.
#[derive(Clone, Debug)]
pub struct BlockCtx {
    /// Block index.
    pub block_idx: Dim3,
    /// Grid dimensions.
    pub grid_dim: Dim3,
    /// Block dimensions.
    pub block_dim: Dim3,
    /// Linear block index (x fastest).
    pub linear_block: u64,
    /// Threads in a block.
    pub threads: u64,
    /// Dynamic shared memory bytes requested at launch.
    pub shared_bytes: u32,
}

impl BlockCtx {
    /// Global linear thread indices of this block's threads (the block's tile).
    pub fn thread_range(&self) -> Range<u64> {
        let lo = self.linear_block * self.threads;
        lo..lo + self.threads
    }
}

impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Self {
        Dim3 { x, y, z }
    }
}

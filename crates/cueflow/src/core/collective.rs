//! Collectives (SPEC MD4): all-reduce, broadcast, reduce, all-gather and reduce-scatter over a
//! group of devices, each member's part a stream operation of its stream, ordered like any
//! other (ST1/ST2, tracking, trace). NCCL runs them on CUDA; the host backend runs them with its
//! engines, reducing in rank order (`r0 ⊕ r1 ⊕ … ⊕ rN-1`, left to right), so integer results
//! are exact and float results are those of that order.

use std::any::Any;
use std::sync::Arc;

use super::op::Op;
use crate::backend::{BackendStream, Done};
use crate::Result;

/// How values are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// An element type collectives move (NCCL's data types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// `i8`.
    I8,
    /// `u8`.
    U8,
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::I8 | ElemType::U8 => 1,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
        }
    }
}

/// What a collective does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveKind {
    /// Every rank gets the reduction of every rank's input.
    AllReduce(ReduceOp),
    /// Every rank gets rank `root`'s input.
    Broadcast { root: usize },
    /// Rank `root` gets the reduction of every rank's input.
    Reduce { root: usize, op: ReduceOp },
    /// Every rank gets every rank's input, concatenated in rank order.
    AllGather,
    /// Rank `r` gets part `r` of the reduction of every rank's input.
    ReduceScatter(ReduceOp),
}

impl CollectiveKind {
    /// Short name for errors and traces.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce(_) => "all_reduce",
            CollectiveKind::Broadcast { .. } => "broadcast",
            CollectiveKind::Reduce { .. } => "reduce",
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::ReduceScatter(_) => "reduce_scatter",
        }
    }
}

/// One collective call as every member sees it: the same on every rank (checked where the
/// ranks meet, MD4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CollectiveDesc {
    pub kind: CollectiveKind,
    pub elem: ElemType,
    /// Elements of each rank's input (all-gather: of each part; reduce-scatter: of the whole).
    pub count: usize,
    /// Number of the call on this communicator (the ranks' calls pair up by it).
    pub seq: u64,
}

/// One member's part of a group call, past core's checks and tracking: its op (a
/// [`Work::Collective`](super::op::Work::Collective)) for its stream, after `after`.
pub(crate) struct GroupPart {
    pub stream: Arc<dyn BackendStream>,
    pub op: Op,
    pub after: Vec<Done>,
    pub want_done: bool,
}

/// One member of a communicator as its backend provides it.
pub(crate) trait BackendComm: Send + Sync + 'static {
    /// This member's rank.
    fn rank(&self) -> usize;
    /// Enqueue the parts of one collective call made for several members of this process at
    /// once, in rank order (MD4); returns each part's completion. The default enqueues them
    /// one by one, which suits backends whose members never block each other at enqueue;
    /// NCCL needs them in one group.
    fn submit_group(&self, parts: Vec<GroupPart>) -> Result<Vec<Option<Done>>> {
        parts
            .into_iter()
            .map(|p| p.stream.submit(p.op, &p.after, p.want_done))
            .collect()
    }
    fn as_any(&self) -> &dyn Any;
}

/// Reduce `b` into `acc`, element by element, as type `T`.
fn fold<T: Copy>(acc: &mut [T], b: &[T], f: impl Fn(T, T) -> T) {
    for (a, &x) in acc.iter_mut().zip(b) {
        *a = f(*a, x);
    }
}

macro_rules! reduce_as {
    ($t:ty, $acc:expr, $b:expr, $op:expr, $wrap:ident) => {{
        let acc: &mut [$t] = bytemuck::cast_slice_mut($acc);
        let b: &[$t] = bytemuck::cast_slice($b);
        match $op {
            ReduceOp::Sum => fold(acc, b, |x, y| reduce_as!(@$wrap add x y)),
            ReduceOp::Prod => fold(acc, b, |x, y| reduce_as!(@$wrap mul x y)),
            ReduceOp::Max => fold(acc, b, |x, y| if y > x { y } else { x }),
            ReduceOp::Min => fold(acc, b, |x, y| if y < x { y } else { x }),
        }
    }};
    (@int add $x:ident $y:ident) => { $x.wrapping_add($y) };
    (@int mul $x:ident $y:ident) => { $x.wrapping_mul($y) };
    (@float add $x:ident $y:ident) => { $x + $y };
    (@float mul $x:ident $y:ident) => { $x * $y };
}

/// `acc = acc ⊕ b` for elements of type `elem` (the host backend's reduction step; integers
/// wrap, as NCCL's do).
pub(crate) fn reduce_into(elem: ElemType, op: ReduceOp, acc: &mut [u8], b: &[u8]) {
    match elem {
        ElemType::I8 => reduce_as!(i8, acc, b, op, int),
        ElemType::U8 => reduce_as!(u8, acc, b, op, int),
        ElemType::I32 => reduce_as!(i32, acc, b, op, int),
        ElemType::U32 => reduce_as!(u32, acc, b, op, int),
        ElemType::I64 => reduce_as!(i64, acc, b, op, int),
        ElemType::U64 => reduce_as!(u64, acc, b, op, int),
        ElemType::F32 => reduce_as!(f32, acc, b, op, float),
        ElemType::F64 => reduce_as!(f64, acc, b, op, float),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_in_rank_order() {
        let mut acc = vec![1i32, -5, 7];
        let b = [3i32, -6, 7];
        reduce_into(
            ElemType::I32,
            ReduceOp::Max,
            bytemuck::cast_slice_mut(&mut acc),
            bytemuck::cast_slice(&b),
        );
        assert_eq!(acc, vec![3, -5, 7]);
        let mut acc = vec![250u8, 2];
        reduce_into(ElemType::U8, ReduceOp::Sum, &mut acc, &[10, 3]);
        assert_eq!(acc, vec![4, 5], "integers wrap");
        let mut acc = vec![1.5f64, 2.0];
        let b = [2.0f64, -1.0];
        reduce_into(
            ElemType::F64,
            ReduceOp::Prod,
            bytemuck::cast_slice_mut(&mut acc),
            bytemuck::cast_slice(&b),
        );
        assert_eq!(acc, vec![3.0, -2.0]);
    }
}

//! What a collective does and on which elements (MD4).

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

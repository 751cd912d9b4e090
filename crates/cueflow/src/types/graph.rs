//! What kind of node a graph node is, as the program reads it (`Graph::nodes`), as a diagram
//! draws it (`Graph::to_dot`) and as a race report names it: a new node type is a variant
//! here, its shape and noun, and the classification of the contract's node
//! (`GraphWork::node_type`).

/// What kind of node a graph node is (cudaGraphNodeType).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeType {
    /// A kernel launch.
    Kernel,
    /// A copy.
    Memcpy,
    /// A memset.
    Memset,
    /// A host function.
    Host,
    /// An event record.
    EventRecord,
    /// A wait on an event.
    EventWait,
    /// A child graph.
    Graph,
    /// A memory allocation.
    MemAlloc,
    /// A memory free.
    MemFree,
    /// An empty node (an ordering point).
    Empty,
    /// A conditional node (if, if/else, while, switch; GR9).
    Conditional,
    /// Another operation (a flag write, an external operation).
    Other,
}

impl NodeType {
    /// What a race report calls a node of this type where it names no operation (a memory,
    /// empty or event node).
    pub(crate) fn noun(self) -> &'static str {
        match self {
            NodeType::Kernel => "kernel node",
            NodeType::Memcpy => "copy node",
            NodeType::Memset => "memset node",
            NodeType::Host => "host node",
            NodeType::EventRecord => "event record node",
            NodeType::EventWait => "event wait node",
            NodeType::Graph => "child graph node",
            NodeType::MemAlloc => "graph memory allocation node",
            NodeType::MemFree => "graph memory free node",
            NodeType::Empty => "empty node",
            NodeType::Conditional => "conditional node",
            NodeType::Other => "operation node",
        }
    }

    /// The Graphviz shape `Graph::to_dot` draws a node of this type with.
    pub(crate) fn dot_shape(self) -> &'static str {
        match self {
            NodeType::Kernel
            | NodeType::Memcpy
            | NodeType::Memset
            | NodeType::Host
            | NodeType::Other => "box",
            NodeType::MemAlloc | NodeType::MemFree => "octagon",
            NodeType::Empty => "point",
            NodeType::Conditional => "hexagon",
            NodeType::EventRecord | NodeType::EventWait => "diamond",
            NodeType::Graph => "folder",
        }
    }
}

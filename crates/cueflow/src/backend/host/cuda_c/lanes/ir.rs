//! The block program the lane compiler builds from a kernel: uniform code run once per block
//! (or per chunk of threads), with thread loops (segments of per-lane statements) inside.

use std::collections::BTreeSet;

/// A variable of the kernel or one the compiler made (masks), by index.
pub(super) type VarId = usize;

/// What a `__shared__`/`static`/`extern` declaration "declares" in [`Node::Uni`]: no variable
/// of the kernel's, but a name used later, so chunks end before it.
pub(super) const SHARED_DECL: VarId = usize::MAX;

/// One statement run by each lane of a thread loop.
pub(super) struct LStmt {
    /// The statement as written for one lane (masked as needed).
    pub text: String,
    /// For a declaration: the same as assignments to its variables, for when they are kept
    /// across segments (declared at the top of the thread loop).
    pub assign: Option<String>,
    /// Variables it declares (at the segment's top level).
    pub decls: Vec<VarId>,
    pub uses: BTreeSet<VarId>,
    pub writes: BTreeSet<VarId>,
}

/// Statements of one thread loop that run for the lanes of `masks` in `range`.
pub(super) struct Seg {
    /// Mask variables (ints) that must all be nonzero.
    pub masks: Vec<VarId>,
    /// Lanes `[lo, hi)` (uniform variables' names) when a condition on the thread index
    /// narrowed them (R3).
    pub range: Option<(String, String)>,
    pub stmts: Vec<LStmt>,
    /// `uniform |= lane var` after the statements, for every lane (whether any lane is still
    /// active).
    pub any: Vec<(String, VarId)>,
}

/// A node of the block program.
pub(super) enum Node {
    /// Uniform code, run once per block or chunk.
    Uni {
        text: String,
        /// Uniform variables it declares (a chunk never holds these) and assigns.
        declares: Vec<VarId>,
        assigns: Vec<VarId>,
        /// A `break` or `continue` of an enclosing uniform loop.
        escapes: bool,
    },
    Seg(Seg),
    /// `__syncthreads()`: thread loops before it finish before those after it start.
    Barrier,
    /// A warp's synchronization (shuffles): ends a thread loop, not a chunk.
    WarpSync,
    Scope(Vec<Node>),
    /// A loop run at block level: uniform (`divergent: false`) or a loop over lanes still
    /// active (`divergent: true`).
    Loop {
        head: String,
        body: Vec<Node>,
        tail: String,
        assigns: Vec<VarId>,
        divergent: bool,
    },
    If {
        cond: String,
        then: Vec<Node>,
        els: Vec<Node>,
        divergent: bool,
    },
    /// A snapshot array for a warp operation's operands (R4).
    Snap {
        name: String,
        ty: String,
    },
    /// A barrier-free run executed chunk by chunk of threads (R5).
    Chunk(Vec<Node>),
}

impl Node {
    /// Whether the subtree holds a block barrier.
    pub(super) fn has_barrier(&self) -> bool {
        match self {
            Node::Barrier => true,
            Node::Scope(v) | Node::Chunk(v) => v.iter().any(Node::has_barrier),
            Node::Loop { body, .. } => body.iter().any(Node::has_barrier),
            Node::If { then, els, .. } => then.iter().chain(els).any(Node::has_barrier),
            _ => false,
        }
    }

    /// Thread loops of the subtree, counting one inside a loop as two (for chunking).
    fn weight(&self) -> usize {
        match self {
            Node::Seg(_) => 1,
            Node::Scope(v) | Node::Chunk(v) => v.iter().map(Node::weight).sum(),
            Node::Loop { body, .. } => 2 * body.iter().map(Node::weight).sum::<usize>(),
            Node::If { then, els, .. } => then.iter().chain(els).map(Node::weight).sum(),
            _ => 0,
        }
    }

    /// Whether the subtree breaks or continues a loop outside it.
    pub(super) fn escapes(&self) -> bool {
        match self {
            Node::Uni { escapes, .. } => *escapes,
            Node::Scope(v) | Node::Chunk(v) => v.iter().any(Node::escapes),
            Node::If { then, els, .. } => then.iter().chain(els).any(Node::escapes),
            // A loop keeps its own `break`s; a uniform `return` leaves it too.
            Node::Loop { body, .. } => body.iter().any(Node::returns),
            _ => false,
        }
    }

    /// Whether the subtree holds a uniform `return` (`goto cf_end`).
    fn returns(&self) -> bool {
        match self {
            Node::Uni { text, .. } => text.starts_with("goto "),
            Node::Scope(v) | Node::Chunk(v) => v.iter().any(Node::returns),
            Node::Loop { body, .. } => body.iter().any(Node::returns),
            Node::If { then, els, .. } => then.iter().chain(els).any(Node::returns),
            _ => false,
        }
    }
}

/// Wrap barrier-free runs of `nodes` that hold more than one thread loop in chunks (R5), here
/// and in the uniform structures below.
pub(super) fn chunkify(nodes: Vec<Node>) -> Vec<Node> {
    let mut out = Vec::new();
    let mut run: Vec<Node> = Vec::new();
    let flush = |run: &mut Vec<Node>, out: &mut Vec<Node>| {
        // Worth it when lanes' state passes between thread loops: two or more of them, or
        // one inside a loop.
        let worth = run.iter().map(Node::weight).sum::<usize>() > 1;
        if worth {
            out.push(Node::Chunk(std::mem::take(run)));
        } else {
            out.append(run);
        }
    };
    for n in nodes {
        let breaks = n.has_barrier()
            || n.escapes()
            || matches!(&n, Node::Uni { declares, .. } if !declares.is_empty());
        if breaks {
            flush(&mut run, &mut out);
            out.push(match n {
                Node::Scope(v) => Node::Scope(chunkify(v)),
                Node::Loop {
                    head,
                    body,
                    tail,
                    assigns,
                    divergent: false,
                } => Node::Loop {
                    head,
                    body: chunkify(body),
                    tail,
                    assigns,
                    divergent: false,
                },
                Node::If {
                    cond,
                    then,
                    els,
                    divergent: false,
                } => Node::If {
                    cond,
                    then: chunkify(then),
                    els: chunkify(els),
                    divergent: false,
                },
                n => n,
            });
        } else {
            run.push(n);
        }
    }
    flush(&mut run, &mut out);
    out
}

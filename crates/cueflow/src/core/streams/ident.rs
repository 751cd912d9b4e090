//! What the tracking layer knows of a stream: its identity, kind and ordering mode.
//!
//! The sanitizer's state ([`crate::core::tracking::history`], [`crate::core::tracking::track`]) takes this instead of the
//! whole stream ([`crate::core::streams::stream::StreamCore`], which holds one and derefs to it), so the
//! tracking files do not import the stream path above them (issue #15's core circle). It
//! imports nothing of that path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::contract::device::BackendStream;
use crate::core::tracking::clock::Actor;
use crate::types::StreamKind;

/// Identity and tracking flags of a stream, as the tracking layer sees it.
pub(crate) struct StreamIdent {
    /// Id within the device (0 is the legacy stream), as traces and reports show it.
    pub id: u64,
    /// Process-unique id of the stream in happens-before clocks.
    pub actor: Actor,
    pub backend: Arc<dyn BackendStream>,
    pub kind: StreamKind,
    pub priority: i32,
    pub name: Arc<str>,
    /// The device's spec (`host:1`, `cuda:0`), as race reports name it beside another
    /// device's stream (MD2).
    pub device: Arc<str>,
    /// Automatic ordering (AC5) for this stream.
    pub(crate) auto: AtomicBool,
    /// Automatic graphs (AG1) for this stream.
    pub(crate) auto_graph: AtomicBool,
    /// Whether the device's tracking state holds state of this stream to forget (RL2).
    pub(crate) tracked: AtomicBool,
}

impl StreamIdent {
    /// True while the stream orders its operations automatically (AC5).
    #[inline]
    pub fn auto(&self) -> bool {
        self.auto.load(Ordering::Relaxed)
    }

    /// True while the stream itself is in automatic-graph mode (AG1).
    #[inline]
    pub fn auto_graph(&self) -> bool {
        self.auto_graph.load(Ordering::Relaxed)
    }
}

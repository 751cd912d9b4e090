//! Context synchronizations and the backend's own driver captures kept apart: the driver
//! refuses `cuCtxSynchronize` while any stream of the context is capturing
//! (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`) and invalidates that capture, whatever thread
//! began it. The backend captures only while it instantiates a graph with an external
//! operation or a collective (G5, `graph_capture.rs`), on a scratch stream of the calling
//! thread, so without this a `Device::synchronize` on one thread made another thread's
//! instantiation fail, and failed itself (seen on an H200: the `interop` tests in parallel).
//!
//! One lock per context (kept with the context's [`Quiesce`](super::quiesce::Quiesce), shared
//! by every `Ctx` of a primary context): synchronizations take it shared (they run side by
//! side), a capture exclusively, so it begins once the synchronizations under way returned and
//! holds new ones until it ended. Other contexts are not held up: the ranks of a collective,
//! one GPU each, capture at once. A thread that synchronizes from inside its own capture (an
//! external operation's closure calling cueflow) does not take it: the driver's refusal is its
//! answer, as before.

use std::cell::Cell;

use parking_lot::RwLock;

use super::driver::{self, CuResult};

/// A context's gate.
#[derive(Default)]
pub(super) struct CaptureGate(RwLock<()>);

thread_local! {
    /// This thread holds the gate for a capture.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

impl CaptureGate {
    /// `cuCtxSynchronize` of the current context, whose gate this is (D2), outside its
    /// captures.
    pub fn synchronize_context(&self) -> CuResult<()> {
        if CAPTURING.with(Cell::get) {
            return driver::context::synchronize();
        }
        let _shared = self.0.read();
        driver::context::synchronize()
    }

    /// Run `capture` (a driver capture in this gate's context, begun and ended) with no
    /// synchronization of the context under way.
    pub fn capturing<T>(&self, capture: impl FnOnce() -> T) -> T {
        if CAPTURING.with(Cell::get) {
            return capture(); // Nested: the outer capture holds a gate.
        }
        let _exclusive = self.0.write();
        CAPTURING.with(|c| c.set(true));
        let _reset = Reset;
        capture()
    }
}

/// Lowers this thread's capturing flag when the capture ends, on every path.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        CAPTURING.with(|c| c.set(false));
    }
}

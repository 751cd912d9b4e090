//! Context synchronizations and the backend's own driver captures kept apart: the driver
//! refuses `cuCtxSynchronize` while any stream of the context is capturing
//! (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`) and invalidates that capture, whatever thread
//! began it. The backend captures only while it instantiates a graph with an external
//! operation or a collective (G5, `graph_capture.rs`), on a scratch stream of the calling
//! thread, so without this a `Device::synchronize` on one thread made another thread's
//! instantiation fail, and failed itself (seen on an H200: the `interop` tests in parallel).
//!
//! One process-wide lock: synchronizations take it shared (they run side by side, on any
//! device), a capture exclusively, so it begins once the synchronizations under way returned
//! and holds new ones until it ended. A thread that synchronizes from inside its own capture
//! (an external operation's closure calling cueflow) does not take it: the driver's refusal is
//! its answer, as before.

use std::cell::Cell;

use parking_lot::RwLock;

use super::driver::{self, CuResult};

static GATE: RwLock<()> = RwLock::new(());

thread_local! {
    /// This thread holds the gate for a capture.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

/// `cuCtxSynchronize` (D2: the context current), outside every capture of the process.
pub(super) fn synchronize_context() -> CuResult<()> {
    if CAPTURING.with(Cell::get) {
        return driver::context::synchronize();
    }
    let _shared = GATE.read();
    driver::context::synchronize()
}

/// Run `capture` (a driver capture begun and ended) with no context synchronization under way.
pub(super) fn capturing<T>(capture: impl FnOnce() -> T) -> T {
    if CAPTURING.with(Cell::get) {
        return capture(); // Nested: the outer capture holds the gate.
    }
    let _exclusive = GATE.write();
    CAPTURING.with(|c| c.set(true));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CAPTURING.with(|c| c.set(false));
        }
    }
    let _reset = Reset;
    capture()
}

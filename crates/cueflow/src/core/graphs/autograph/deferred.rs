//! The completion of a held call (rule 4 of the module): handed to the tracking layer at the
//! call, filled in with the backend's own when the call is issued.

use std::sync::{Arc, OnceLock, Weak};

use crate::backend::contract::device::{Done, DoneSignal};
use crate::error::Result;

/// What issues a device's held work (its automatic-graph state).
pub(crate) trait Settle: Send + Sync {
    /// Issue what is held and end the window (AG4).
    fn settle(&self) -> Result<()>;
}

/// A completion for a call the device holds back.
pub(crate) struct Deferred {
    /// `Some(done)` once issued; `None` inside when the call was dropped unissued (its issue
    /// failed with the device's sticky error): nothing to wait for.
    real: OnceLock<Option<Done>>,
    /// The device's state, to issue the held work when someone must wait for it.
    owner: Weak<dyn Settle>,
    /// The window generation (a new one for each part, `parts.rs`) and the call's place among
    /// the held calls, for dependencies inside one graph.
    pub gen: u64,
    pub entry: usize,
}

impl Deferred {
    pub fn new(owner: Weak<dyn Settle>, gen: u64, entry: usize) -> Arc<Deferred> {
        Arc::new(Deferred {
            real: OnceLock::new(),
            owner,
            gen,
            entry,
        })
    }

    /// Fill in what the call became (`None`: it was never issued).
    pub fn fill(&self, real: Option<Done>) {
        let _ = self.real.set(real);
    }

    /// True once the call was issued (or dropped).
    pub fn filled(&self) -> bool {
        self.real.get().is_some()
    }

    /// The backend's completion, once issued.
    pub fn real(&self) -> Option<&Done> {
        self.real.get().and_then(Option::as_ref)
    }
}

crate::backend::contract::downcast::as_any!(Deferred);

impl DoneSignal for Deferred {
    fn is_done(&self) -> bool {
        match self.real.get() {
            None => false,
            Some(None) => true,
            Some(Some(d)) => d.is_done(),
        }
    }

    fn known_done(&self) -> bool {
        match self.real.get() {
            None => false,
            Some(None) => true,
            Some(Some(d)) => d.known_done(),
        }
    }

    fn forward(&self) -> Option<&Done> {
        self.real()
    }
}

/// `done` as a held call's completion, if it is one.
#[inline]
pub(super) fn held(done: &Done) -> Option<&Deferred> {
    done.as_any().downcast_ref::<Deferred>()
}

/// Make sure the work behind `done` was issued (AG4: someone is about to wait for it): a
/// held call's device issues what it holds. Returns the completion to wait for, if any.
pub(crate) fn issued(done: &Done) -> Option<Done> {
    let Some(d) = held(done) else {
        return Some(done.clone());
    };
    if !d.filled() {
        if let Some(owner) = d.owner.upgrade() {
            let _ = owner.settle();
        }
    }
    d.real().cloned()
}

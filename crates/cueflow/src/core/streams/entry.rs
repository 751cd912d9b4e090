//! The entry layers of every stream call, written once (DESIGN principle 5). A call on a
//! stream passes, in this order:
//!
//! 0. the **host-function guard** (HF2): no blocking or enqueuing call from inside a host
//!    function;
//! 1. the **capture layer** (GR1, GR2): on a capturing stream the call is taken into the
//!    capture, or refused and the capture invalidated, or refused as a call no capture takes
//!    ([`AtCapture`]);
//! 2. **GR5**: work on the legacy default stream is refused while a capture in a mode that
//!    counts takes in a blocking stream;
//!
//! then tracking, trace and backend (`StreamCore::run_tracked`, a graph launch's
//! `core/graphs/launch.rs`). Each call — those of `core/streams/stream.rs` and `sync.rs`, and a
//! graph launch (`ExecCore::launch`) — states what it is at these layers and calls
//! [`StreamCore::enter`] once; none orders them itself.

use crate::core::devices::device::DeviceCore;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::streams::stream::StreamCore;
use crate::error::{Error, Result};
use crate::types::StreamKind;

/// What the capture layer does with a call on a capturing stream.
pub(crate) enum AtCapture<F> {
    /// Refused, invalidating the capture (GR2): `.0` names the call.
    Refuse(&'static str),
    /// A synchronous call: refused on a capturing stream and, as the capture modes in force
    /// say, anywhere on the device (GR2).
    RefuseSync(&'static str),
    /// A call no capture takes (a graph launch): refused on a capturing stream with
    /// [`Error::Unsupported`](crate::Error::Unsupported) naming `.0`; the capture goes on.
    Unsupported(&'static str),
    /// Taken into the capture: the function returns the call's result when the capture took
    /// the call, `None` when the call goes on to the device.
    Take(F),
}

/// The capture-layer function of the variants that take nothing.
pub(crate) type Untaken<T> = fn(&StreamCore) -> Option<Result<T>>;

/// The variants that take nothing, without naming the function type at each call.
impl AtCapture<Untaken<()>> {
    /// [`AtCapture::Refuse`]: refused, invalidating the capture; `what` names the call.
    pub(crate) const fn refuse(what: &'static str) -> Self {
        AtCapture::Refuse(what)
    }

    /// [`AtCapture::RefuseSync`]: a synchronous call, `what`.
    pub(crate) const fn refuse_sync(what: &'static str) -> Self {
        AtCapture::RefuseSync(what)
    }

    /// [`AtCapture::Unsupported`]: a call no capture takes, `what`.
    pub(crate) const fn unsupported(what: &'static str) -> Self {
        AtCapture::Unsupported(what)
    }
}

/// A capture's answer (`Ok(true)`: it took the call) as [`AtCapture::Take`] returns it.
#[inline]
pub(crate) fn taken(r: Result<bool>) -> Option<Result<()>> {
    match r {
        Ok(true) => Some(Ok(())),
        Ok(false) => None,
        Err(e) => Some(Err(e)),
    }
}

impl StreamCore {
    /// Pass the entry layers in order: the host-function guard for `call`, the capture layer
    /// (`at_capture`), and GR5 for work on the legacy stream (`legacy` names the work; `None`
    /// for calls that enqueue nothing). `Some(result)` when the capture took the call: the
    /// call ends there.
    #[inline]
    pub(crate) fn enter<T, F: FnOnce(&StreamCore) -> Option<Result<T>>>(
        &self,
        dev: &DeviceCore,
        call: &'static str,
        at_capture: AtCapture<F>,
        legacy: Option<&'static str>,
    ) -> Result<Option<T>> {
        check_not_in_host_fn(call)?;
        match at_capture {
            AtCapture::Refuse(what) => self.refuse_if_capturing(what)?,
            AtCapture::RefuseSync(what) => self.check_sync_call(dev, what)?,
            AtCapture::Unsupported(what) => self.refuse_unsupported(what)?,
            AtCapture::Take(take) => {
                if let Some(r) = take(self) {
                    return r.map(Some);
                }
            }
        }
        if let Some(what) = legacy {
            self.check_legacy(dev, what)?;
        }
        Ok(None)
    }

    /// GR5: work on the legacy stream during a capture that takes in a blocking stream.
    #[inline]
    pub(crate) fn check_legacy(&self, dev: &DeviceCore, what: &str) -> Result<()> {
        if self.kind == StreamKind::Legacy {
            dev.captures.check_legacy_work(what)?;
        }
        Ok(())
    }

    /// A capturing stream refuses `what`, which no capture takes; the capture goes on.
    #[cold]
    fn refuse_unsupported(&self, what: &str) -> Result<()> {
        match self.capture() {
            Some(_) => Err(Error::Unsupported(what.into())),
            None => Ok(()),
        }
    }

    /// GR2: a capturing stream refuses `what` and its capture is invalidated.
    pub(crate) fn refuse_if_capturing(&self, what: &str) -> Result<()> {
        if let Some(session) = self.capture() {
            return Err(session.invalidate(what));
        }
        Ok(())
    }

    /// GR2: synchronous calls are refused on a capturing stream and, depending on the capture
    /// modes in force, anywhere on the device.
    pub(crate) fn check_sync_call(&self, dev: &DeviceCore, what: &str) -> Result<()> {
        self.refuse_if_capturing(what)?;
        dev.captures.check_unsafe_call(what)
    }
}

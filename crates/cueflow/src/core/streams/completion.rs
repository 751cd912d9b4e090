//! `.await` on device work: [`Completion`] is a future that resolves when the work a stream or
//! an event stands for has completed, with the device's sticky error if it faulted.
//!
//! A completion snapshots its work at creation, like an event wait (EV2, EV4). It is woken by
//! the backend's own completion signal: a host function enqueued right after the snapshot (CUDA:
//! `cuLaunchHostFunc`; host backend: its host engine) resolves it and wakes the task the moment
//! the stream reaches it — nothing polls. A device that faults never runs that host function,
//! so each completion also records a private event, and a per-device backstop looks at the
//! pending ones every [`BACKSTOP`] to deliver the sticky error (KN2) instead of leaving the task
//! waiting for ever. The backstop sleeps when nothing is pending and exits after a while idle.
//!
//! `CUEFLOW_WAKE=watcher` restores the earlier way, for comparison: no host function, the
//! watcher polls the events from 20 µs apart up to 1 ms apart.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::contract::device::BackendStream;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::op::{HostCall, Op, Work};
use crate::core::tracking::call::Seen;
use crate::error::Result;

/// How often the backstop looks for completions whose device faulted.
pub(crate) const BACKSTOP: Duration = Duration::from_millis(10);

/// How completions are woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WakeMode {
    /// A host function in stream order (the default).
    HostFn,
    /// A thread polling events (`CUEFLOW_WAKE=watcher`).
    Watcher,
}

/// The process's wake mode, read once from `CUEFLOW_WAKE`.
pub(crate) static WAKE_MODE: LazyLock<WakeMode> = LazyLock::new(|| {
    if crate::config::wake_by_watcher() {
        WakeMode::Watcher
    } else {
        WakeMode::HostFn
    }
});

struct Shared {
    result: Option<Result<()>>,
    /// Set once resolved (the result may have been taken by `poll` since).
    resolved: bool,
    waker: Option<Waker>,
}

/// Resolve `shared` with `r` unless it was resolved already (the host function and the
/// backstop may both try), and wake its task.
fn resolve(shared: &Mutex<Shared>, r: Result<()>) {
    let waker = {
        let mut s = shared.lock();
        if s.resolved {
            return;
        }
        s.resolved = true;
        s.result = Some(r);
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

/// A future for device work. Resolves to `Ok(())` when the work completed, or to the device's
/// sticky error (KN2).
///
/// ```
/// # use cueflow::{Device, Stream, DeviceBuffer};
/// # let dev = Device::host()?;
/// let s = Stream::new(&dev)?;
/// let d = DeviceBuffer::<f32>::new(&dev, 1 << 16)?;
/// cueflow::kernels::fill(&s, &d, 1.0)?;
/// let done = s.completion()?;          // snapshot of the work enqueued so far
/// // ... in an async fn: done.await?;
/// # drop(done);
/// # Ok::<(), cueflow::Error>(())
/// ```
pub struct Completion {
    shared: Arc<Mutex<Shared>>,
    /// What resolving observes, for the sanitizer's happens-before (AC2).
    seen: Option<(Weak<dyn CompletionDevice>, Seen)>,
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut s = self.shared.lock();
        match s.result.take() {
            Some(r) => {
                drop(s);
                if r.is_ok() {
                    // AC2: the task that sees the work done is ordered after it.
                    if let Some((dev, seen)) = self.seen.take() {
                        if let Some(dev) = dev.upgrade() {
                            dev.observed(seen);
                        }
                    }
                }
                Poll::Ready(r)
            }
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// The device as a completion sees it once it resolves: its sanitizer state (AC2) and its
/// sticky error (ER2). The device's core implements it, so this file need not import it.
pub(crate) trait CompletionDevice: Send + Sync {
    /// The host observed `seen` (AC2).
    fn observed(&self, seen: Seen);
    /// The sticky error that poisoned the device, if any (ER2).
    fn sticky(&self) -> Option<crate::error::Error>;
}

impl Completion {
    /// A completion of work that was done when it was made (an event already complete, RL4).
    pub(crate) fn resolved<D: CompletionDevice + 'static>(dev: &Arc<D>, seen: Seen) -> Completion {
        let dev: Weak<D> = Arc::downgrade(dev);
        let dev: Weak<dyn CompletionDevice> = dev;
        Completion {
            shared: Arc::new(Mutex::new(Shared {
                result: Some(Ok(())),
                resolved: true,
                waker: None,
            })),
            seen: Some((dev, seen)),
        }
    }

    /// Block the calling thread until the work completed (for code outside an executor).
    pub fn wait(self) -> Result<()> {
        crate::core::streams::hostfn::check_not_in_host_fn("Completion::wait")?;
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut me = self;
        loop {
            if let Poll::Ready(r) = Pin::new(&mut me).poll(&mut cx) {
                return r;
            }
            std::thread::park_timeout(Duration::from_millis(50));
        }
    }
}

struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

struct Pending {
    event: Arc<dyn BackendEvent>,
    /// Weak: a completion dropped before it resolved is simply forgotten.
    shared: Weak<Mutex<Shared>>,
    since: Instant,
}

/// The per-device watcher that resolves completions.
#[derive(Default)]
pub(crate) struct Watcher {
    inner: Arc<WatcherInner>,
}

#[derive(Default)]
struct WatcherInner {
    queue: Mutex<WatchQueue>,
    cv: Condvar,
}

struct WatchQueue {
    pending: Vec<Pending>,
    running: bool,
    mode: WakeMode,
    /// Set when the device is dropped: the thread exits once nothing is pending (RL2).
    closed: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Default for WatchQueue {
    fn default() -> Self {
        WatchQueue {
            pending: Vec::new(),
            running: false,
            mode: *WAKE_MODE,
            closed: false,
            thread: None,
        }
    }
}

impl Drop for Watcher {
    /// The device is gone: the thread exits as soon as nothing is pending, and is joined when
    /// that is now (so devices opened and dropped in a loop do not leave a thread each for a
    /// second, issue 16 item 9).
    fn drop(&mut self) {
        let thread = {
            let mut q = self.inner.queue.lock();
            q.closed = true;
            self.inner.cv.notify_all();
            // Completions resolved or dropped since the thread last looked hold it no more.
            q.pending.retain(|p| {
                p.shared
                    .upgrade()
                    .is_some_and(|shared| !shared.lock().resolved)
            });
            if q.pending.is_empty() {
                q.thread.take()
            } else {
                None
            }
        };
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Watcher {
    /// A completion for the work `event` captured on `stream` (just recorded there), observing
    /// `seen` when it resolves. In [`WakeMode::HostFn`] a host function enqueued on `stream`
    /// resolves it and the event is the backstop's; in [`WakeMode::Watcher`] the event is
    /// polled.
    pub fn watch<D: CompletionDevice + 'static>(
        &self,
        event: Arc<dyn BackendEvent>,
        stream: &dyn BackendStream,
        dev: &Arc<D>,
        seen: Seen,
    ) -> Result<Completion> {
        let dev: Weak<D> = Arc::downgrade(dev);
        let dev: Weak<dyn CompletionDevice> = dev;
        let shared = Arc::new(Mutex::new(Shared {
            result: None,
            resolved: false,
            waker: None,
        }));
        let mode = *WAKE_MODE;
        if mode == WakeMode::HostFn {
            let (target, device) = (Arc::downgrade(&shared), dev.clone());
            let notify = move || {
                // Only the completion's own state is touched here: no runtime calls (HF2). A
                // dropped completion has nothing to wake.
                if let Some(shared) = target.upgrade() {
                    let sticky = device.upgrade().and_then(|d| d.sticky());
                    resolve(&shared, sticky.map_or(Ok(()), Err));
                }
            };
            stream.submit(
                Op::labelled(
                    Work::HostFn(Box::new(HostCall::new(
                        crate::core::streams::hostfn::guarded(notify),
                    ))),
                    "completion",
                ),
                &[],
                false,
            )?;
        }
        let mut q = self.inner.queue.lock();
        q.pending.push(Pending {
            event,
            shared: Arc::downgrade(&shared),
            since: Instant::now(),
        });
        q.mode = mode;
        if !q.running {
            let inner = self.inner.clone();
            let spawned = std::thread::Builder::new()
                .name("cueflow-watcher".into())
                .spawn(move || watch_loop(&inner));
            match spawned {
                Ok(t) => {
                    q.running = true;
                    // A thread that exited after a while idle was not joined: join it now.
                    if let Some(old) = q.thread.replace(t) {
                        drop(q);
                        let _ = old.join();
                    }
                }
                Err(e) => {
                    q.pending.pop();
                    return Err(crate::error::Error::OutOfResources(format!(
                        "could not start the completion watcher thread: {e}"
                    )));
                }
            }
        } else if mode == WakeMode::Watcher {
            self.inner.cv.notify_one();
        }
        Ok(Completion {
            shared,
            seen: Some((dev, seen)),
        })
    }
}

/// The backstop (or, in [`WakeMode::Watcher`], the waker): resolve pending completions whose
/// event reports done or an error; forget those resolved or dropped meanwhile.
fn watch_loop(inner: &WatcherInner) {
    let mut idle_since = Instant::now();
    let mut nap = Duration::from_micros(20);
    loop {
        let (batch, mode) = {
            let mut q = inner.queue.lock();
            (std::mem::take(&mut q.pending), q.mode)
        };
        let mut still = Vec::new();
        let mut woke = false;
        for p in batch {
            let Some(shared) = p.shared.upgrade() else {
                continue;
            };
            if shared.lock().resolved {
                continue;
            }
            // The host-function path resolves finished work itself; the backstop only
            // delivers faults, and looks at a completion once it waited a while.
            if mode == WakeMode::HostFn && p.since.elapsed() < BACKSTOP {
                still.push(p);
                continue;
            }
            match p.event.query() {
                Ok(false) => still.push(p),
                done => {
                    woke = true;
                    resolve(&shared, done.map(|_| ()));
                }
            }
        }
        let mut q = inner.queue.lock();
        let progressed = woke || still.is_empty() || !q.pending.is_empty();
        q.pending.extend(still);
        if q.pending.is_empty() {
            if q.closed || idle_since.elapsed() > Duration::from_secs(1) {
                q.running = false;
                return;
            }
            inner.cv.wait_for(&mut q, Duration::from_millis(200));
            nap = Duration::from_micros(20);
            continue;
        }
        idle_since = Instant::now();
        drop(q);
        if mode == WakeMode::HostFn {
            std::thread::sleep(BACKSTOP);
            continue;
        }
        std::thread::sleep(nap);
        if !progressed {
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::{Device, Stream};

    use super::*;

    #[test]
    fn a_dropped_completion_frees_its_state_at_once() {
        let dev = Device::host().unwrap();
        let s = Stream::builder(&dev).non_blocking().build().unwrap();
        let open = Arc::new(AtomicBool::new(false));
        let gate = open.clone();
        s.host_fn(move || {
            while !gate.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_micros(100));
            }
        })
        .unwrap();
        let c = s.completion().unwrap();
        let state = Arc::downgrade(&c.shared);
        drop(c);
        // Neither the host function nor the backstop holds the state: nothing leaks while the
        // stream is held, and nothing is left to wake.
        assert!(state.upgrade().is_none());
        open.store(true, Ordering::SeqCst);
        s.synchronize().unwrap();
    }
}

//! `.await` on device work: [`Completion`] is a future that resolves when the work a stream or
//! an event stands for has completed, with the device's sticky error if it faulted.
//!
//! A completion snapshots its work at creation, like an event wait (EV2, EV4): it records a
//! private timing-free event, and a per-device watcher thread polls the pending events and wakes
//! the tasks whose work is done. The watcher sleeps when nothing is pending and exits after a
//! while idle, so programs that never await pay nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::device::DeviceCore;
use super::track::Seen;
use crate::backend::BackendEvent;
use crate::error::Result;

struct Shared {
    result: Option<Result<()>>,
    waker: Option<Waker>,
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
    seen: Option<(Weak<DeviceCore>, Seen)>,
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
                            dev.track.observed(seen);
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

impl Completion {
    /// Block the calling thread until the work completed (for code outside an executor).
    pub fn wait(self) -> Result<()> {
        crate::core::hostfn::check_not_in_host_fn("Completion::wait")?;
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
    shared: Arc<Mutex<Shared>>,
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

#[derive(Default)]
struct WatchQueue {
    pending: Vec<Pending>,
    running: bool,
}

impl Watcher {
    /// A completion for the work `event` captured, observing `seen` when it resolves.
    pub fn watch(
        &self,
        event: Arc<dyn BackendEvent>,
        dev: &Arc<DeviceCore>,
        seen: Seen,
    ) -> Completion {
        let shared = Arc::new(Mutex::new(Shared {
            result: None,
            waker: None,
        }));
        let mut q = self.inner.queue.lock();
        q.pending.push(Pending {
            event,
            shared: shared.clone(),
        });
        if !q.running {
            q.running = true;
            let inner = self.inner.clone();
            std::thread::Builder::new()
                .name("cueflow-watcher".into())
                .spawn(move || watch_loop(&inner))
                .expect("spawning the completion watcher");
        } else {
            self.inner.cv.notify_one();
        }
        Completion {
            shared,
            seen: Some((Arc::downgrade(dev), seen)),
        }
    }
}

fn watch_loop(inner: &WatcherInner) {
    let mut idle_since = Instant::now();
    let mut nap = Duration::from_micros(20);
    loop {
        let batch = std::mem::take(&mut inner.queue.lock().pending);
        let mut still = Vec::new();
        for p in batch {
            match p.event.query() {
                Ok(false) => still.push(p),
                done => {
                    let mut s = p.shared.lock();
                    s.result = Some(done.map(|_| ()));
                    if let Some(w) = s.waker.take() {
                        w.wake();
                    }
                }
            }
        }
        let mut q = inner.queue.lock();
        let progressed = still.is_empty() || q.pending.is_empty();
        q.pending.extend(still);
        if q.pending.is_empty() {
            if idle_since.elapsed() > Duration::from_secs(1) {
                q.running = false;
                return;
            }
            inner.cv.wait_for(&mut q, Duration::from_millis(200));
            nap = Duration::from_micros(20);
            continue;
        }
        idle_since = Instant::now();
        drop(q);
        std::thread::sleep(nap);
        if !progressed {
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }
}

//! The references the API costs are measured against: the least a threaded runtime can do.
//! [`RefQueue`] hands boxed closures to a worker thread through an `mpsc` channel (what an
//! enqueue must at least cost); [`PingPong`] bounces a counter off a spinning thread (what a
//! hand-off to another thread and back must at least cost).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// A closure for the reference work queue.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The enqueue reference: a worker thread running boxed closures from an mpsc channel.
pub(super) struct RefQueue {
    tx: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
}

impl RefQueue {
    pub(super) fn new() -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = std::thread::spawn(move || {
            for job in rx {
                job();
            }
        });
        RefQueue {
            tx: Some(tx),
            worker: Some(worker),
        }
    }

    pub(super) fn send(&self, job: Job) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(job);
        }
    }

    /// Wait until every job sent so far has run.
    pub(super) fn drain(&self) {
        let (done_tx, done_rx) = mpsc::channel();
        self.send(Box::new(move || {
            let _ = done_tx.send(());
        }));
        let _ = done_rx.recv();
    }
}

impl Drop for RefQueue {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// The round-trip reference: a worker thread spinning on an atomic request counter that
/// answers on another; the caller spins for the answer. The least a hand-off to another thread
/// and back can cost. The worker spins only while this exists.
pub(super) struct PingPong {
    req: Arc<AtomicU64>,
    ack: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
}

impl PingPong {
    pub(super) fn new() -> Self {
        let (req, ack) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, a, st) = (req.clone(), ack.clone(), stop.clone());
        let worker = std::thread::spawn(move || {
            let mut last = 0;
            while !st.load(Ordering::Relaxed) {
                let n = r.load(Ordering::Acquire);
                if n != last {
                    last = n;
                    a.store(n, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        PingPong {
            req,
            ack,
            stop,
            worker: Some(worker),
        }
    }

    pub(super) fn round_trip(&self) {
        let n = self.req.fetch_add(1, Ordering::AcqRel) + 1;
        while self.ack.load(Ordering::Acquire) != n {
            std::hint::spin_loop();
        }
    }
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

//! Resources under load (RL1, RL4): bounded queues and completions in their own order. The
//! memory and thread figures of RL2 and RL3 live in `tests/soak.rs` and `tests/reliability/`
//! (they need a process of their own to measure), RL5 in `tests/reliability/faults.rs`.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use cueflow::{kernels, Device, Event, Stream};

/// RL1: at the queue bound an enqueue waits for the stream's oldest work instead of growing the
/// queue: with room for two operations behind a 300 ms kernel, the third enqueue returns only
/// once that kernel is done.
pub fn rl1_a_full_queue_makes_an_enqueue_wait(dev: &Device) {
    dev.set_queue_depth(2);
    assert_eq!(dev.queue_depth(), 2);
    let s = Stream::new(dev).unwrap();
    kernels::spin(&s, Duration::from_millis(300), 1).unwrap();
    let t = Instant::now();
    for _ in 0..4 {
        kernels::empty(&s).unwrap();
    }
    let waited = t.elapsed();
    s.synchronize().unwrap();
    assert!(
        waited >= Duration::from_millis(150),
        "four enqueues behind a 300 ms kernel with room for two returned after {waited:?}"
    );
}

/// RL4: a completion resolves when its own work is done, whatever other work is pending: the
/// future of an event recorded after a short kernel resolves while another stream still runs
/// a long one.
pub fn rl4_a_completion_resolves_in_its_own_order(dev: &Device) {
    let busy = Stream::new(dev).unwrap();
    let s = Stream::new(dev).unwrap();
    kernels::spin(&busy, Duration::from_millis(600), 1).unwrap();
    let mine = Event::new(dev).unwrap();
    kernels::empty(&s).unwrap();
    s.record_event(&mine).unwrap();
    let t = Instant::now();
    let mut fut = pin!(mine.completion().unwrap());
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
            r.unwrap();
            break;
        }
        assert!(
            t.elapsed() < Duration::from_millis(400),
            "the completion of a done event waited behind another stream's 600 ms kernel"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    busy.synchronize().unwrap();
}

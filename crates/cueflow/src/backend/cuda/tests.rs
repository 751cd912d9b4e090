//! Overhead of the backend against raw driver calls on the same device, kernel and streams:
//! kernel launch, event record, stream wait and launch + synchronize (the targets).
//! The raw side calls the driver layer's wrappers, which are `#[inline]` around the driver's
//! function: the same calls a program makes without cueflow. Prints a table; asserts nothing
//! about time (benchmarks are not tests). Prints `SKIP` without CUDA. Run on a GPU:
//! `cargo test --release --lib backend::cuda -- --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUevent_flags, CUstream_flags};

use super::device::CudaBackend;
use super::driver;
use super::launch::prepare;
use crate::backend::contract::device::Backend;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::kernel::Launch;
use crate::backend::contract::op::{Op, Work};
use crate::types::EventFlags;
use crate::types::{StreamDesc, StreamKind};
use crate::{kernels, Device, Event, Stream};

const REPS: u32 = 10_000;
const ROUNDS: u32 = 1_000;

/// Per-call time of raw, backend and API variants: five interleaved rounds of `n` calls each,
/// the best round of each variant (interleaving keeps drift from favouring one of them).
fn best3(
    n: u32,
    raw: &mut dyn FnMut(u32),
    be: &mut dyn FnMut(u32),
    api: &mut dyn FnMut(u32),
) -> (Duration, Duration, Duration) {
    let mut best = [Duration::MAX; 3];
    for _ in 0..5 {
        for (i, slot) in best.iter_mut().enumerate() {
            let t = Instant::now();
            match i {
                0 => raw(n),
                1 => be(n),
                _ => api(n),
            }
            *slot = (*slot).min(t.elapsed() / n);
        }
    }
    (best[0], best[1], best[2])
}

#[test]
fn overheads_against_raw_driver_calls() {
    if let Err(why) = driver::library::load() {
        println!("SKIP: {why}");
        return;
    }
    let b = match CudaBackend::open(u64::MAX - 7, 0) {
        Ok(b) => b,
        Err(e) => {
            println!("SKIP: {e}");
            return;
        }
    };
    let sh = b.shared.clone();
    sh.enter().unwrap();
    let launch = Launch::new(
        kernels::EMPTY.inner.clone(),
        [1, 1, 1],
        [1, 1, 1],
        0,
        Arc::from(Vec::new()),
    );
    let k = prepare(&sh, &launch).unwrap();
    // Context current (entered above).
    let raw = driver::stream::create(CUstream_flags::CU_STREAM_NON_BLOCKING, 0).unwrap();
    let raw_launch = || {
        // SAFETY: `k.func` is loaded; the empty kernel takes no parameters; `raw` is live.
        unsafe { driver::module::launch(k.func, [1; 3], [1; 3], 0, raw, std::ptr::null_mut()) }
            .unwrap();
    };
    let raw_sync = || driver::stream::synchronize(raw).unwrap();
    let bs = b
        .create_stream(StreamDesc {
            kind: StreamKind::NonBlocking,
            priority: 0,
        })
        .unwrap();
    let dev = Device::cuda(0).unwrap();
    let s = Stream::builder(&dev).non_blocking().build().unwrap();
    kernels::empty(&s).unwrap();
    s.synchronize().unwrap();

    let mut rows: Vec<(&str, Duration, Duration, Duration)> = Vec::new();

    // Kernel launch (throughput of back-to-back empty launches).
    let (a, b_, c) = best3(
        REPS,
        &mut |n| {
            (0..n).for_each(|_| raw_launch());
            raw_sync();
        },
        &mut |n| {
            for _ in 0..n {
                bs.submit(Op::new(Work::Launch(launch.clone())), &[], false)
                    .unwrap();
            }
            bs.synchronize().unwrap();
        },
        &mut |n| {
            (0..n).for_each(|_| kernels::empty(&s).unwrap());
            s.synchronize().unwrap();
        },
    );
    rows.push(("launch (+final sync)", a, b_, c));

    // Event record.
    let ev = driver::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING as u32).unwrap();
    let no_timing = EventFlags {
        timing: false,
        ..Default::default()
    };
    let bev: Arc<dyn BackendEvent> = b.create_event(no_timing).unwrap();
    let aev = Event::with_flags(&dev, no_timing).unwrap();
    let (a, b_, c) = best3(
        REPS,
        &mut |n| (0..n).for_each(|_| driver::event::record(ev, raw).unwrap()),
        &mut |n| (0..n).for_each(|_| bs.record(&bev).unwrap()),
        &mut |n| (0..n).for_each(|_| s.record_event(&aev).unwrap()),
    );
    rows.push(("event record", a, b_, c));

    // Stream wait event (on another stream).
    let raw2 = driver::stream::create(CUstream_flags::CU_STREAM_NON_BLOCKING, 0).unwrap();
    let bs2 = b
        .create_stream(StreamDesc {
            kind: StreamKind::NonBlocking,
            priority: 0,
        })
        .unwrap();
    let s2 = Stream::builder(&dev).non_blocking().build().unwrap();
    let (a, b_, c) = best3(
        REPS,
        &mut |n| (0..n).for_each(|_| driver::stream::wait_event(raw2, ev).unwrap()),
        &mut |n| (0..n).for_each(|_| bs2.wait(&bev).unwrap()),
        &mut |n| (0..n).for_each(|_| s2.wait_event(&aev).unwrap()),
    );
    rows.push(("stream wait event", a, b_, c));

    // Launch + synchronize round trip.
    let (a, b_, c) = best3(
        ROUNDS,
        &mut |n| {
            for _ in 0..n {
                raw_launch();
                raw_sync();
            }
        },
        &mut |n| {
            for _ in 0..n {
                bs.submit(Op::new(Work::Launch(launch.clone())), &[], false)
                    .unwrap();
                bs.synchronize().unwrap();
            }
        },
        &mut |n| {
            for _ in 0..n {
                kernels::empty(&s).unwrap();
                s.synchronize().unwrap();
            }
        },
    );
    rows.push(("launch + sync", a, b_, c));

    println!(
        "{:<22} {:>10} {:>10} {:>8} {:>10} {:>8}",
        "per call", "raw", "backend", "ratio", "api", "ratio"
    );
    for (name, r, be, api) in rows {
        let ratio = |x: Duration| x.as_secs_f64() / r.as_secs_f64();
        println!(
            "{name:<22} {:>10.3?} {:>10.3?} {:>8.3} {:>10.3?} {:>8.3}",
            r,
            be,
            ratio(be),
            api,
            ratio(api)
        );
    }
    sh.enter().unwrap();
    driver::event::destroy(ev);
    driver::stream::destroy(raw);
    driver::stream::destroy(raw2);
}

/// Q2: a stream whose batches end often (here nine kernels in turn, one more than a batch may
/// hold, so a seal every eight launches) reuses the markers of completed batches instead of
/// creating an event per seal (it once created ~1 per seal, destroying them again when the
/// full queue was retired).
#[test]
fn alternating_kernels_reuse_markers() {
    if let Err(why) = driver::library::load() {
        println!("SKIP: {why}");
        return;
    }
    let b = match CudaBackend::open(u64::MAX - 8, 0) {
        Ok(b) => b,
        Err(e) => {
            println!("SKIP: {e}");
            return;
        }
    };
    b.shared.enter().unwrap();
    let launch = |k: &crate::Kernel, args: Vec<crate::backend::contract::kernel::KernelArg>| {
        Op::new(Work::Launch(Launch::new(
            k.inner.clone(),
            [1, 1, 1],
            [1, 1, 1],
            0,
            Arc::from(args),
        )))
    };
    // Nine kernels (one function, nine names: distinct kernels to the queue).
    const SRC: &str = "extern \"C\" __global__ void q2_empty() {}";
    let ks: Vec<crate::Kernel> = (0..=super::queue::BATCH_KERNELS)
        .map(|i| {
            crate::Kernel::new(format!("q2_empty_{i}"))
                .cuda_source(SRC, "q2_empty")
                .build()
        })
        .collect();
    let bs = b
        .create_stream(StreamDesc {
            kind: StreamKind::NonBlocking,
            priority: 0,
        })
        .unwrap();
    let cs: &super::stream::CudaStream =
        crate::backend::contract::downcast::downcast(bs.as_ref(), "stream").unwrap();
    let n = 20_000;
    for i in 0..n {
        bs.submit(launch(&ks[i % ks.len()], Vec::new()), &[], false)
            .unwrap();
    }
    bs.synchronize().unwrap();
    let created = cs.markers_created();
    println!("{n} launches of nine kernels in turn: {created} marker events created");
    assert!(
        created <= n as u64 / 20,
        "{created} marker events created for {n} launches (each seal should reuse a retired one)"
    );
}

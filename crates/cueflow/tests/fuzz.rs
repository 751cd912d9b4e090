//! A fuzzer of whole programs (issue 16): proptest generates random programs of streams, events
//! (record, wait; the legacy default stream among them), copies (device, pinned), kernels (the
//! built-ins), host functions, host
//! writes, stream-ordered temporaries (alloc, use, free), captures (instantiated and launched)
//! and dropped streams, runs them on the host backend with the sanitizer in error mode, and
//! checks every buffer against a sequential reference model: the program's operations applied
//! one after another in the order they were enqueued.
//!
//! Three orderings of one program:
//! - **auto**: device-wide automatic ordering (AC5). Every call must be accepted, nothing
//!   reported, and the result must be the sequential one.
//! - **ordered**: explicit events only, which the harness inserts so that every operation is
//!   ordered after the one enqueued before it (a full ordering). Likewise.
//! - **random**: only the program's own events and synchronizations. The sanitizer refuses
//!   each operation that would race (AC4, error mode: nothing enqueued); the model skips
//!   exactly those, and the result must be the sequential one of the accepted operations —
//!   so a race the sanitizer missed, a wrong ordering, or two conflicting operations run at
//!   once (AC6) shows up as a wrong value.
//!
//! And with automatic graphs (AG1–AG6) on the device: a window of steps repeated between
//! device synchronizations, changed partway (one step replaced from some repetition on), under
//! automatic ordering and under explicit events; the result must be the sequential one, as
//! without the mode.
//!
//! `PROPTEST_CASES` sets the cases per ordering (default 16, a few seconds in CI);
//! `scripts/fuzz.sh` runs long. Failures are kept in `tests/fuzz.proptest-regressions` and
//! replayed first on every run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Error, Event, PinnedBuffer, SanitizeMode, Stream,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

/// Elements of each buffer; a region is the whole buffer or one of its quarters.
const N: usize = 64;
const Q: usize = N / 4;
/// Streams of a program: the first blocking, the next two non-blocking, the last the legacy
/// default stream (ST4: it waits for the blocking ones, and they for it).
const STREAMS: usize = 4;
const LEGACY: usize = STREAMS - 1;
const EVENTS: usize = 3;
/// Device buffers; buffer `DEVICE` is the pinned one.
const DEVICE: usize = 3;
const BUFFERS: usize = DEVICE + 1;

/// Part of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    buf: usize,
    /// `None`: the whole buffer; `Some(q)`: quarter `q`.
    quarter: Option<usize>,
}

impl Loc {
    fn range(self) -> std::ops::Range<usize> {
        match self.quarter {
            None => 0..N,
            Some(q) => q * Q..(q + 1) * Q,
        }
    }

    fn overlaps(self, o: Loc) -> bool {
        let (a, b) = (self.range(), o.range());
        self.buf == o.buf && a.start < b.end && b.start < a.end
    }
}

/// Work that a stream runs (also the body of a capture).
#[derive(Clone, Debug)]
enum Work {
    Fill {
        dst: Loc,
        v: i8,
    },
    Scale {
        dst: Loc,
        f: f32,
    },
    Saxpy {
        a: f32,
        x: Loc,
        y: Loc,
    },
    Copy {
        dst: Loc,
        src: Loc,
    },
    HostFn,
    /// alloc_async a quarter-sized temporary, fill it with `v`, copy it to `dst`, free it.
    Temp {
        v: i8,
        dst: Loc,
    },
}

/// One step of a program.
#[derive(Clone, Debug)]
enum Step {
    Do {
        s: usize,
        w: Work,
    },
    Record {
        s: usize,
        e: usize,
    },
    Wait {
        s: usize,
        e: usize,
    },
    SyncStream {
        s: usize,
    },
    SyncEvent {
        e: usize,
    },
    SyncDevice,
    /// Write `v` into a range of the pinned buffer from the host (MM3: waits).
    HostWrite {
        quarter: Option<usize>,
        v: i8,
    },
    /// Capture `body` on stream `s`, instantiate, and launch it `launches` times there.
    Capture {
        s: usize,
        body: Vec<Work>,
        launches: usize,
    },
    /// Drop stream `s` (its work still runs, ST10) and make a new one in its place.
    Replace {
        s: usize,
    },
}

/// A location on the device (`device_only`) or anywhere; a quarter, the whole buffer, or
/// either (`quarter`: `Some(true)`, `Some(false)`, `None`).
fn loc(device_only: bool, quarter: Option<bool>) -> impl Strategy<Value = Loc> {
    let bufs = if device_only { DEVICE } else { BUFFERS };
    let quarter = match quarter {
        Some(true) => (0..4usize).prop_map(Some).boxed(),
        Some(false) => Just(None).boxed(),
        None => prop_oneof![Just(None), (0..4usize).prop_map(Some)].boxed(),
    };
    (0..bufs, quarter).prop_map(|(buf, quarter)| Loc { buf, quarter })
}

/// Two locations of one size that do not overlap and are not both pinned, the first on the
/// device if `device_dst`, the second if `device_src`. Built, not filtered: a long run would
/// otherwise exhaust proptest's rejects.
fn pair(device_dst: bool, device_src: bool) -> impl Strategy<Value = (Loc, Loc)> {
    any::<bool>()
        .prop_flat_map(move |q| (loc(device_dst, Some(q)), loc(device_src, Some(q))))
        .prop_map(|(a, mut b)| {
            if a.buf == DEVICE && b.buf == DEVICE {
                b.buf = 0;
            }
            if a.overlaps(b) {
                // Both on the device here: move the second to the next device buffer.
                b.buf = (b.buf + 1) % DEVICE;
            }
            (a, b)
        })
}

fn work() -> impl Strategy<Value = Work> {
    prop_oneof![
        3 => (loc(true, None), -8i8..8).prop_map(|(dst, v)| Work::Fill { dst, v }),
        2 => (loc(true, None), prop_oneof![Just(2.0f32), Just(0.5), Just(-1.0)])
            .prop_map(|(dst, f)| Work::Scale { dst, f }),
        2 => (pair(true, true), prop_oneof![Just(1.0f32), Just(2.0), Just(-1.0)])
            .prop_map(|((y, x), a)| Work::Saxpy { a, x, y }),
        3 => pair(false, false).prop_map(|(dst, src)| Work::Copy { dst, src }),
        1 => Just(Work::HostFn),
        1 => ((-8i8..8), loc(false, Some(true))).prop_map(|(v, dst)| Work::Temp { v, dst }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (0..STREAMS, work()).prop_map(|(s, w)| Step::Do { s, w }),
        3 => (0..STREAMS, 0..EVENTS).prop_map(|(s, e)| Step::Record { s, e }),
        3 => (0..STREAMS, 0..EVENTS).prop_map(|(s, e)| Step::Wait { s, e }),
        1 => (0..STREAMS).prop_map(|s| Step::SyncStream { s }),
        1 => (0..EVENTS).prop_map(|e| Step::SyncEvent { e }),
        1 => Just(Step::SyncDevice),
        1 => (prop_oneof![Just(None), (0..4usize).prop_map(Some)], -8i8..8)
            .prop_map(|(quarter, v)| Step::HostWrite { quarter, v }),
        1 => (0..STREAMS, prop::collection::vec(work(), 1..5), 1..3usize)
            .prop_map(|(s, body, launches)| Step::Capture { s, body, launches }),
        1 => (0..STREAMS).prop_map(|s| Step::Replace { s }),
    ]
}

/// How a program is ordered (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Auto,
    Ordered,
    Random,
}

/// The sequential reference: every buffer's values.
struct Model {
    bufs: Vec<Vec<f32>>,
    host_fns: usize,
}

impl Model {
    fn apply(&mut self, w: &Work) {
        match *w {
            Work::Fill { dst, v } => self.bufs[dst.buf][dst.range()].fill(v as f32),
            Work::Scale { dst, f } => {
                for x in &mut self.bufs[dst.buf][dst.range()] {
                    *x *= f;
                }
            }
            Work::Saxpy { a, x, y } => {
                let xs: Vec<f32> = self.bufs[x.buf][x.range()].to_vec();
                for (yv, xv) in self.bufs[y.buf][y.range()].iter_mut().zip(xs) {
                    *yv = a.mul_add(xv, *yv);
                }
            }
            Work::Copy { dst, src } => {
                let xs: Vec<f32> = self.bufs[src.buf][src.range()].to_vec();
                self.bufs[dst.buf][dst.range()].copy_from_slice(&xs);
            }
            Work::HostFn => self.host_fns += 1,
            Work::Temp { v, dst } => self.bufs[dst.buf][dst.range()].fill(v as f32),
        }
    }
}

/// The program's objects on the device.
struct Run {
    dev: Device,
    mode: Mode,
    streams: Vec<Stream>,
    events: Vec<Event>,
    bufs: Vec<DeviceBuffer<f32>>,
    pinned: PinnedBuffer<f32>,
    host_fns: Arc<AtomicUsize>,
    /// `Ordered`: the event recorded after the latest operation, and its stream.
    order: Event,
    last: Option<usize>,
}

/// `Ok(true)`: enqueued; `Ok(false)`: the sanitizer refused it as a race (nothing enqueued).
fn accepted(r: cueflow::Result<()>) -> cueflow::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(Error::Race(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

impl Run {
    fn new(mode: Mode, auto_graph: bool) -> cueflow::Result<Run> {
        let dev = Device::host_with_workers(3)?;
        dev.set_sanitize(SanitizeMode::Error);
        dev.set_auto_order(mode == Mode::Auto);
        dev.set_auto_graph(auto_graph)?;
        let streams = (0..STREAMS)
            .map(|i| Self::stream(&dev, i))
            .collect::<cueflow::Result<Vec<_>>>()?;
        let events = (0..EVENTS)
            .map(|_| Event::new(&dev))
            .collect::<cueflow::Result<Vec<_>>>()?;
        let setup = Stream::new(&dev)?;
        let mut bufs = Vec::new();
        for _ in 0..DEVICE {
            let b = DeviceBuffer::<f32>::new(&dev, N)?;
            kernels::fill(&setup, &b, 0.0)?;
            bufs.push(b);
        }
        setup.synchronize()?;
        Ok(Run {
            pinned: PinnedBuffer::from_slice(&dev, &[0.0f32; N])?,
            order: Event::new(&dev)?,
            dev,
            mode,
            streams,
            events,
            bufs,
            host_fns: Arc::default(),
            last: None,
        })
    }

    /// Stream `i` of a program (see [`STREAMS`]).
    fn stream(dev: &Device, i: usize) -> cueflow::Result<Stream> {
        let b = Stream::builder(dev).name(format!("fuzz {i}"));
        match i {
            0 => b.build(),
            LEGACY => Ok(Stream::legacy(dev)),
            _ => b.non_blocking().build(),
        }
    }

    fn dbuf(&self, l: Loc) -> DeviceBuffer<f32> {
        match l.quarter {
            None => self.bufs[l.buf].clone(),
            Some(_) => self.bufs[l.buf].slice(l.range()).unwrap(),
        }
    }

    /// `Ordered`: order the next operation on `s` after the latest one.
    fn before(&self, s: usize) -> cueflow::Result<()> {
        match self.last {
            Some(t) if self.mode == Mode::Ordered && t != s => {
                self.streams[s].wait_event(&self.order)
            }
            _ => Ok(()),
        }
    }

    fn after(&mut self, s: usize) -> cueflow::Result<()> {
        if self.mode == Mode::Ordered {
            self.streams[s].record_event(&self.order)?;
            self.last = Some(s);
        }
        Ok(())
    }

    /// Copy `src` (device memory) into `dst` on `s`.
    fn copy_into(&mut self, s: &Stream, dst: Loc, src: &DeviceBuffer<f32>) -> cueflow::Result<()> {
        if dst.buf == DEVICE {
            let slice = self.pinned.range_mut(dst.range())?;
            s.copy_d2h(slice, src)
        } else {
            s.copy_d2d(&self.dbuf(dst), src)
        }
    }

    /// Enqueue `w` on `s` (see [`accepted`]).
    fn enqueue(&mut self, s: &Stream, w: &Work) -> cueflow::Result<bool> {
        match *w {
            Work::Fill { dst, v } => accepted(kernels::fill(s, &self.dbuf(dst), v as f32)),
            Work::Scale { dst, f } => accepted(kernels::scale(s, &self.dbuf(dst), f)),
            Work::Saxpy { a, x, y } => accepted(kernels::saxpy(s, a, &self.dbuf(x), &self.dbuf(y))),
            Work::Copy { dst, src } if src.buf == DEVICE => {
                let d = self.dbuf(dst);
                accepted(s.copy_h2d(&d, self.pinned.range(src.range())?))
            }
            Work::Copy { dst, src } => {
                let from = self.dbuf(src);
                accepted(self.copy_into(s, dst, &from))
            }
            Work::HostFn => {
                let n = self.host_fns.clone();
                accepted(s.host_fn(move || {
                    n.fetch_add(1, Ordering::SeqCst);
                }))
            }
            Work::Temp { v, dst } => {
                let t = s.alloc_async::<f32>(Q)?;
                kernels::fill(s, &t, v as f32)?;
                let copied = accepted(self.copy_into(s, dst, &t))?;
                s.free_async(t)?;
                Ok(copied)
            }
        }
    }

    /// Step `step`, applied to `model` as far as the device accepted it.
    fn step(&mut self, step: &Step, model: &mut Model) -> Result<(), TestCaseError> {
        let random = self.mode == Mode::Random;
        match step {
            Step::Do { s, w } => {
                self.before(*s)?;
                let stream = self.streams[*s].clone();
                let ok = self.enqueue(&stream, w)?;
                self.after(*s)?;
                prop_assert!(
                    ok || random,
                    "refused as a race: {w:?} on {s}: {}",
                    self.dev
                        .sanitizer_reports()
                        .last()
                        .map(|r| r.to_string())
                        .unwrap_or_default()
                );
                if ok {
                    model.apply(w);
                }
            }
            Step::Record { s, e } => self.streams[*s].record_event(&self.events[*e])?,
            Step::Wait { s, e } => self.streams[*s].wait_event(&self.events[*e])?,
            Step::SyncStream { s } => self.streams[*s].synchronize()?,
            Step::SyncEvent { e } => self.events[*e].synchronize()?,
            Step::SyncDevice => self.dev.synchronize()?,
            Step::HostWrite { quarter, v } => {
                let l = Loc {
                    buf: DEVICE,
                    quarter: *quarter,
                };
                self.pinned.write_range(l.range())?.fill(*v as f32);
                model.bufs[DEVICE][l.range()].fill(*v as f32);
            }
            Step::Capture { s, body, launches } => {
                // The legacy stream cannot be captured (GR1).
                let s = &(if *s == LEGACY { 0 } else { *s });
                self.before(*s)?;
                let stream = self.streams[*s].clone();
                stream.begin_capture(CaptureMode::Global)?;
                for w in body {
                    prop_assert!(self.enqueue(&stream, w)?, "a captured call raced");
                }
                let exec = stream.end_capture()?.instantiate()?;
                for _ in 0..*launches {
                    let ok = accepted(exec.launch(&stream))?;
                    prop_assert!(ok || random, "a graph launch was refused as a race");
                    if ok {
                        body.iter().for_each(|w| model.apply(w));
                    }
                }
                self.after(*s)?;
            }
            Step::Replace { s } if *s == LEGACY => {}
            Step::Replace { s } => {
                self.streams[*s] = Self::stream(&self.dev, *s)?;
                if self.last == Some(*s) {
                    // `Ordered`: the latest operation was on the stream dropped; the new one
                    // must wait for it like any other.
                    self.last = Some(usize::MAX);
                }
            }
        }
        Ok(())
    }

    /// Synchronize and compare every buffer, and the host functions run, with `model`.
    fn check(&self, model: &Model) -> Result<(), TestCaseError> {
        self.dev.synchronize()?;
        let reader = Stream::new(&self.dev)?;
        for (b, want) in model.bufs.iter().enumerate() {
            let got: Vec<f32> = if b == DEVICE {
                self.pinned.read()?.to_vec()
            } else {
                let mut out = vec![0.0f32; N];
                reader.read_pageable(&mut out, &self.bufs[b])?;
                out
            };
            let same = got
                .iter()
                .zip(want)
                .all(|(g, w)| g.to_bits() == w.to_bits());
            prop_assert!(same, "buffer {b}: got {got:?}, want {want:?}");
        }
        prop_assert_eq!(self.host_fns.load(Ordering::SeqCst), model.host_fns);
        if self.mode != Mode::Random {
            let reports = self.dev.sanitizer_reports();
            prop_assert!(reports.is_empty(), "{}", reports[0]);
        }
        Ok(())
    }
}

/// Run `steps` ordered by `mode` and check the result.
fn run(steps: &[Step], mode: Mode) -> Result<(), TestCaseError> {
    run_with(steps, mode, false)
}

/// [`run`], with automatic graphs on the device when `auto_graph`.
fn run_with(steps: &[Step], mode: Mode, auto_graph: bool) -> Result<(), TestCaseError> {
    let mut r = Run::new(mode, auto_graph)?;
    let mut model = Model {
        bufs: vec![vec![0.0; N]; BUFFERS],
        host_fns: 0,
    };
    for s in steps {
        r.step(s, &mut model)?;
    }
    r.check(&model)
}

fn config() -> Config {
    Config {
        // PROPTEST_CASES overrides.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/fuzz.proptest-regressions",
        ))),
        ..Config::default()
    }
}

fn program() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..60)
}

/// A window of steps repeated `3..6` times, each repetition followed by a device
/// synchronization (a host observation: the window ends, AG4), with one step of the window
/// replaced by another from some repetition on: the window repeats (its calls held, then
/// replayed as a graph), then changes partway (the held calls issued one by one, AG2), then
/// repeats in its new form.
fn repeated() -> impl Strategy<Value = Vec<Step>> {
    (
        prop::collection::vec(step(), 1..12),
        3..6usize,
        1..6usize,
        any::<prop::sample::Index>(),
        step(),
    )
        .prop_map(|(body, reps, change_from, at, other)| {
            let mut steps = Vec::new();
            let i = at.index(body.len());
            for r in 0..reps {
                let mut b = body.clone();
                if r >= change_from {
                    b[i] = other.clone();
                }
                steps.extend(b);
                steps.push(Step::SyncDevice);
            }
            steps
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_auto_graph_repeated_windows_auto_ordering(steps in repeated()) {
        run_with(&steps, Mode::Auto, true)?;
    }

    #[test]
    fn fuzz_auto_graph_repeated_windows_ordered_by_events(steps in repeated()) {
        run_with(&steps, Mode::Ordered, true)?;
    }

    #[test]
    fn fuzz_auto_ordering(steps in program()) {
        run(&steps, Mode::Auto)?;
    }

    #[test]
    fn fuzz_full_ordering_by_events(steps in program()) {
        run(&steps, Mode::Ordered)?;
    }

    #[test]
    fn fuzz_random_ordering_under_the_sanitizer(steps in program()) {
        run(&steps, Mode::Random)?;
    }
}

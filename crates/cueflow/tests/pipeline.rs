//! The chunked pipeline with work of the caller's own: what each chunk is given, the event
//! frame a run enqueues, `auto` (calibration, then the model's choice), per-stream scratch,
//! input and output of different types, ranges, errors from the work, automatic ordering and
//! traces. Misuse is in `misuse/`. Host backend, small buffers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cueflow::pipeline::{Chosen, ChunkedPipeline, Count, DeviceProfile};
use cueflow::trace::OpKind;
use cueflow::{
    kernels, Device, DeviceBuffer, Error, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, Stream,
};

const N: usize = 10_000;

fn input(dev: &Device, n: usize) -> PinnedBuffer<f32> {
    let v: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
    PinnedBuffer::from_slice(dev, &v).unwrap()
}

/// `x = x * 3 + 1`, a kernel written the way a user writes one (host implementation only).
fn triple_plus_one() -> Kernel {
    Kernel::new("triple_plus_one")
        .host(|_, a| {
            for x in a.tile_mut::<f32>(0) {
                *x = *x * 3.0 + 1.0;
            }
        })
        .build()
}

fn launch_triple(k: &Kernel, s: &Stream, d: &DeviceBuffer<f32>) -> cueflow::Result<()> {
    s.launch(
        k,
        LaunchConfig::for_elements(d.len(), 128),
        KernelArgs::new().write(d),
    )
}

fn expect_triple(out: &PinnedBuffer<f32>) {
    let out = out.read().unwrap();
    for (i, &x) in out.iter().enumerate() {
        assert_eq!(x, (i % 97) as f32 * 3.0 + 1.0, "element {i}");
    }
}

#[test]
fn user_kernel_runs_on_every_chunk_in_place() {
    let dev = Device::host().unwrap();
    let k = triple_plus_one();
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(3)
        .chunks(7)
        .build()
        .unwrap();
    let seen = Mutex::new(Vec::new());
    let r = pipe
        .run(&inp, &mut out, |s, c| {
            seen.lock()
                .unwrap()
                .push((c.index(), c.stream_index(), c.range(), s.id()));
            assert_eq!(c.device().len(), c.len());
            launch_triple(&k, s, c.device())
        })
        .unwrap();
    expect_triple(&out);
    assert_eq!((r.streams, r.chunks, r.chosen), (3, 7, Chosen::Given));
    assert!(r.device_ms.unwrap() > 0.0 && r.wall_ms > 0.0);
    assert!(r.trace.is_none());

    // Chunks in index order, contiguous, covering the buffer; chunk c on stream c % 3.
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 7);
    let mut next = 0;
    for (c, (index, stream, range, id)) in seen.into_iter().enumerate() {
        assert_eq!((index, stream), (c, c % 3));
        assert_eq!(range.start, next);
        assert!(!range.is_empty());
        next = range.end;
        assert_eq!(id, pipe.streams()[c % 3].id());
    }
    assert_eq!(next, N);
}

#[test]
fn a_run_enqueues_the_reference_event_frame() {
    let dev = Device::host().unwrap();
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(4)
        .chunks(8)
        .trace("t")
        .build()
        .unwrap();
    let r = pipe
        .run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 2.0))
        .unwrap();
    let t = r.trace.expect("a traced run has a trace");
    let origin = pipe.origin().id();
    let ids: Vec<u64> = pipe.streams().iter().map(|s| s.id()).collect();
    let on = |id: u64| -> Vec<OpKind> {
        t.ops
            .iter()
            .filter(|o| o.stream == id)
            .map(|o| o.kind)
            .collect()
    };
    // Origin: start, a wait on each stream's end, stop.
    let mut want = vec![OpKind::EventRecord];
    want.extend([OpKind::EventWait; 4]);
    want.push(OpKind::EventRecord);
    assert_eq!(on(origin), want);
    // Stream k: wait on start, (H2D, kernel, D2H) per chunk, its end record.
    for id in &ids {
        let mut want = vec![OpKind::EventWait];
        for _ in 0..2 {
            want.extend([OpKind::CopyH2D, OpKind::Kernel, OpKind::CopyD2H]);
        }
        want.push(OpKind::EventRecord);
        assert_eq!(on(*id), want, "stream {id}");
    }
    assert_eq!(t.streams[0], (origin, "t: origin".to_string()));
    assert_eq!(t.streams[1], (ids[0], "t: stream 1".to_string()));
    assert_eq!(t.streams.len(), 5);
    assert!(out
        .read()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(i, &x)| x == 2.0 * (i % 97) as f32));
}

#[test]
fn auto_calibrates_once_then_runs_the_models_choice() {
    let dev = Device::host().unwrap();
    let k = triple_plus_one();
    let n = 1 << 16;
    let inp = input(&dev, n);
    let mut out = PinnedBuffer::<f32>::new(&dev, n).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev).build().unwrap();
    assert_eq!(pipe.layout(), (Count::Auto, Count::Auto));
    assert!(pipe.auto_choice().is_none());
    let calls = AtomicUsize::new(0);
    let mut work = |s: &Stream, c: cueflow::pipeline::Chunk<'_, f32>| {
        calls.fetch_add(1, Ordering::Relaxed);
        launch_triple(&k, s, c.device())
    };

    let first = pipe.run(&inp, &mut out, &mut work).unwrap();
    assert_eq!(
        (first.streams, first.chunks, first.chosen),
        (1, 1, Chosen::Calibration)
    );
    expect_triple(&out);
    // One warm-up and the timed calibration runs, each over the whole buffer.
    assert_eq!(calls.load(Ordering::Relaxed), 4);
    let choice = pipe.auto_choice().expect("a choice after calibrating");
    let params = pipe.model().unwrap();
    assert!(params.stages.h2d_ns > 0.0 && params.stages.kernel_ns > 0.0);
    assert_eq!(
        params.per_op_overhead_ns,
        DeviceProfile::of(&dev).unwrap().per_op_overhead_ns()
    );
    assert!(choice.streams <= 16 && choice.chunks <= 128 && choice.chunks >= choice.streams);

    out.write().unwrap().fill(f32::NAN);
    let second = pipe.run(&inp, &mut out, &mut work).unwrap();
    expect_triple(&out);
    assert_eq!(
        (second.streams, second.chunks),
        (choice.streams as usize, choice.chunks as usize)
    );
    match second.chosen {
        Chosen::Auto { predicted_ms } => assert_eq!(predicted_ms, choice.predicted_ns / 1e6),
        other => panic!("expected Auto, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::Relaxed), 4 + second.chunks);

    // Another size calibrates again; fixing one count re-chooses without measuring.
    let small = inp.range(..n / 2).unwrap();
    let mut half = PinnedBuffer::<f32>::new(&dev, n / 2).unwrap();
    let r = pipe.run(small, &mut half, &mut work).unwrap();
    assert_eq!(r.chosen, Chosen::Calibration);
    let before = calls.load(Ordering::Relaxed);
    pipe.set_streams(2).unwrap();
    assert_eq!(pipe.auto_choice().unwrap().streams, 2);
    let r = pipe
        .run(inp.range(..n / 2).unwrap(), &mut half, &mut work)
        .unwrap();
    assert_eq!(r.streams, 2);
    assert!(matches!(r.chosen, Chosen::Auto { .. }));
    assert_eq!(calls.load(Ordering::Relaxed), before + r.chunks);
}

#[test]
fn the_device_profile_is_measured_once_per_device() {
    let a = Device::host_with_workers(3).unwrap();
    let b = Device::host_with_workers(3).unwrap();
    let pa = DeviceProfile::of(&a).unwrap();
    let pb = DeviceProfile::of(&b).unwrap();
    // The same hardware: the cached measurement, bit for bit (two measurements never agree
    // to the last bit of every median).
    assert_eq!(pa, pb);
    assert_ne!(pa, DeviceProfile::measure(&a).unwrap());
    assert!(pa.duplex_slowdown() >= 1.0);
    assert!(pa.per_op_overhead_ns() >= 0.0);
    assert!(pa.stages.stages.h2d_ns > 0.0);
}

#[test]
fn scratch_is_made_per_stream_and_again_for_longer_chunks() {
    let dev = Device::host().unwrap();
    let made = Arc::new(Mutex::new(Vec::new()));
    let log = made.clone();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(2)
        .chunks(4)
        .scratch(move |s, len| {
            log.lock().unwrap().push((s.id(), len));
            DeviceBuffer::<f32>::new(s.device(), len)
        })
        .build()
        .unwrap();
    // Two kernels per chunk through the scratch: tmp = x * 2 (saxpy into zeroed scratch), x = tmp + x.
    let run = |pipe: &mut ChunkedPipeline<DeviceBuffer<f32>>, n: usize| {
        let inp = input(&dev, n);
        let mut out = PinnedBuffer::<f32>::new(&dev, n).unwrap();
        pipe.run(&inp, &mut out, |s, c| {
            let tmp = c.scratch().slice(..c.len())?;
            assert!(c.scratch().len() >= c.len());
            s.memset(&tmp, 0)?;
            kernels::saxpy(s, 2.0, c.device(), &tmp)?;
            kernels::saxpy(s, 1.0, &tmp, c.device())
        })
        .unwrap();
        let out = out.read().unwrap();
        for (i, &x) in out.iter().enumerate() {
            assert_eq!(x, 3.0 * (i % 97) as f32, "element {i}");
        }
    };
    run(&mut pipe, 1000);
    let ids: Vec<u64> = pipe.streams().iter().map(|s| s.id()).collect();
    assert_eq!(*made.lock().unwrap(), vec![(ids[0], 250), (ids[1], 250)]);
    run(&mut pipe, 1000);
    run(&mut pipe, 600); // shorter chunks (150), more than half as long: the same scratch
    assert_eq!(made.lock().unwrap().len(), 2);
    run(&mut pipe, 4001); // longer chunks (1001): made again for both streams
    assert_eq!(made.lock().unwrap()[2..], [(ids[0], 1001), (ids[1], 1001)]);
    run(&mut pipe, 1000); // chunks of 250, under half of 1001: made again, smaller
    assert_eq!(made.lock().unwrap()[4..], [(ids[0], 250), (ids[1], 250)]);
}

#[test]
fn auto_does_not_keep_whole_buffer_scratch_after_calibrating() {
    let dev = Device::host().unwrap();
    let made = Arc::new(Mutex::new(Vec::new()));
    let log = made.clone();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(4)
        .scratch(move |_, len| {
            log.lock().unwrap().push(len);
            Ok(len)
        })
        .build()
        .unwrap();
    let n = 1 << 16;
    let inp = input(&dev, n);
    let mut out = PinnedBuffer::<f32>::new(&dev, n).unwrap();
    let mut work = |s: &Stream, c: cueflow::pipeline::Chunk<'_, f32, usize>| {
        assert!(*c.scratch() >= c.len());
        kernels::scale(s, c.device(), 2.0)
    };
    pipe.run(&inp, &mut out, &mut work).unwrap(); // calibration: one chunk of n
    assert_eq!(*made.lock().unwrap(), vec![n]);
    let r = pipe.run(&inp, &mut out, &mut work).unwrap();
    // Four fixed streams: auto chooses at least four chunks, so the scratch is made again for
    // chunks of at most a quarter of the buffer.
    assert!(r.chunks >= 4, "{}", r.chunks);
    assert_eq!(made.lock().unwrap()[1..], vec![n.div_ceil(r.chunks); 4]);
}

#[test]
fn map_runs_convert_between_element_types() {
    let dev = Device::host().unwrap();
    // u16 counts in, f32 out: out = count * 0.5.
    let widen = Kernel::new("widen")
        .host(|ctx, a| {
            let src = a.input::<u16>(1);
            let lo = ctx.thread_range().start as usize;
            for (k, y) in a.tile_mut::<f32>(0).iter_mut().enumerate() {
                *y = f32::from(src[lo + k]) * 0.5;
            }
        })
        .build();
    let raw: Vec<u16> = (0..N).map(|i| (i * 7 % 65_536) as u16).collect();
    let inp = PinnedBuffer::from_slice(&dev, &raw).unwrap();
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(2)
        .chunks(5)
        .build()
        .unwrap();
    for _ in 0..2 {
        pipe.run_map(&inp, &mut out, |s, c| {
            assert_eq!((c.input().len(), c.output().len()), (c.len(), c.len()));
            s.launch(
                &widen,
                LaunchConfig::for_elements(c.len(), 64),
                KernelArgs::new().write(c.output()).read(c.input()),
            )
        })
        .unwrap();
        let out = out.read().unwrap();
        for (i, &y) in out.iter().enumerate() {
            assert_eq!(y, f32::from(raw[i]) * 0.5, "element {i}");
        }
    }
}

#[test]
fn ranges_run_only_their_elements() {
    let dev = Device::host().unwrap();
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::from_slice(&dev, &vec![-1.0f32; N]).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(2)
        .chunks(3)
        .build()
        .unwrap();
    pipe.run(
        inp.range(100..1100).unwrap(),
        out.range_mut(5000..6000).unwrap(),
        |s, c| kernels::scale(s, c.device(), 2.0),
    )
    .unwrap();
    let out = out.read().unwrap();
    for (i, &x) in out.iter().enumerate() {
        let want = if (5000..6000).contains(&i) {
            2.0 * ((i - 5000 + 100) % 97) as f32
        } else {
            -1.0
        };
        assert_eq!(x, want, "element {i}");
    }
}

#[test]
fn run_on_leaves_the_result_in_the_callers_device_buffer() {
    let dev = Device::host().unwrap();
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(2)
        .chunks(2)
        .build()
        .unwrap();
    pipe.run_on(&inp, &d, &mut out, |s, c| {
        kernels::scale(s, c.device(), 4.0)
    })
    .unwrap();
    let mut back = vec![0.0f32; N];
    Stream::new(&dev)
        .unwrap()
        .read_pageable(&mut back, &d)
        .unwrap();
    assert_eq!(&back[..], &out.read().unwrap()[..]);
    assert_eq!(back[5], 20.0);
}

#[test]
fn an_error_from_the_work_ends_the_run_and_the_pipeline_stays_usable() {
    let dev = Device::host().unwrap();
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(2)
        .chunks(8)
        .build()
        .unwrap();
    let mut called = 0;
    let err = pipe
        .run(&inp, &mut out, |s, c| {
            called += 1;
            if c.index() == 3 {
                return Err(Error::Unsupported("chunk 3".into()));
            }
            kernels::scale(s, c.device(), 2.0)
        })
        .unwrap_err();
    assert_eq!(err, Error::Unsupported("chunk 3".into()));
    assert_eq!(called, 4, "no chunk after the failing one");
    // The chunks before it completed; the frame was closed, so the next run is ordered after.
    assert_eq!(out.read().unwrap()[1], 2.0);
    pipe.run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 3.0))
        .unwrap();
    assert!(out
        .read()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(i, &x)| x == 3.0 * (i % 97) as f32));
    assert_eq!(dev.sticky_error(), None);
}

#[test]
fn automatic_ordering_runs_without_events() {
    let dev = Device::host().unwrap();
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(4)
        .chunks(8)
        .auto_order()
        .trace("auto")
        .build()
        .unwrap();
    assert!(pipe.is_auto_order());
    for f in [2.0f32, 5.0] {
        let r = pipe
            .run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), f))
            .unwrap();
        assert!(r.device_ms.is_none() && r.wall_ms > 0.0);
        assert_eq!(r.ms(), r.wall_ms);
        let t = r.trace.unwrap();
        // No event of the pipeline's own: only the work and the copies.
        assert!(
            t.ops
                .iter()
                .all(|o| matches!(o.kind, OpKind::CopyH2D | OpKind::Kernel | OpKind::CopyD2H)),
            "{:#?}",
            t.ops
        );
        assert_eq!(t.ops.len(), 24);
        assert!(out
            .read()
            .unwrap()
            .iter()
            .enumerate()
            .all(|(i, &x)| x == f * (i % 97) as f32));
    }
}

#[test]
fn one_pipeline_runs_a_sanitizer_clean_program() {
    let dev = Device::host().unwrap();
    dev.set_sanitize(cueflow::SanitizeMode::Error);
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(4)
        .chunks(16)
        .build()
        .unwrap();
    for _ in 0..3 {
        pipe.run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 2.0))
            .unwrap();
    }
    assert!(dev.sanitizer_reports().is_empty());
}

/// A pipeline can move to another thread with its scratch, and its report too.
#[test]
fn pipelines_and_reports_are_send() {
    fn send<T: Send>(_: &T) {}
    let dev = Device::host().unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(2)
        .chunks(2)
        .scratch(|s, len| DeviceBuffer::<f32>::new(s.device(), len))
        .build()
        .unwrap();
    send(&pipe);
    let inp = input(&dev, 64);
    let mut out = PinnedBuffer::<f32>::new(&dev, 64).unwrap();
    let report = std::thread::scope(|t| {
        t.spawn(|| {
            pipe.run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 2.0))
                .unwrap()
        })
        .join()
        .unwrap()
    });
    send(&report);
    assert_eq!(out.read().unwrap()[3], 6.0);
}

#[test]
fn a_captured_run_replays_as_one_graph() {
    let dev = Device::host().unwrap();
    let k = triple_plus_one();
    let mut inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev)
        .streams(4)
        .chunks(32)
        .build()
        .unwrap();
    let calls = AtomicUsize::new(0);
    let graph = pipe
        .capture_on(&inp, &d, &mut out, |s, c| {
            calls.fetch_add(1, Ordering::SeqCst);
            launch_triple(&k, s, c.device())
        })
        .unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        32,
        "the work is captured once per chunk"
    );
    // Nothing ran yet: capture records instead of running (GR1).
    assert!(out.read().unwrap().iter().all(|&x| x == 0.0));
    // 4 streams × 32 chunks × (copy in, kernel, copy out), joined by events.
    let kinds: Vec<_> = graph.nodes().iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == Some(OpKind::Kernel)).count(),
        32
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == Some(OpKind::CopyH2D))
            .count(),
        32
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == Some(OpKind::CopyD2H))
            .count(),
        32
    );
    let exec = graph.instantiate().unwrap();
    let s = Stream::new(&dev).unwrap();
    for round in 0..3 {
        inp.write()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = ((i + round) % 97) as f32);
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        let got = out.read().unwrap();
        for (i, &x) in got.iter().enumerate() {
            assert_eq!(
                x,
                ((i + round) % 97) as f32 * 3.0 + 1.0,
                "launch {round}, element {i}"
            );
        }
    }
    // The pipeline still runs normally afterwards.
    pipe.run_on(&inp, &d, &mut out, |s, c| launch_triple(&k, s, c.device()))
        .unwrap();
}

#[test]
fn capturing_with_auto_calibrates_first_and_a_failing_work_ends_the_capture() {
    let dev = Device::host().unwrap();
    let inp = input(&dev, N);
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N).unwrap();
    let mut pipe = ChunkedPipeline::new(&dev).build().unwrap();
    let exec = pipe
        .capture_on(&inp, &d, &mut out, |s, c| {
            kernels::scale(s, c.device(), 2.0)
        })
        .unwrap()
        .instantiate()
        .unwrap();
    assert!(
        pipe.auto_choice().is_some(),
        "auto chose a layout before capturing"
    );
    let s = Stream::new(&dev).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    for (i, &x) in out.read().unwrap().iter().enumerate() {
        assert_eq!(x, (i % 97) as f32 * 2.0);
    }
    let mut fixed = ChunkedPipeline::new(&dev)
        .streams(2)
        .chunks(4)
        .build()
        .unwrap();
    let e = fixed
        .capture_on(&inp, &d, &mut out, |_, c| {
            if c.index() == 2 {
                Err(Error::Unsupported("chunk 2".into()))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    // The origin stream is no longer capturing: a normal run works.
    fixed
        .run_on(&inp, &d, &mut out, |s, c| {
            kernels::scale(s, c.device(), 1.0)
        })
        .unwrap();
}

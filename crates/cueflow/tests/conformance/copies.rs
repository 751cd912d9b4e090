//! CP1–CP5: copies and memset.

use std::time::Duration;

use cueflow::trace::{Engine, OpKind};
use cueflow::{kernels, Device, DeviceBuffer, Error, PinnedBuffer, SanitizeMode, Stream};

use crate::support::*;

fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

// ---------------------------------------------------------------------------------------------
// CP1 Kinds

/// CP1: H2D, D2D, memset, D2H and H2H copies are stream operations in stream order. Each reads
/// what the one before it wrote; the gate shows none of them ran early.
pub fn cp1_copy_kinds_in_stream_order(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let src = PinnedBuffer::from_slice(dev, &ramp(N)).unwrap();
    let mut mid = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let mut dst = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let (a, b) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.copy_h2d(&a, &src).unwrap(); // a = ramp
    s.copy_d2d(&b, &a).unwrap(); // b = ramp
    s.memset(&a, 0).unwrap(); // a = 0 (after b took the ramp)
    s.copy_d2h(&mut mid, &b).unwrap(); // mid = ramp
    s.copy_h2h(&mut dst, &mid).unwrap(); // dst = ramp
    assert_all(&peek(&a), 0.0);
    assert_all(&peek(&b), 0.0);
    gate.open();
    s.synchronize().unwrap();
    assert_eq!(&*dst.read().unwrap(), &ramp(N)[..]);
    assert_eq!(&*mid.read().unwrap(), &ramp(N)[..]);
    assert_eq!(download(&b), ramp(N));
    assert_all(&download(&a), 0.0);
}

/// CP1: memset sets every byte of the view, and only the view.
pub fn cp1_memset_bytes(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = upload(dev, &vec![7u32; N]);
    s.memset(&d.slice(16..32).unwrap(), 0xab).unwrap();
    s.synchronize().unwrap();
    let v = download(&d);
    for (i, x) in v.iter().enumerate() {
        let want = if (16..32).contains(&i) {
            0xabab_abab
        } else {
            7
        };
        assert_eq!(*x, want, "element {i}");
    }
}

/// CP1: copies between sub-ranges touch exactly those ranges.
pub fn cp1_subrange_copies(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let src = PinnedBuffer::from_slice(dev, &ramp(64)).unwrap();
    let d = zeros(dev, 64);
    s.copy_h2d(&d.slice(8..16).unwrap(), src.range(40..48).unwrap())
        .unwrap();
    s.copy_d2d(&d.slice(32..40).unwrap(), &d.slice(8..16).unwrap())
        .unwrap();
    let mut out = PinnedBuffer::<f32>::new(dev, 64).unwrap();
    s.copy_d2h(out.range_mut(0..8).unwrap(), &d.slice(32..40).unwrap())
        .unwrap();
    s.synchronize().unwrap();
    let v = download(&d);
    for (i, x) in v.iter().enumerate() {
        let want = match i {
            8..16 => (i + 32) as f32,
            32..40 => (i + 8) as f32,
            _ => 0.0,
        };
        assert_eq!(*x, want, "element {i}");
    }
    let o = out.read().unwrap();
    assert_eq!(&o[..8], &ramp(48)[40..48]);
    assert_all(&o[8..], 0.0);
}

/// CP1 with ST2: copies on different streams have no order: one completes while the other
/// stream is held.
pub fn cp1_copies_on_other_streams_unordered(dev: &Device) {
    let (held, free) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let src = PinnedBuffer::from_slice(dev, &vec![3.0f32; N]).unwrap();
    let (a, b) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&held);
    held.copy_h2d(&a, &src).unwrap();
    free.copy_h2d(&b, &src).unwrap();
    free.synchronize().unwrap();
    assert!(!gate.is_open());
    assert_all(&peek(&b), 3.0);
    assert_all(&peek(&a), 0.0);
    gate.open();
    held.synchronize().unwrap();
    assert_all(&download(&a), 3.0);
}

// ---------------------------------------------------------------------------------------------
// CP2 Pinned

/// CP2: copies between device and pinned memory return before any byte moves. (The look at
/// `back` behind the closed gate is a race by AC2, which the sanitizer reports.)
pub fn cp2_pinned_copies_are_async(dev: &Device) {
    let ((), races) = races_on_purpose(dev, || {
        let s = Stream::new(dev).unwrap();
        let src = PinnedBuffer::from_slice(dev, &vec![5.0f32; N]).unwrap();
        let mut back = PinnedBuffer::from_slice(dev, &vec![-1.0f32; N]).unwrap();
        let d = zeros(dev, N);
        let six = filled(dev, N, 6.0);
        let gate = Gate::kernel(dev);
        gate.block(&s);
        s.copy_h2d(&d, &src).unwrap();
        s.copy_d2h(&mut back, &six).unwrap();
        // Both returned; neither moved a byte.
        assert_all(&peek(&d), 0.0);
        // SAFETY: the copy into `back` is behind the closed gate, so nothing writes it now.
        assert_all(unsafe { back.as_slice_unchecked() }, -1.0);
        assert!(!gate.is_open());
        gate.open();
        s.synchronize().unwrap();
        assert_all(&download(&d), 5.0);
        assert_all(&back.read().unwrap(), 6.0);
    });
    assert!(
        races.iter().any(|r| r.later.stream.is_none()),
        "the look behind the gate is reported: {races:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// CP3 Pageable

/// CP3: a pageable upload returns once the source was read: overwriting the source right
/// after the call does not change what arrives, even though the stream is held.
pub fn cp3_pageable_upload_stages_source(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    // A backend may also wait for the stream; the gate opens by itself so that is no deadlock.
    let t = gate.open_after(Duration::from_millis(100));
    let mut src = ramp(N);
    s.write_pageable(&d, &src).unwrap();
    src.iter_mut().for_each(|x| *x = -1.0);
    s.synchronize().unwrap();
    assert_eq!(download(&d), ramp(N));
    t.join().unwrap();
}

/// CP3: a pageable download returns only when the data has arrived, which includes waiting for
/// earlier work on the stream.
pub fn cp3_pageable_download_waits_for_data(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 7.0).unwrap();
    let t = gate.open_after(Duration::from_millis(50));
    let mut out = vec![0.0f32; N];
    s.read_pageable(&mut out, &d).unwrap();
    assert!(gate.is_open(), "the download returned before the fill ran");
    assert_all(&out, 7.0);
    t.join().unwrap();
}

/// CP3: `DeviceBuffer::from_slice` and `to_vec` are synchronous pageable copies on the legacy
/// stream. `from_slice` returns once the data is on the device, so another stream uses the
/// buffer with no event and the sanitizer (error mode) finds nothing; `to_vec` waits for the
/// earlier work of a blocking stream (ST4), then for the data.
pub fn cp3_device_buffer_from_slice_and_to_vec(dev: &Device) {
    let before = dev.sanitize_mode();
    dev.set_sanitize(SanitizeMode::Error);
    let d = DeviceBuffer::from_slice(dev, &ramp(N)).unwrap();
    let other = side_stream(dev);
    kernels::scale(&other, &d, 2.0).unwrap();
    other.synchronize().unwrap();
    let doubled: Vec<f32> = ramp(N).iter().map(|x| x * 2.0).collect();
    assert_eq!(d.to_vec().unwrap(), doubled);
    assert_eq!(d.slice(3..7).unwrap().to_vec().unwrap(), doubled[3..7]);
    let empty = DeviceBuffer::<f32>::from_slice(dev, &[]).unwrap();
    assert!(empty.is_empty() && empty.to_vec().unwrap().is_empty());
    assert!(dev.sanitizer_reports().is_empty());
    dev.set_sanitize(before);

    let s = Stream::new(dev).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 7.0).unwrap();
    let t = gate.open_after(Duration::from_millis(50));
    let out = d.to_vec().unwrap();
    assert!(
        gate.is_open(),
        "to_vec returned before the blocking stream's fill ran"
    );
    assert_all(&out, 7.0);
    t.join().unwrap();
}

// ---------------------------------------------------------------------------------------------
// CP4 Bounds

/// CP4: out-of-range views, length mismatches and overlapping copies are refused at the call
/// with an error naming the sizes, and nothing is enqueued.
pub fn cp4_bounds_refused(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, 16);
    let src = PinnedBuffer::from_slice(dev, &[1.0f32; 8]).unwrap();
    let mut back = PinnedBuffer::<f32>::new(dev, 8).unwrap();
    dev.start_trace().unwrap();
    let errs = [
        s.copy_h2d(&d, &src).unwrap_err(),
        s.copy_d2h(&mut back, &d).unwrap_err(),
        s.copy_d2d(&d.slice(0..4).unwrap(), &d.slice(8..16).unwrap())
            .unwrap_err(),
        s.copy_d2d(&d.slice(0..8).unwrap(), &d.slice(4..12).unwrap())
            .unwrap_err(),
        s.write_pageable(&d, &[0.0f32; 3]).unwrap_err(),
        s.read_pageable(&mut [0.0f32; 17], &d).unwrap_err(),
        d.slice(10..17).unwrap_err(),
        src.range(2..9).err().unwrap(),
        back.range_mut(9..).err().unwrap(),
    ];
    let t = dev.stop_trace().unwrap();
    for e in &errs {
        assert!(matches!(e, Error::OutOfBounds { rule: "CP4", .. }), "{e:?}");
    }
    // The messages name the sizes involved.
    assert!(errs[0].to_string().contains("64 bytes") && errs[0].to_string().contains("32 bytes"));
    assert!(errs[3].to_string().contains("overlap"), "{}", errs[3]);
    assert!(errs[6].to_string().contains("16 elements"), "{}", errs[6]);
    assert_eq!(enqueued(&t), 0, "refused calls enqueued {:#?}", t.ops);
    assert!(s.query().unwrap());
    assert_all(&download(&d), 0.0);
}

// ---------------------------------------------------------------------------------------------
// CP5 Engines

/// CP5: with two copy engines, an H2D copy, a D2H copy and a kernel run at the same time (the
/// timeline shows all three overlapping) on three streams; with one (the host backend on a
/// machine with fewer cores than engine threads, or `CUEFLOW_HOST_COPY_ENGINES=1`), the copies
/// of the two directions take turns and each still runs beside the kernel. The copies are long
/// (hundreds of MiB in each direction) so that the engines are busy for tens of milliseconds:
/// waking an engine thread late on a loaded machine cannot hide the overlap.
pub fn cp5_engines_overlap(dev: &Device) {
    let engines = dev.properties().async_engines;
    assert!(engines >= 1);
    println!("CP5 with {engines} copy engine(s)");
    const LEN: usize = 8 << 20; // 32 MiB per copy
    const COPIES: usize = 12;
    let (k, up, down) = (side_stream(dev), side_stream(dev), side_stream(dev));
    let src = PinnedBuffer::from_slice(dev, &vec![1.0f32; LEN]).unwrap();
    let mut dst = PinnedBuffer::<f32>::new(dev, LEN).unwrap();
    let (d_up, d_down) = (zeros(dev, LEN), filled(dev, LEN, 2.0));
    dev.start_trace().unwrap();
    // One engine runs the 24 copies one after another: the kernel must outlast them.
    let spin = Duration::from_millis(if engines == 1 { 600 } else { 300 });
    kernels::spin(&k, spin, 1).unwrap();
    for _ in 0..COPIES {
        up.copy_h2d(&d_up, &src).unwrap();
        down.copy_d2h(&mut dst, &d_down).unwrap();
    }
    let t = dev.stop_trace().unwrap();
    let kernel = ops_of(&t, OpKind::Kernel);
    let h2d = ops_of(&t, OpKind::CopyH2D);
    let d2h = ops_of(&t, OpKind::CopyD2H);
    assert_eq!((kernel.len(), h2d.len(), d2h.len()), (1, COPIES, COPIES));
    assert!(h2d.iter().all(|o| o.engine == Engine::CopyH2D));
    assert!(d2h.iter().all(|o| o.engine == Engine::CopyD2H));
    let (h, d) = (span(&h2d), span(&d2h));
    let kr = (kernel[0].start_ns, kernel[0].end_ns);
    let overlaps = |a: (u64, u64), b: (u64, u64)| a.0 < b.1 && b.0 < a.1;
    if engines >= 2 {
        assert!(
            overlaps(h, d),
            "H2D copies {h:?} and D2H copies {d:?} did not overlap"
        );
    } else {
        for x in &h2d {
            for y in &d2h {
                assert!(
                    !overlaps((x.start_ns, x.end_ns), (y.start_ns, y.end_ns)),
                    "one copy engine, yet an H2D and a D2H copy overlapped: {x:?} {y:?}"
                );
            }
        }
    }
    assert!(
        overlaps(h, kr),
        "H2D copies {h:?} and the kernel {kr:?} did not overlap"
    );
    assert!(
        overlaps(d, kr),
        "D2H copies {d:?} and the kernel {kr:?} did not overlap"
    );
    assert_all(&dst.read().unwrap(), 2.0);
}

/// CP5: copies in the same direction share their engine: on two streams, they never overlap.
pub fn cp5_same_direction_shares_engine(dev: &Device) {
    const LEN: usize = 1 << 18; // 1 MiB per copy
    let (a, b) = (side_stream(dev), side_stream(dev));
    let src = PinnedBuffer::from_slice(dev, &vec![1.0f32; LEN]).unwrap();
    let mut dst_a = PinnedBuffer::<f32>::new(dev, LEN).unwrap();
    let mut dst_b = PinnedBuffer::<f32>::new(dev, LEN).unwrap();
    let d: Vec<DeviceBuffer<f32>> = (0..2).map(|_| zeros(dev, LEN)).collect();
    dev.start_trace().unwrap();
    for _ in 0..4 {
        a.copy_h2d(&d[0], &src).unwrap();
        b.copy_h2d(&d[1], &src).unwrap();
    }
    for _ in 0..4 {
        a.copy_d2h(&mut dst_a, &d[0]).unwrap();
        b.copy_d2h(&mut dst_b, &d[1]).unwrap();
    }
    let t = dev.stop_trace().unwrap();
    for kind in [OpKind::CopyH2D, OpKind::CopyD2H] {
        let ops = ops_of(&t, kind);
        assert_eq!(ops.len(), 8);
        for (i, x) in ops.iter().enumerate() {
            for y in &ops[i + 1..] {
                if x.stream != y.stream {
                    assert!(!overlap(x, y), "{kind:?} copies overlapped: {x:?} {y:?}");
                }
            }
        }
    }
}

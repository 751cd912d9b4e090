//! Copies and memory (CP4, ER3)

use super::*;

#[test]
fn copy_length_mismatch() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 5.0);
    let small = PinnedBuffer::from_slice(&dev, &[1.0f32; N / 2]).unwrap();
    let mut small_out = PinnedBuffer::<f32>::new(&dev, N / 2).unwrap();
    let other = filled(&dev, N - 1, 1.0);
    for e in [
        refused(&dev, &s, || s.copy_h2d(&d, &small)),
        refused(&dev, &s, || s.copy_d2h(&mut small_out, &d)),
        refused(&dev, &s, || s.copy_d2d(&d, &other)),
    ] {
        match &e {
            Error::OutOfBounds { rule: "CP4", what } => assert!(what.contains("bytes"), "{what}"),
            other => panic!("expected OutOfBounds, got {other:?}"),
        }
    }
    let mut h1 = PinnedBuffer::<f32>::new(&dev, 4).unwrap();
    let h2 = PinnedBuffer::<f32>::new(&dev, 5).unwrap();
    assert!(matches!(
        refused(&dev, &s, || s.copy_h2h(&mut h1, &h2)),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    assert!(read(&d).iter().all(|&x| x == 5.0));
}

#[test]
fn copy_message_names_sizes() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, 16, 0.0);
    let src = PinnedBuffer::from_slice(&dev, &[1.0f32; 8]).unwrap();
    let msg = refused(&dev, &s, || s.copy_h2d(&d, &src)).to_string();
    assert!(
        msg.contains("64 bytes") && msg.contains("32 bytes"),
        "{msg}"
    );
}

#[test]
fn pageable_copy_length_mismatch() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 5.0);
    assert!(matches!(
        refused(&dev, &s, || s.write_pageable(&d, &[0.0f32; N + 1])),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    let mut out = [0.0f32; N - 1];
    assert!(matches!(
        refused(&dev, &s, || s.read_pageable(&mut out, &d)),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    assert!(out.iter().all(|&x| x == 0.0));
    assert!(read(&d).iter().all(|&x| x == 5.0));
}

#[test]
fn slice_out_of_range() {
    let dev = dev();
    let d = filled(&dev, N, 0.0);
    let mut p = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let oob = |r: cueflow::Result<()>| {
        assert!(
            matches!(r, Err(Error::OutOfBounds { rule: "CP4", .. })),
            "{r:?}"
        );
    };
    oob(d.slice(0..N + 1).map(drop));
    oob(d.slice(N + 1..).map(drop));
    #[allow(clippy::reversed_empty_ranges)]
    oob(d.slice(5..2).map(drop));
    oob(d.slice(..=N).map(drop));
    oob(d.slice(2..4).unwrap().slice(0..3).map(drop));
    oob(p.range(0..N + 1).map(drop));
    oob(p.range_mut(N..N + 1).map(drop));
    oob(p.read_range(..N + 1).map(drop));
    oob(p.write_range(N - 1..N + 1).map(drop));
    let msg = d.slice(10..N + 7).unwrap_err().to_string();
    assert!(msg.contains(&format!("{N} elements")), "{msg}");
}

#[test]
fn bad_chunk_count() {
    let dev = dev();
    let d = filled(&dev, 8, 0.0);
    assert!(matches!(d.chunks(0), Err(Error::OutOfBounds { .. })));
    assert!(matches!(d.chunks(9), Err(Error::OutOfBounds { .. })));
    assert!(matches!(chunk_ranges(8, 0), Err(Error::OutOfBounds { .. })));
}

#[test]
fn overlapping_copy() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 3.0);
    let e = refused(&dev, &s, || {
        s.copy_d2d(
            &d.slice(0..N / 2).unwrap(),
            &d.slice(N / 4..3 * N / 4).unwrap(),
        )
    });
    match e {
        Error::OutOfBounds { rule: "CP4", what } => assert!(what.contains("overlap"), "{what}"),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
    assert!(matches!(
        refused(&dev, &s, || s.copy_d2d(&d, &d)),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    assert!(read(&d).iter().all(|&x| x == 3.0));
}

#[test]
fn buffer_from_another_device() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let s = Stream::new(&dev).unwrap();
    let mine = filled(&dev, N, 1.0);
    let theirs = filled(&other, N, 2.0);
    // (Another device's pinned memory is portable with unified addressing, HM2: no misuse.)
    let calls: Vec<Error> = vec![
        refused(&dev, &s, || s.copy_d2d(&mine, &theirs)),
        refused(&dev, &s, || s.memset(&theirs, 0)),
        refused(&dev, &s, || kernels::fill(&s, &theirs, 9.0)),
        refused(&dev, &s, || s.write_pageable(&theirs, &[0.0f32; N])),
    ];
    for e in calls {
        assert!(matches!(e, Error::InvalidHandle(_)), "{e:?}");
    }
    assert!(read(&mine).iter().all(|&x| x == 1.0));
    assert!(read(&theirs).iter().all(|&x| x == 2.0));
}

/// MD2 lets any device's stream free stream-ordered memory, but graph memory goes back only on
/// a stream of its own device (GR10).
#[test]
fn graph_memory_of_another_device_freed_on_this_devices_stream() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let s = Stream::new(&dev).unwrap();
    let theirs = Stream::new(&other).unwrap();
    theirs.begin_capture(CaptureMode::Global).unwrap();
    let t = theirs.alloc_async::<f32>(N).unwrap();
    kernels::fill(&theirs, &t, 4.0).unwrap();
    let exec = theirs.end_capture().unwrap().instantiate().unwrap();
    exec.launch(&theirs).unwrap();
    let e = refused(&dev, &s, || s.free_async(t.clone()));
    assert!(matches!(e, Error::InvalidHandle(_)), "{e:?}");
    assert!(read(&t).iter().all(|&x| x == 4.0));
    theirs.free_async(t).unwrap();
    theirs.synchronize().unwrap();
}

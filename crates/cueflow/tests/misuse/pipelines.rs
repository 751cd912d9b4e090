//! Chunked pipelines (ER3, CP4)

use super::*;

/// A pipeline of `streams` × `chunks` (or `auto` for 0) on `dev`.
fn pipeline(dev: &Device, streams: u32, chunks: u32) -> ChunkedPipeline {
    let count = |n| if n == 0 { Count::Auto } else { Count::Fixed(n) };
    ChunkedPipeline::new(dev)
        .streams(count(streams))
        .chunks(count(chunks))
        .build()
        .unwrap()
}

#[test]
fn pipeline_with_zero_streams_or_chunks() {
    let dev = dev();
    for (s, c) in [(0, 4), (4, 0)] {
        let r = ChunkedPipeline::new(&dev).streams(s).chunks(c).build();
        assert!(matches!(r, Err(Error::InvalidLayout(_))), "{s}×{c}");
    }
    let mut p = pipeline(&dev, 2, 2);
    assert!(matches!(p.set_streams(0), Err(Error::InvalidLayout(_))));
    assert!(matches!(p.set_chunks(0), Err(Error::InvalidLayout(_))));
    assert_eq!(p.layout(), (Count::Fixed(2), Count::Fixed(2)));
}

#[test]
fn pipeline_input_and_output_of_different_lengths() {
    let dev = dev();
    let inp = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut out = PinnedBuffer::<f32>::new(&dev, N + 1).unwrap();
    // `auto`: refused before the calibration could enqueue anything.
    let mut p = pipeline(&dev, 0, 0);
    let origin = p.origin().clone();
    let e = refused(&dev, &origin, || {
        p.run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 2.0))
    });
    assert!(
        matches!(&e, Error::OutOfBounds { rule: "CP4", what } if what.contains(&N.to_string()) && what.contains(&(N + 1).to_string())),
        "{e:?}"
    );
    let mut wide = PinnedBuffer::<f64>::new(&dev, N - 1).unwrap();
    let e = refused(&dev, &origin, || p.run_map(&inp, &mut wide, |_, _| Ok(())));
    assert!(matches!(e, Error::OutOfBounds { rule: "CP4", .. }), "{e:?}");
    assert!(p.auto_choice().is_none());
}

#[test]
fn pipeline_device_buffer_of_another_length() {
    let dev = dev();
    let inp = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N / 2).unwrap();
    let mut p = pipeline(&dev, 2, 4);
    let origin = p.origin().clone();
    let e = refused(&dev, &origin, || {
        p.run_on(&inp, &d, &mut out, |s, c| {
            kernels::scale(s, c.device(), 2.0)
        })
    });
    assert!(matches!(e, Error::OutOfBounds { rule: "CP4", .. }), "{e:?}");
}

#[test]
fn pipeline_with_more_chunks_than_elements_or_no_elements() {
    let dev = dev();
    let inp = PinnedBuffer::<f32>::new(&dev, 8).unwrap();
    let mut out = PinnedBuffer::<f32>::new(&dev, 8).unwrap();
    let mut p = pipeline(&dev, 2, 9);
    let origin = p.origin().clone();
    let e = refused(&dev, &origin, || {
        p.run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 2.0))
    });
    assert!(
        matches!(&e, Error::InvalidLayout(w) if w.contains("9 chunks of 8")),
        "{e:?}"
    );
    // Empty input and output (ranges of nothing), with `auto` and with fixed counts.
    for mut p in [pipeline(&dev, 0, 0), pipeline(&dev, 1, 1)] {
        let origin = p.origin().clone();
        let e = refused(&dev, &origin, || {
            p.run(
                inp.range(3..3).unwrap(),
                out.range_mut(3..3).unwrap(),
                |s, c| kernels::scale(s, c.device(), 2.0),
            )
        });
        assert!(matches!(e, Error::InvalidLayout(_)), "{e:?}");
    }
}

#[test]
fn pipeline_buffers_of_another_device() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let mine = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut mine_out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let theirs = PinnedBuffer::<f32>::new(&other, N).unwrap();
    let mut theirs_out = PinnedBuffer::<f32>::new(&other, N).unwrap();
    let their_device = DeviceBuffer::<f32>::new(&other, N).unwrap();
    let mut p = pipeline(&dev, 2, 4);
    let origin = p.origin().clone();
    let work =
        |s: &Stream, c: cueflow::pipeline::Chunk<'_, f32>| kernels::scale(s, c.device(), 2.0);
    let e = refused(&dev, &origin, || p.run(&theirs, &mut mine_out, work));
    assert!(
        matches!(&e, Error::InvalidHandle(w) if w.contains("input")),
        "{e:?}"
    );
    let e = refused(&dev, &origin, || p.run(&mine, &mut theirs_out, work));
    assert!(
        matches!(&e, Error::InvalidHandle(w) if w.contains("output")),
        "{e:?}"
    );
    let e = refused(&dev, &origin, || {
        p.run_on(&mine, &their_device, &mut mine_out, work)
    });
    assert!(
        matches!(&e, Error::InvalidHandle(w) if w.contains("device buffer")),
        "{e:?}"
    );
}

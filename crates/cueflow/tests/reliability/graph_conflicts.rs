//! Item 1 (AC6, AC4): graph nodes that conflict are never run at once on the host backend, and
//! the sanitizer reports them at instantiation.

use super::*;

/// A host kernel that writes its whole buffer (one block) and counts the times another launch
/// of it was inside at the same moment: each holds `&mut` to the same tile, so any overlap is
/// two live `&mut` to one memory — undefined behaviour.
fn exclusive_writer() -> (Kernel, Arc<AtomicUsize>) {
    let inside = Arc::new(AtomicUsize::new(0));
    let together = Arc::new(AtomicUsize::new(0));
    let (i, t) = (inside.clone(), together.clone());
    let k = Kernel::new("rel_exclusive_writer")
        .host(move |_, a| {
            let tile = a.tile_mut::<u32>(0);
            if i.fetch_add(1, Ordering::SeqCst) > 0 {
                t.fetch_add(1, Ordering::SeqCst);
            }
            tile.fill(a.scalar::<u32>(1));
            std::thread::sleep(Duration::from_millis(3));
            if i.load(Ordering::SeqCst) > 1 {
                t.fetch_add(1, Ordering::SeqCst);
            }
            i.fetch_sub(1, Ordering::SeqCst);
        })
        .build();
    (k, together)
}

fn write_all(s: &Stream, k: &Kernel, buf: &DeviceBuffer<u32>, id: u32) -> Result<()> {
    s.launch(
        k,
        LaunchConfig::new(1, buf.len() as u32),
        KernelArgs::new().write(buf).scalar(id),
    )
}

/// Capture `first` and `second` on two streams forked from the origin by an event, with no
/// event between them (joined back into the origin at the end).
fn forked(
    dev: &Device,
    first: impl FnOnce(&Stream) -> Result<()>,
    second: impl FnOnce(&Stream) -> Result<()>,
) -> cueflow::Graph {
    let origin = Stream::new(dev).unwrap();
    let (a, b) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    origin.begin_capture(CaptureMode::Global).unwrap();
    let fork = origin.record().unwrap();
    a.wait_event(&fork).unwrap();
    b.wait_event(&fork).unwrap();
    first(&a).unwrap();
    second(&b).unwrap();
    origin.wait_event(&a.record().unwrap()).unwrap();
    origin.wait_event(&b.record().unwrap()).unwrap();
    origin.end_capture().unwrap()
}

#[test]
fn conflicting_graph_nodes_never_run_at_once_host() {
    let dev = Device::host_with_workers(4).unwrap();
    dev.set_sanitize(SanitizeMode::Off);
    let buf = DeviceBuffer::<u32>::new(&dev, 64).unwrap();
    let other = DeviceBuffer::<u32>::new(&dev, 64).unwrap();
    let (k, together) = exclusive_writer();
    // The same two launches on plain streams: AC6 serializes them.
    let (a, b) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    for _ in 0..10 {
        write_all(&a, &k, &buf, 1).unwrap();
        write_all(&b, &k, &buf, 2).unwrap();
    }
    dev.synchronize().unwrap();
    assert_eq!(
        together.load(Ordering::SeqCst),
        0,
        "streams ran them at once"
    );
    // In a graph.
    let g = forked(
        &dev,
        |s| write_all(s, &k, &buf, 1),
        |s| write_all(s, &k, &buf, 2),
    );
    let exec = g.instantiate().unwrap();
    let s = Stream::new(&dev).unwrap();
    for _ in 0..20 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(
        together.load(Ordering::SeqCst),
        0,
        "a graph replay ran two conflicting kernels at once"
    );
    // An update that makes disjoint nodes conflict gets the same guarantee.
    let disjoint = forked(
        &dev,
        |s| write_all(s, &k, &buf, 1),
        |s| write_all(s, &k, &other, 2),
    );
    let exec = disjoint.instantiate().unwrap();
    exec.update(&g).unwrap();
    for _ in 0..20 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(
        together.load(Ordering::SeqCst),
        0,
        "an updated graph ran two conflicting kernels at once"
    );
}

/// The sanitizer reports two unordered graph nodes writing one buffer at instantiation, naming
/// both (kernel and call site); error mode refuses the instantiation; a joined graph is clean.
fn graph_races_are_reported(dev: &Device) {
    let buf = DeviceBuffer::<f32>::new(dev, 256).unwrap();
    dev.set_sanitize(SanitizeMode::Warn);
    dev.take_sanitizer_reports();
    let line = line!() + 3;
    let g = forked(
        dev,
        |s| kernels::fill(s, &buf, 1.0),
        |s| kernels::scale(s, &buf, 2.0),
    );
    assert!(dev.sanitizer_reports().is_empty(), "capturing runs nothing");
    let exec = g.instantiate().unwrap();
    let reports = dev.take_sanitizer_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let r = &reports[0];
    assert!(r.earlier.actor.contains("graph node 0"), "{r}");
    assert!(r.later.actor.contains("graph node 1"), "{r}");
    assert!(r.earlier.operation.contains("cf_fill_f32"), "{r}");
    assert!(r.later.operation.contains("cf_scale_f32"), "{r}");
    assert_eq!(r.earlier.site.line(), line, "{r}");
    assert_eq!(r.later.site.line(), line + 1, "{r}");
    let s = Stream::new(dev).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    // Error mode: refused.
    dev.set_sanitize(SanitizeMode::Error);
    assert!(matches!(g.instantiate(), Err(Error::Race(_))));
    dev.take_sanitizer_reports();
    // A correct graph (the second stream waits for the first) is never reported.
    let origin = Stream::new(dev).unwrap();
    let (a, b) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let small = DeviceBuffer::<f32>::new(dev, 8).unwrap();
    origin.begin_capture(CaptureMode::Global).unwrap();
    a.wait_event(&origin.record().unwrap()).unwrap();
    kernels::fill(&a, &buf, 1.0).unwrap();
    b.wait_event(&a.record().unwrap()).unwrap();
    kernels::scale(&b, &buf, 2.0).unwrap();
    kernels::fill(&origin, &small, 0.0).unwrap();
    origin.wait_event(&b.record().unwrap()).unwrap();
    let ok = origin.end_capture().unwrap().instantiate().unwrap();
    ok.launch(&s).unwrap();
    s.synchronize().unwrap();
    let reports = dev.take_sanitizer_reports();
    assert!(reports.is_empty(), "{reports:#?}");
    dev.set_sanitize(SanitizeMode::Off);
}

#[test]
fn graph_races_are_reported_at_instantiation_host() {
    graph_races_are_reported(&Device::host().unwrap());
}

#[test]
fn graph_races_are_reported_at_instantiation_cuda() {
    if let Some(dev) = cuda() {
        graph_races_are_reported(&dev);
    }
}

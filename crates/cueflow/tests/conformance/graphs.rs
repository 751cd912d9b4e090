//! GR3 (every node kind, launch order), GR5 (legacy stream during capture), GR6 (update in
//! place), GR7 (memory nodes).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Error, GraphExec, KernelArgs, LaunchConfig,
    PinnedBuffer, Stream,
};

use crate::support::*;

/// Capture `body` on a fresh blocking stream and instantiate it.
fn captured(dev: &Device, body: impl FnOnce(&Stream)) -> GraphExec {
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    body(&cap);
    cap.end_capture().unwrap().instantiate().unwrap()
}

/// GR3: every kind of node replays, in its captured order, on every launch: host→device,
/// device→device, device→host and host→host copies, memset, kernels, host functions and
/// flag writes.
pub fn gr3_every_node_kind_replays(dev: &Device) {
    let s = side_stream(dev);
    let input = PinnedBuffer::from_slice(dev, &vec![2.0f32; N]).unwrap();
    let mut out = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let mut echo = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let (a, b) = (zeros(dev, N), zeros(dev, N));
    let bytes = upload(dev, &vec![0u32; N]);
    let flag = flag(dev);
    let runs = Arc::new(AtomicU32::new(0));
    let exec = {
        let runs = runs.clone();
        let (out, echo) = (&mut out, &mut echo);
        captured(dev, |c| {
            c.copy_h2d(&a, &input).unwrap();
            kernels::scale(c, &a, 3.0).unwrap(); // 6
            c.copy_d2d(&b, &a).unwrap();
            kernels::saxpy(c, 1.0, &a, &b).unwrap(); // 12
            c.copy_d2h(&mut *out, &b).unwrap();
            c.copy_h2h(&mut *echo, &*out).unwrap();
            c.memset(&bytes, 0xab).unwrap();
            c.write_value(&flag, 7).unwrap();
            c.host_fn(move || {
                runs.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        })
    };
    for round in 1..=3u32 {
        out.write().unwrap().fill(0.0);
        echo.write().unwrap().fill(0.0);
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_all(&out.read().unwrap(), 12.0);
        assert_all(&echo.read().unwrap(), 12.0);
        assert_all(&download(&bytes), 0xabab_abab);
        assert_eq!(download(&flag)[0], 7);
        assert_eq!(runs.load(Ordering::SeqCst), round);
    }
}

/// GR3: an upload prepares a graph's launches in its stream's order and runs none of its
/// nodes; launches after it, on its stream or ordered after it by an event on another, run
/// the graph as usual; inside a capture it is refused and the capture goes on.
pub fn gr3_upload_runs_no_node(dev: &Device) {
    let (s1, s2) = (side_stream(dev), side_stream(dev));
    let d = filled(dev, N, 1.0);
    let exec = captured(dev, |c| kernels::scale(c, &d, 2.0).unwrap());
    exec.upload(&s2).unwrap();
    s2.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
    let uploaded = s2.record().unwrap();
    s1.wait_event(&uploaded).unwrap();
    exec.launch(&s1).unwrap();
    exec.upload(&s1).unwrap(); // Behind the launch, in its stream's order.
    exec.launch(&s1).unwrap();
    s1.synchronize().unwrap();
    assert_all(&download(&d), 4.0);
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(exec.upload(&cap), Err(Error::Unsupported(_))));
    kernels::scale(&cap, &d, 2.0).unwrap();
    cap.end_capture()
        .unwrap()
        .instantiate()
        .unwrap()
        .launch(&s1)
        .unwrap();
    s1.synchronize().unwrap();
    assert_all(&download(&d), 8.0);
}

/// GR3: launches of one instantiated graph run one after another, whatever streams they are
/// launched on (CUDA orders them so; the graph's own memory depends on it, GR7).
pub fn gr3_launches_of_one_graph_are_ordered(dev: &Device) {
    let (s1, s2) = (side_stream(dev), side_stream(dev));
    let d = filled(dev, N, 1.0);
    let exec = captured(dev, |c| kernels::scale(c, &d, 2.0).unwrap());
    let gate = Gate::host(dev);
    gate.block(&s1);
    exec.launch(&s1).unwrap();
    exec.launch(&s2).unwrap();
    let second = s2.record().unwrap();
    assert_stays_pending(&second, Duration::from_millis(100), "the second launch");
    gate.open();
    dev.synchronize().unwrap();
    assert_all(&download(&d), 4.0);
}

/// GR3: launches of two graphs that alternate on one stream run in that order (one doubles
/// the buffer, the other adds one to it, so the order shows), and on CUDA they share the stream's
/// keepalive batches: no event is recorded between one graph's launch and the next graph's
/// (a marker record there sat between the host's wait and the next launch).
pub fn gr3_alternating_graphs_run_in_order(dev: &Device) {
    let s = side_stream(dev);
    let d = filled(dev, N, 1.0);
    let ones = filled(dev, N, 1.0);
    let double = captured(dev, |c| kernels::scale(c, &d, 2.0).unwrap());
    let plus_one = captured(dev, |c| kernels::saxpy(c, 1.0, &ones, &d).unwrap());
    let quiet = cueflow::EventFlags {
        timing: false,
        ..Default::default()
    };
    let e = cueflow::Event::with_flags(dev, quiet).unwrap();
    let logged = dev.driver_calls(true).is_some();
    let mut expected = 1.0f32;
    for _ in 0..10 {
        double.launch(&s).unwrap();
        plus_one.launch(&s).unwrap();
        expected = expected * 2.0 + 1.0;
    }
    // An event synchronize leaves the stream's open batch as it is.
    s.record_event(&e).unwrap();
    e.synchronize().unwrap();
    let names = dev.driver_calls(false).map(|c| c.1).unwrap_or_default();
    assert_all(&download(&d), expected);
    if !logged {
        println!(
            "SKIP: driver calls of alternating graph launches (no driver on the {} backend)",
            dev.properties().backend
        );
        return;
    }
    let count = |name: &str| names.iter().filter(|n| **n == name).count();
    let (launches, records) = (count("cuGraphLaunch"), count("cuEventRecord"));
    assert_eq!(launches, 20, "{names:?}");
    assert!(
        records <= 2,
        "a marker between the graphs' launches: {names:?}"
    );
}

/// GR5: during a global capture of a blocking stream, work on the legacy stream is refused and
/// invalidates the capture.
pub fn gr5_legacy_work_refused_during_capture(dev: &Device) {
    let legacy = Stream::legacy(dev);
    let d = zeros(dev, N);
    let blocking = Stream::new(dev).unwrap();
    blocking.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(&blocking, &d, 1.0).unwrap();
    assert!(matches!(
        kernels::fill(&legacy, &d, 2.0),
        Err(Error::CaptureIllegal(_))
    ));
    assert!(matches!(
        blocking.end_capture(),
        Err(Error::CaptureInvalidated(_))
    ));
    // Nothing legacy was enqueued, nothing captured ran.
    dev.synchronize().unwrap();
    assert_all(&download(&d), 0.0);
}

/// GR5: the rule concerns blocking streams in global or thread-local mode only: a captured
/// non-blocking stream, or a relaxed capture, leaves the legacy stream usable.
pub fn gr5_legacy_work_allowed_otherwise(dev: &Device) {
    let legacy = Stream::legacy(dev);
    let d = zeros(dev, N);
    let nb = side_stream(dev);
    nb.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(&legacy, &d, 1.0).unwrap();
    nb.end_capture().unwrap();
    let blocking = Stream::new(dev).unwrap();
    blocking.begin_capture(CaptureMode::Relaxed).unwrap();
    kernels::scale(&legacy, &d, 2.0).unwrap();
    blocking.end_capture().unwrap();
    legacy.synchronize().unwrap();
    assert_all(&download(&d), 2.0);
}

/// GR6: kernel scalars, same-size kernel buffers, and copy and memset ranges of the same
/// length update in place; launches after the update use the new values.
pub fn gr6_update_in_place(dev: &Device) {
    let s = side_stream(dev);
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (src1, src2) = (filled(dev, N, 5.0), filled(dev, N, 9.0));
    let (dst1, dst2) = (zeros(dev, N), zeros(dev, N));
    let (m1, m2) = (upload(dev, &vec![0u32; N]), upload(dev, &vec![0u32; N]));
    let graph = |x: &DeviceBuffer<f32>,
                 f: f32,
                 src: &DeviceBuffer<f32>,
                 dst: &DeviceBuffer<f32>,
                 m: &DeviceBuffer<u32>,
                 v: u8| {
        let cap = Stream::new(dev).unwrap();
        cap.begin_capture(CaptureMode::Global).unwrap();
        kernels::scale(&cap, x, f).unwrap();
        cap.copy_d2d(dst, src).unwrap();
        cap.memset(m, v).unwrap();
        cap.end_capture().unwrap()
    };
    let exec = graph(&a, 2.0, &src1, &dst1, &m1, 0x11)
        .instantiate()
        .unwrap();
    exec.launch(&s).unwrap();
    exec.update(&graph(&b, 3.0, &src2, &dst2, &m2, 0x22))
        .unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&a), 2.0); // only the launch before the update
    assert_all(&download(&b), 3.0);
    assert_all(&download(&dst1), 5.0);
    assert_all(&download(&dst2), 9.0);
    assert_all(&download(&m1), 0x1111_1111);
    assert_all(&download(&m2), 0x2222_2222);
    // One kernel node's arguments.
    let scale_node = exec
        .graph()
        .nodes()
        .iter()
        .position(|n| n.what == "cf_scale_f32")
        .unwrap();
    exec.set_kernel_args(
        scale_node,
        &kernels::SCALE_F32,
        LaunchConfig::for_elements(N, kernels::BLOCK),
        KernelArgs::new().write(&a).scalar(10.0f32).scalar(N as u64),
    )
    .unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&a), 20.0);
    assert_all(&download(&b), 3.0);
}

/// GR6: an update that changes the graph's shape is refused with a typed error and leaves the
/// instantiation as it was.
pub fn gr6_shape_changes_refused(dev: &Device) {
    let s = side_stream(dev);
    let d = filled(dev, N, 1.0);
    let short = zeros(dev, N / 2);
    let exec = captured(dev, |c| kernels::scale(c, &d, 2.0).unwrap());
    let capture = |body: &dyn Fn(&Stream)| {
        let cap = Stream::new(dev).unwrap();
        cap.begin_capture(CaptureMode::Global).unwrap();
        body(&cap);
        cap.end_capture().unwrap()
    };
    let refused = [
        capture(&|c| {
            kernels::scale(c, &d, 2.0).unwrap();
            kernels::scale(c, &d, 2.0).unwrap();
        }), // another node count
        capture(&|c| kernels::fill(c, &d, 2.0).unwrap()), // another kernel
        capture(&|c| kernels::scale(c, &short, 2.0).unwrap()), // another buffer size
        capture(&|c| c.memset(&d, 0).unwrap()),           // another kind of node
    ];
    for g in &refused {
        assert!(matches!(exec.update(g), Err(Error::GraphUpdate(_))));
    }
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 2.0); // still the original graph
    assert_all(&download(&short), 0.0);
}

/// GR7: allocation and free inside a capture become graph nodes: every launch allocates, uses
/// and frees the memory in graph order.
pub fn gr7_memory_nodes(dev: &Device) {
    let s = side_stream(dev);
    let out = zeros(dev, N);
    let exec = captured(dev, |c| {
        let t = c.alloc_async::<f32>(N).unwrap();
        kernels::fill(c, &t, 1.5).unwrap();
        kernels::saxpy(c, 2.0, &t, &out).unwrap(); // out += 3
        c.free_async(t).unwrap();
    });
    let info = exec.graph().nodes();
    assert!(info[0].what.starts_with("alloc"), "{info:?}");
    assert_eq!(info.last().unwrap().what, "free");
    for _ in 0..4 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_all(&download(&out), 12.0);
}

/// GR7: memory a capture allocated is usable only by the graph's own nodes.
pub fn gr7_graph_memory_is_the_graphs_own(dev: &Device) {
    let (s, other) = (Stream::new(dev).unwrap(), side_stream(dev));
    s.begin_capture(CaptureMode::Global).unwrap();
    let t = s.alloc_async::<f32>(N).unwrap();
    kernels::fill(&s, &t, 1.0).unwrap();
    s.free_async(t.clone()).unwrap();
    let exec = s.end_capture().unwrap().instantiate().unwrap();
    assert!(matches!(
        kernels::fill(&other, &t, 2.0),
        Err(Error::InvalidHandle(_))
    ));
    exec.launch(&other).unwrap();
    other.synchronize().unwrap();
}

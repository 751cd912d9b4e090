//! GR10: memory a graph's allocation node hands out — freed by a stream after the launch, by
//! another graph's free node, or by the next launch with auto-free-on-launch — with its
//! lifetime (MM2, GR4) and the sanitizer (AC3) following it across launches.

use std::time::Duration;

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Error, Graph, GraphExec, InstantiateFlags,
    KernelArgs, LaunchConfig, SanitizeMode, Stream,
};

use crate::support::*;

/// A captured graph that allocates `N` floats, fills them with `v` and does not free them.
fn handing_out(dev: &Device, v: f32) -> (Graph, DeviceBuffer<f32>) {
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    let t = cap.alloc_async::<f32>(N).unwrap();
    kernels::fill(&cap, &t, v).unwrap();
    (cap.end_capture().unwrap(), t)
}

fn launch_and_check(exec: &GraphExec, s: &Stream, t: &DeviceBuffer<f32>, v: f32) {
    exec.launch(s).unwrap();
    kernels::scale(s, t, 2.0).unwrap(); // a stream use after the launch, in its order
    let copy = zeros(s.device(), N);
    s.copy_d2d(&copy, t).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&copy), 2.0 * v);
}

/// GR10: memory a captured graph allocates and does not free is usable by streams after the
/// launch, and a stream free after the launch lets the graph launch again.
pub fn gr10_freed_by_a_stream_after_the_launch(dev: &Device) {
    let s = side_stream(dev);
    let (graph, t) = handing_out(dev, 3.0);
    let exec = graph.instantiate().unwrap();
    for _ in 0..3 {
        launch_and_check(&exec, &s, &t, 3.0);
        s.free_async(t.clone()).unwrap();
    }
    s.synchronize().unwrap();
}

/// GR10: launching again while the memory is still allocated is refused with a typed error;
/// with auto-free-on-launch the launch frees it; use or free after the free is refused.
pub fn gr10_relaunch_use_and_free_follow_the_lifetime(dev: &Device) {
    let s = side_stream(dev);
    let (graph, t) = handing_out(dev, 1.0);
    let exec = graph.instantiate().unwrap();
    // Before any launch: not allocated.
    assert!(matches!(
        kernels::fill(&s, &t, 0.0),
        Err(Error::NotPermitted { rule: "GR10", .. })
    ));
    exec.launch(&s).unwrap();
    assert!(matches!(
        exec.launch(&s),
        Err(Error::NotPermitted { rule: "GR10", .. })
    ));
    s.free_async(t.clone()).unwrap();
    assert!(matches!(
        kernels::fill(&s, &t, 0.0),
        Err(Error::NotPermitted { rule: "GR10", .. })
    ));
    assert!(matches!(
        s.free_async(t.clone()),
        Err(Error::NotPermitted { rule: "GR10", .. })
    ));
    s.synchronize().unwrap();
    drop(exec);
    // Auto-free on launch.
    let (graph, t) = handing_out(dev, 5.0);
    let exec = graph
        .instantiate_with(InstantiateFlags {
            auto_free_on_launch: true,
        })
        .unwrap();
    for _ in 0..3 {
        launch_and_check(&exec, &s, &t, 5.0);
    }
    s.free_async(t).unwrap();
    s.synchronize().unwrap();
}

/// GR10: another graph's free node frees the memory (GR8 explicit graph), after which the
/// allocating graph launches again; a free graph launched with nothing to free is refused.
pub fn gr10_freed_by_another_graphs_free_node(dev: &Device) {
    let s = side_stream(dev);
    let (graph, t) = handing_out(dev, 2.0);
    let mut freer = Graph::new(dev);
    freer.add_free(&[], &t).unwrap();
    assert!(
        matches!(freer.instantiate(), Err(Error::Graph(_))),
        "the allocating graph is not instantiated yet"
    );
    let exec = graph.instantiate().unwrap();
    let free_exec = freer.instantiate().unwrap();
    assert!(matches!(
        free_exec.launch(&s),
        Err(Error::NotPermitted { rule: "GR10", .. })
    ));
    for _ in 0..2 {
        launch_and_check(&exec, &s, &t, 2.0);
        free_exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
}

/// GR10 with AC3: a stream that uses the handed-out memory without being ordered after the
/// allocating launch races with it (error mode: refused); ordered by an event, it does not.
pub fn gr10_unordered_use_is_a_race(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Error);
    let (s, other) = (side_stream(dev), side_stream(dev));
    let (graph, t) = handing_out(dev, 1.0);
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    match kernels::fill(&other, &t, 4.0) {
        Err(Error::Race(_)) => {}
        other => panic!("an unordered use of graph memory must race, got {other:?}"),
    }
    other.wait_event(&s.record().unwrap()).unwrap();
    kernels::fill(&other, &t, 4.0).unwrap();
    other.free_async(t).unwrap();
    dev.synchronize().unwrap();
}

/// GR10 with CP3 (issue 27 item 6): memory a launch handed out is read and written by pageable
/// copies and `read_value` as `copy_d2h`, `memset` and kernels use it, in the stream's order
/// after the launch; before the first launch and after its free they are refused as those are
/// (`NotPermitted` GR10). They used to refuse it always, as memory usable only inside a
/// capture (GR7).
pub fn gr10_pageable_copies_and_read_value_of_handed_out_memory(dev: &Device) {
    let s = side_stream(dev);
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    let t = cap.alloc_async::<f32>(N).unwrap();
    kernels::fill(&cap, &t, 3.0).unwrap();
    let w = cap.alloc_async::<u32>(4).unwrap();
    cap.memset(&w, 0x5a).unwrap();
    let exec = cap.end_capture().unwrap().instantiate().unwrap();
    let gr10 = |r: Result<(), Error>| matches!(r, Err(Error::NotPermitted { rule: "GR10", .. }));
    let mut out = vec![0.0f32; N];
    assert!(gr10(s.read_pageable(&mut out, &t)), "not launched yet");
    assert!(gr10(s.write_pageable(&t, &out)), "not launched yet");
    let word = w.slice(3..4).unwrap();
    assert!(gr10(s.read_value(&word).map(drop)), "not launched yet");
    exec.launch(&s).unwrap();
    s.read_pageable(&mut out, &t).unwrap();
    assert_all(&out, 3.0);
    assert_eq!(s.read_value(&word).unwrap(), 0x5a5a_5a5a);
    s.write_pageable(&t.slice(N / 2..).unwrap(), &vec![7.0f32; N / 2])
        .unwrap();
    s.read_pageable(&mut out, &t).unwrap();
    assert_all(&out[..N / 2], 3.0);
    assert_all(&out[N / 2..], 7.0);
    s.free_async(t.clone()).unwrap();
    s.free_async(w.clone()).unwrap();
    assert!(gr10(s.read_pageable(&mut out, &t)), "freed");
    assert!(gr10(s.write_pageable(&t, &out)), "freed");
    assert!(gr10(s.read_value(&word).map(drop)), "freed");
    s.synchronize().unwrap();
}

fn fill_args(d: &DeviceBuffer<f32>, v: f32) -> (LaunchConfig, KernelArgs) {
    (
        LaunchConfig::for_elements(d.len(), kernels::BLOCK),
        KernelArgs::new().write(d).scalar(v).scalar(d.len() as u64),
    )
}

/// GR7 (issue 27 item 1): a graph with memory nodes has one instantiation at a time, as CUDA
/// allows one: a second — of the graph or of a copy of it — is refused while the first lives
/// (it would hand out the same buffer backed by other memory, and a copy of the buffer after
/// the first's launch would read the second's), and allowed once the first is gone.
pub fn gr7_one_instantiation_of_a_graph_with_memory_nodes(dev: &Device) {
    let s = side_stream(dev);
    let (graph, t) = handing_out(dev, 5.0);
    let exec = graph.instantiate().unwrap();
    for g in [graph.clone(), graph.clone()] {
        match g.instantiate() {
            Err(Error::NotPermitted { rule: "GR7", .. }) => {}
            other => panic!("a second instantiation of a graph with memory nodes: {other:?}"),
        }
    }
    exec.launch(&s).unwrap();
    let copy = zeros(dev, N);
    s.copy_d2d(&copy, &t).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&copy), 5.0);
    s.free_async(t.clone()).unwrap();
    s.synchronize().unwrap();
    drop(exec);
    let again = graph.instantiate().unwrap();
    launch_and_check(&again, &s, &t, 5.0);
    s.free_async(t).unwrap();
    s.synchronize().unwrap();
    // Memory the graph frees itself counts too; a graph without memory nodes has any number.
    let mut own = Graph::new(dev);
    let (al, tmp) = own.add_alloc::<f32>(&[], N).unwrap();
    own.add_free(&[al], &tmp).unwrap();
    let _first = own.instantiate().unwrap();
    assert!(matches!(
        own.instantiate(),
        Err(Error::NotPermitted { rule: "GR7", .. })
    ));
    let mut plain = Graph::new(dev);
    plain.add_memset(&[], &copy, 0).unwrap();
    let _execs = (plain.instantiate().unwrap(), plain.instantiate().unwrap());
}

/// GR10 (issue 27 item 13): dropping the last handle of memory a launch handed out frees it,
/// after the work that used it (as cudaFree, without blocking): the graph launches again, and
/// that launch waits for the free, which waits for a use still held by a gate. With no handle
/// left, each launch frees what it allocated, so it launches again and again.
pub fn gr10_dropping_the_buffer_frees_the_memory(dev: &Device) {
    let (s, o) = (side_stream(dev), side_stream(dev));
    let mut g = Graph::new(dev);
    let (al, t) = g.add_alloc::<f32>(&[], N).unwrap();
    let (cfg, five) = fill_args(&t, 5.0);
    let fill = g.add_kernel(&[al], &kernels::FILL_F32, cfg, five).unwrap();
    let (_, nine) = fill_args(&t, 9.0);
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    let copy = zeros(dev, N);
    o.wait_event(&s.record().unwrap()).unwrap();
    let gate = Gate::host(dev);
    gate.block(&o);
    o.copy_d2d(&copy, &t).unwrap();
    drop(t);
    // The next launch writes 9 into the memory: only after the gated copy read the 5s.
    exec.set_kernel_args(fill, &kernels::FILL_F32, cfg, nine)
        .unwrap();
    exec.launch(&s).unwrap();
    let relaunched = s.record().unwrap();
    assert_stays_pending(
        &relaunched,
        Duration::from_millis(100),
        "a launch after the buffer was dropped, while a use of it is held",
    );
    gate.open();
    dev.synchronize().unwrap();
    gate.assert_not_timed_out();
    assert_all(&download(&copy), 5.0);
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
}

/// GR10 (issue 27 item 13): a graph's memory has a real address once the graph is
/// instantiated — the same at every launch of that instantiation, as CUDA fixes it — and
/// `DeviceBuffer::free` frees it as cudaFree does (the device's work first): the graph
/// launches again at once; freeing it again, or freeing memory never handed out, is refused.
pub fn gr10_fixed_address_and_synchronous_free(dev: &Device) {
    let s = side_stream(dev);
    let (graph, t) = handing_out(dev, 4.0);
    assert_eq!(t.device_addr(), 0, "no address before instantiation");
    let exec = graph.instantiate().unwrap();
    let addr = t.device_addr();
    assert_ne!(addr, 0, "graph memory has an address once instantiated");
    assert_eq!(
        t.slice(2..).unwrap().device_addr(),
        addr + 8,
        "a view's address is within the memory"
    );
    for _ in 0..3 {
        launch_and_check(&exec, &s, &t, 4.0);
        assert_eq!(
            t.device_addr(),
            addr,
            "the address is fixed across launches"
        );
        t.clone().free().unwrap();
    }
    assert!(matches!(
        t.clone().free(),
        Err(Error::NotPermitted { rule: "GR10", .. })
    ));
    // Memory the graph frees itself has an address too, but only the graph may free it.
    let mut own = Graph::new(dev);
    let (al, tmp) = own.add_alloc::<f32>(&[], N).unwrap();
    own.add_free(&[al], &tmp).unwrap();
    let _exec = own.instantiate().unwrap();
    assert_ne!(tmp.device_addr(), 0);
    assert!(matches!(tmp.free(), Err(Error::InvalidHandle(_))));
}

/// GR10 (issue 27): a graph whose handed-out memory from its earlier instantiation's launch is
/// still allocated is not instantiated again — that memory's handles would lose it — until it
/// is freed (or its handles dropped).
pub fn gr10_reinstantiation_waits_for_the_memory_to_be_freed(dev: &Device) {
    let s = side_stream(dev);
    let (graph, t) = handing_out(dev, 3.0);
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    drop(exec);
    match graph.instantiate() {
        Err(Error::NotPermitted { rule: "GR10", what }) => {
            assert!(what.contains("still allocated"), "{what}")
        }
        other => panic!("instantiated again while its memory is allocated: {other:?}"),
    }
    // The memory outlives its instantiation (as CUDA's does): still usable, then freed.
    let copy = zeros(dev, N);
    s.copy_d2d(&copy, &t).unwrap();
    s.free_async(t.clone()).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&copy), 3.0);
    let exec = graph.instantiate().unwrap();
    launch_and_check(&exec, &s, &t, 3.0);
    drop(t); // the last handle: freed, so the graph can be instantiated again
    drop(exec);
    s.synchronize().unwrap();
    graph.instantiate().unwrap();
}

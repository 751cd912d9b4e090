//! GR12: the device memory graph allocations take, its high-water marks, and trimming it.
//!
//! On CUDA the figures are the whole GPU's and earlier tests may have left graph memory
//! reserved, so each test trims first and compares with what it found then.

use cueflow::{kernels, CaptureMode, Device, DeviceBuffer, Graph, PoolStats, Stream};

use crate::support::*;

/// Bytes each graph allocates: several of CUDA's reservation granules.
const BYTES: usize = 8 << 20;

/// Trim, start the marks again, and return what is left: the test's baseline.
fn baseline(dev: &Device) -> PoolStats {
    dev.synchronize().unwrap();
    dev.trim_graph_memory().unwrap();
    dev.reset_graph_memory_high().unwrap();
    dev.graph_memory().unwrap()
}

/// A captured graph that allocates `BYTES`, fills them with `v`, and frees them itself
/// (`free`) or hands them out.
fn allocating(dev: &Device, v: f32, free: bool) -> (Graph, DeviceBuffer<f32>) {
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    let t = cap.alloc_async::<f32>(BYTES / 4).unwrap();
    kernels::fill(&cap, &t, v).unwrap();
    if free {
        cap.free_async(t.clone()).unwrap();
    }
    (cap.end_capture().unwrap(), t)
}

/// GR12: a launched graph's allocation shows in `reserved` and its high-water mark; once the
/// instantiation is gone and the memory trimmed, `reserved` is back at the baseline while the
/// mark remembers it, until the marks are reset.
pub fn gr12_graph_memory_is_reported_marked_and_trimmed(dev: &Device) {
    let base = baseline(dev);
    let s = side_stream(dev);
    let (graph, _t) = allocating(dev, 1.0, true);
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    let held = dev.graph_memory().unwrap();
    assert!(
        held.reserved >= base.reserved + BYTES as u64,
        "a launched graph's {BYTES} bytes are reserved: {held:?}, before {base:?}"
    );
    assert!(held.reserved_high >= held.reserved && held.used_high >= held.used);
    assert!(held.used <= held.reserved, "{held:?}");
    drop((exec, graph));
    dev.synchronize().unwrap();
    dev.trim_graph_memory().unwrap();
    let trimmed = dev.graph_memory().unwrap();
    assert!(
        trimmed.reserved <= base.reserved,
        "trimming gives back what no allocation uses: {trimmed:?}, before {base:?}"
    );
    assert!(
        trimmed.reserved_high >= held.reserved,
        "the mark stays: {trimmed:?}"
    );
    dev.reset_graph_memory_high().unwrap();
    let reset = dev.graph_memory().unwrap();
    assert!(
        reset.reserved_high < held.reserved && reset.used_high < held.reserved,
        "reset marks start from what is held now: {reset:?}"
    );
}

/// GR12 with GR10: memory a graph handed out is in use until it is freed, so trimming keeps
/// it (and its contents); freed, and its instantiation gone, a trim gives it back.
pub fn gr12_trim_keeps_memory_a_graph_handed_out(dev: &Device) {
    let base = baseline(dev);
    let s = side_stream(dev);
    let (graph, t) = allocating(dev, 5.0, false);
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    dev.trim_graph_memory().unwrap();
    let kept = dev.graph_memory().unwrap();
    assert!(
        kept.used >= base.used + BYTES as u64 && kept.reserved >= base.reserved + BYTES as u64,
        "handed-out memory stays through a trim: {kept:?}, before {base:?}"
    );
    let copy = zeros(dev, 16);
    s.copy_d2d(&copy, &t.slice(0..16).unwrap()).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&copy), 5.0);
    s.free_async(t).unwrap();
    drop((exec, graph));
    dev.synchronize().unwrap();
    dev.trim_graph_memory().unwrap();
    let after = dev.graph_memory().unwrap();
    assert!(
        after.reserved <= base.reserved && after.used <= base.used,
        "freed and trimmed, it is given back: {after:?}, before {base:?}"
    );
}

//! MD2 with stream-ordered memory: any device's stream may free another device's
//! stream-ordered memory in its order (as `cudaFreeAsync` takes any stream), the memory goes
//! back to its own device's pool once no device's work uses it, and a free nothing orders
//! after that work is a race the sanitizer reports, naming each stream's device. Each test
//! gets two devices of one backend, as `multi.rs`.

use cueflow::{kernels, Device, SanitizeMode};

use crate::support::*;

/// MD2, MM1, MM2: another device's stream may free a device's stream-ordered memory (as
/// `cudaFreeAsync` takes any stream), and the memory goes back only once every device's work on
/// it is done: `a` fills a buffer behind a gate, `b` waits for it, copies it to its own memory
/// and frees it; `a` then allocates and fills another buffer of the same size. The copy reads
/// the first fill (the memory was not handed out again under it), and `a`'s pool is back to
/// where it started once both devices are synchronized.
pub fn md2_another_devices_stream_frees_in_its_order(a: &Device, b: &Device) {
    let (sa, sb) = (side_stream(a), side_stream(b));
    let pool = a.default_pool();
    let gate = Gate::kernel(a);
    a.synchronize().unwrap();
    let used = pool.stats().unwrap().used;
    gate.block(&sa);
    let xa = sa.alloc_async::<f32>(N).unwrap();
    kernels::fill(&sa, &xa, 3.0).unwrap();
    let filled = sa.record().unwrap();
    let yb = zeros(b, N);
    sb.wait_event(&filled).unwrap();
    sb.copy_peer(&yb, &xa).unwrap();
    sb.free_async(xa).unwrap();
    let next = sa.alloc_async::<f32>(N).unwrap();
    kernels::fill(&sa, &next, 9.0).unwrap();
    assert!(pool.stats().unwrap().used > used, "memory in use went back");
    gate.open();
    sb.synchronize().unwrap();
    assert_all(&download(&yb), 3.0);
    sa.free_async(next).unwrap();
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    assert_eq!(
        pool.stats().unwrap().used,
        used,
        "both buffers went back to a's pool"
    );
    assert_eq!(a.sticky_error(), None);
    assert_eq!(b.sticky_error(), None);
}

/// MD2, AC4: a free on another device's stream that nothing orders after the device's own
/// work on the memory is a race, and the report names each stream with its device (stream ids
/// are per device).
pub fn md2_an_unordered_free_on_another_devices_stream_is_reported(a: &Device, b: &Device) {
    let (sa, sb) = (side_stream(a), side_stream(b));
    for d in [a, b] {
        d.set_sanitize(SanitizeMode::Warn);
        let _ = d.take_sanitizer_reports();
    }
    let xa = sa.alloc_async::<f32>(N).unwrap();
    kernels::fill(&sa, &xa, 1.0).unwrap();
    sb.free_async(xa).unwrap();
    let reports = b.take_sanitizer_reports();
    for d in [a, b] {
        d.set_sanitize(SanitizeMode::Off);
    }
    sa.synchronize().unwrap();
    sb.synchronize().unwrap();
    let r = reports.first().expect("the unordered free was reported");
    let (da, db) = (a.spec().to_string(), b.spec().to_string());
    assert!(r.earlier.actor.ends_with(&format!(" of {da}")), "{r}");
    assert!(r.later.actor.ends_with(&format!(" of {db}")), "{r}");
    assert!(r.fix.contains(&format!("of {db} wait on it")), "{r}");
}

/// MD2, HM5: memory of a pool the program created, freed on another device's stream after a
/// wait for its last use, goes back to that pool.
pub fn md2_created_pool_memory_freed_on_another_devices_stream(a: &Device, b: &Device) {
    let (sa, sb) = (side_stream(a), side_stream(b));
    let pool = a.create_pool().unwrap();
    let buf = sa.alloc_from_pool::<f32>(&pool, N).unwrap();
    kernels::fill(&sa, &buf, 2.0).unwrap();
    let filled = sa.record().unwrap();
    sb.wait_event(&filled).unwrap();
    sb.free_async(buf).unwrap();
    sb.synchronize().unwrap();
    sa.synchronize().unwrap();
    a.synchronize().unwrap();
    assert_eq!(
        pool.stats().unwrap().used,
        0,
        "the memory went back to its pool"
    );
}

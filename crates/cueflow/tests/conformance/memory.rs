//! MM1–MM3: stream-ordered allocation, lifetime, host access to pinned memory.

use std::collections::HashSet;
use std::time::Duration;

use cueflow::{kernels, Device, DeviceBuffer, PinnedBuffer, Stream};

use crate::support::*;

/// Byte range of a buffer in device address space.
fn range_of<T: bytemuck::Pod>(b: &DeviceBuffer<T>) -> std::ops::Range<u64> {
    b.device_addr()..b.device_addr() + b.byte_len() as u64
}

fn disjoint(a: &std::ops::Range<u64>, b: &std::ops::Range<u64>) -> bool {
    a.end <= b.start || b.end <= a.start
}

// ---------------------------------------------------------------------------------------------
// MM1 Stream-ordered allocation

/// MM1: an allocation made on a stream — even a held one — is usable by later work on it.
pub fn mm1_alloc_used_in_stream_order(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    let a = s.alloc_async::<f32>(N).unwrap(); // returns while the stream is held
    assert_eq!(a.len(), N);
    kernels::fill(&s, &a, 2.0).unwrap();
    kernels::scale(&s, &a, 2.0).unwrap();
    let out = zeros(dev, N);
    s.copy_d2d(&out, &a).unwrap();
    s.free_async(a).unwrap();
    assert!(!gate.is_open());
    gate.open();
    s.synchronize().unwrap();
    assert_all(&download(&out), 4.0);
}

/// MM1: another stream uses the allocation after an event wait on the allocating stream.
pub fn mm1_other_stream_after_event_wait(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), side_stream(dev));
    let gate = Gate::kernel(dev);
    gate.block(&s1);
    let a = s1.alloc_async::<f32>(N).unwrap();
    kernels::fill(&s1, &a, 3.0).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::scale(&s2, &a, 3.0).unwrap();
    let out = zeros(dev, N);
    s2.copy_d2d(&out, &a).unwrap();
    s2.free_async(a).unwrap();
    gate.open();
    s2.synchronize().unwrap();
    assert_all(&download(&out), 9.0);
}

/// MM1: allocate, use and free in a loop with no host synchronization; freed memory is
/// recycled by later allocations and every iteration still sees only its own data.
pub fn mm1_alloc_free_churn_without_sync(dev: &Device) {
    const ITERS: usize = 48;
    const LEN: usize = 1024;
    let s = Stream::new(dev).unwrap();
    let out = zeros(dev, ITERS * LEN);
    let mut addrs = HashSet::new();
    for i in 0..ITERS {
        let a = s.alloc_async::<f32>(LEN).unwrap();
        addrs.insert(a.device_addr());
        kernels::fill(&s, &a, i as f32).unwrap();
        s.copy_d2d(&out.slice(i * LEN..(i + 1) * LEN).unwrap(), &a)
            .unwrap();
        s.free_async(a).unwrap();
    }
    s.synchronize().unwrap();
    let v = download(&out);
    for i in 0..ITERS {
        assert_all(&v[i * LEN..(i + 1) * LEN], i as f32);
    }
    eprintln!(
        "mm1 churn: {ITERS} allocations used {} distinct addresses",
        addrs.len()
    );
}

/// MM1 with MM2: memory freed on a stream is not handed to another stream while the freeing
/// stream's earlier work may still touch it.
pub fn mm1_free_waits_for_earlier_work(dev: &Device) {
    let (s, other) = (Stream::new(dev).unwrap(), side_stream(dev));
    let out = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    let a = s.alloc_async::<f32>(N).unwrap();
    let a_range = range_of(&a);
    kernels::fill(&s, &a, 1.0).unwrap();
    s.copy_d2d(&out, &a).unwrap();
    s.free_async(a).unwrap();
    // Another stream allocates the same size now; its memory must not be `a`'s.
    let b = other.alloc_async::<f32>(N).unwrap();
    assert!(
        disjoint(&range_of(&b), &a_range),
        "memory freed behind pending work was handed out again"
    );
    kernels::fill(&other, &b, 9.0).unwrap();
    other.synchronize().unwrap();
    gate.open();
    s.synchronize().unwrap();
    assert_all(&download(&out), 1.0);
    assert_all(&download(&b), 9.0);
}

// ---------------------------------------------------------------------------------------------
// MM2 Lifetime

/// MM2: device and pinned buffers dropped by the host while work on them is pending stay
/// alive until that work is done.
pub fn mm2_dropped_buffers_outlive_work(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let keep = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    {
        let src = PinnedBuffer::from_slice(dev, &vec![1.5f32; N]).unwrap();
        let tmp = DeviceBuffer::<f32>::new(dev, N).unwrap();
        s.copy_h2d(&tmp, &src).unwrap();
        kernels::scale(&s, &tmp, 2.0).unwrap();
        s.copy_d2d(&keep, &tmp).unwrap();
        // `src` and `tmp` are dropped here, with all three operations still held.
    }
    // Churn the allocator so freed memory would be reused and overwritten.
    for _ in 0..8 {
        let junk = PinnedBuffer::from_slice(dev, &vec![-7.0f32; N]).unwrap();
        let d = filled(dev, N, -7.0);
        drop((junk, d));
    }
    gate.open();
    s.synchronize().unwrap();
    assert_all(&download(&keep), 3.0);
}

/// MM2: `free_async` on one stream while another stream's pending work still uses the
/// buffer: the memory is neither released nor reused until that work is done.
/// The free races with the use (AC3: CUDA could hand the memory out again under it), and the
/// sanitizer says so.
pub fn mm2_free_while_other_stream_uses(dev: &Device) {
    let ((out, y), races) = races_on_purpose(dev, || {
        let (user, freer) = (Stream::new(dev).unwrap(), side_stream(dev));
        let x = filled(dev, N, 0.0);
        let out = zeros(dev, N);
        let gate = Gate::kernel(dev);
        gate.block(&user);
        kernels::fill(&user, &x, 5.0).unwrap();
        user.copy_d2d(&out, &x).unwrap();
        let x_range = range_of(&x);
        freer.free_async(x).unwrap(); // the race
        let y = freer.alloc_async::<f32>(N).unwrap();
        assert!(
            disjoint(&range_of(&y), &x_range),
            "memory in use was handed out again"
        );
        kernels::fill(&freer, &y, 9.0).unwrap();
        freer.synchronize().unwrap();
        gate.open();
        user.synchronize().unwrap();
        (out, y)
    });
    assert!(
        races
            .iter()
            .any(|r| r.later.operation.contains("free_async")),
        "{races:?}"
    );
    assert_all(&download(&out), 5.0);
    assert_all(&download(&y), 9.0);
}

// ---------------------------------------------------------------------------------------------
// MM3 Host access

/// MM3: a host read of pinned memory waits for a pending device write to it.
pub fn mm3_host_read_waits_for_device_write(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = filled(dev, N, 4.0);
    let mut p = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.copy_d2h(&mut p, &d).unwrap();
    let t = gate.open_after(Duration::from_millis(50));
    let v = p.read().unwrap();
    assert!(
        gate.is_open(),
        "the host read pinned memory a pending copy writes"
    );
    assert_all(&v, 4.0);
    t.join().unwrap();
}

/// MM3: a host write of pinned memory waits for a pending device read of it.
pub fn mm3_host_write_waits_for_device_read(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let mut p = PinnedBuffer::from_slice(dev, &vec![3.0f32; N]).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.copy_h2d(&d, &p).unwrap();
    let t = gate.open_after(Duration::from_millis(50));
    {
        let mut w = p.write().unwrap();
        assert!(
            gate.is_open(),
            "the host wrote pinned memory a pending copy reads"
        );
        w.fill(-1.0);
    }
    s.synchronize().unwrap();
    assert_all(&download(&d), 3.0);
    t.join().unwrap();
}

/// MM3: a host read does not wait for pending device *reads*, nor for device writes to other
/// elements of the buffer.
pub fn mm3_host_read_waits_only_for_conflicts(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let half = filled(dev, N / 2, 8.0);
    let mut p = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.copy_h2d(&d, &p).unwrap(); // device reads all of p
    s.copy_d2h(p.range_mut(0..N / 2).unwrap(), &half).unwrap(); // device writes p[..N/2]
    assert_all(&p.read_range(N / 2..).unwrap(), 1.0); // returns while held
    assert!(!gate.is_open());
    gate.open();
    {
        let v = p.read().unwrap();
        assert_all(&v[..N / 2], 8.0);
        assert_all(&v[N / 2..], 1.0);
    }
    s.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
}

/// MM3: raw access is the explicit opt-out: it does not wait, and the sanitizer reports it
/// as the race it is by AC2 (only the closed gate keeps the copy off the bytes).
pub fn mm3_raw_access_does_not_wait(dev: &Device) {
    let ((), races) = races_on_purpose(dev, || {
        let s = Stream::new(dev).unwrap();
        let d = filled(dev, N, 2.0);
        let mut p = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
        let gate = Gate::kernel(dev);
        gate.block(&s);
        s.copy_d2h(&mut p, &d).unwrap();
        // SAFETY: the copy that writes `p` is behind the closed gate.
        assert_all(unsafe { p.as_slice_unchecked() }, 1.0);
        assert!(!gate.is_open());
        gate.open();
        assert_all(&p.read().unwrap(), 2.0);
    });
    assert!(
        races.iter().any(|r| r.later.stream.is_none()),
        "the raw read is reported: {races:?}"
    );
}

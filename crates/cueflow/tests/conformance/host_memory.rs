//! HM1–HM6: registered, portable, mapped and managed host memory, memory pools, peer access
//! for kernels.

use std::sync::LazyLock;
use std::time::Duration;

use cueflow::{
    kernels, Advice, AttachMode, Device, Error, Kernel, KernelArgs, LaunchConfig, ManagedBuffer,
    MemLocation, PinnedBuffer, PinnedFlags, RegisteredBuffer, Stream,
};

use crate::support::*;

/// `x[i] *= f` over mapped (or device) memory, in place: CUDA C on a GPU, a Rust closure on
/// the host backend.
static SCALE_IN_PLACE: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("hm_scale")
        .host(|_, a| {
            let f: f32 = a.scalar(1);
            for x in a.tile_mut::<f32>(0) {
                *x *= f;
            }
        })
        .cuda_source(
            r#"extern "C" __global__ void hm_scale(float* x, float f, unsigned long long n) {
                unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
                if (i < n) x[i] *= f;
            }"#,
            "hm_scale",
        )
        .build()
});

fn scale_mapped(s: &Stream, buf: &mut PinnedBuffer<f32>, f: f32) -> cueflow::Result<()> {
    let n = buf.len();
    s.launch(
        &SCALE_IN_PLACE,
        LaunchConfig::for_elements(n, 256),
        KernelArgs::new()
            .write_mapped(buf)
            .scalar(f)
            .scalar(n as u64),
    )
}

// ---------------------------------------------------------------------------------------------
// HM1 Registered memory

/// HM1: copies through registered memory are asynchronous (CP2) and host access to it waits
/// for the device work on it (MM3).
pub fn hm1_registered_copies_are_async(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = filled(dev, N, 7.0);
    let mut host =
        RegisteredBuffer::register(dev, vec![0.0f32; N], PinnedFlags::default()).unwrap();
    assert!(host.is_registered());
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.copy_d2h(&mut *host, &d).unwrap(); // returns while the stream is held (CP2)
    assert!(!gate.is_open());
    let t = gate.open_after(Duration::from_millis(50));
    let v = host.read().unwrap(); // waits for the copy (MM3)
    assert!(
        gate.is_open(),
        "the host read registered memory a pending copy writes"
    );
    assert_all(&v, 7.0);
    drop(v);
    t.join().unwrap();
    // And up again from the registered memory.
    host.write().unwrap().fill(3.0);
    let back = zeros(dev, N);
    s.copy_h2d(&back, &*host).unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&back), 3.0);
}

/// HM1: ending a registration while device work on the memory is pending waits for that
/// work; it never unlocks memory under running work.
pub fn hm1_unregister_waits_for_pending_work(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = filled(dev, N, 2.0);
    let mut host =
        RegisteredBuffer::register(dev, vec![0.0f32; N], PinnedFlags::default()).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.copy_d2h(&mut *host, &d).unwrap();
    let t = gate.open_after(Duration::from_millis(50));
    host.unregister().unwrap();
    assert!(
        gate.is_open(),
        "unregister returned under a pending copy into the memory"
    );
    t.join().unwrap();
    s.synchronize().unwrap();
}

/// HM1: registering bytes that are registered already is refused (ER3); after the first
/// registration ended, the memory can be registered again.
pub fn hm1_overlapping_registration_refused(dev: &Device) {
    let mut mem = vec![1.0f32; N];
    let ptr = mem.as_mut_ptr();
    // SAFETY: `mem` outlives both registrations, which end (with no work enqueued on them)
    // before it is dropped.
    unsafe {
        let first = RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()).unwrap();
        let again =
            RegisteredBuffer::register_raw(dev, ptr.add(N / 2), N / 2, PinnedFlags::default());
        assert!(
            matches!(again, Err(Error::NotPermitted { rule: "HM1", .. })),
            "overlapping registration: {:?}",
            again.err()
        );
        assert_all(&first.read().unwrap(), 1.0);
        first.unregister().unwrap();
        let later = RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()).unwrap();
        later.unregister().unwrap();
    }
    assert!(matches!(
        RegisteredBuffer::<f32>::register(dev, Vec::new(), PinnedFlags::default()),
        Err(Error::NotPermitted { rule: "HM1", .. })
    ));
    drop(mem);
}

// ---------------------------------------------------------------------------------------------
// HM2 Portable memory

/// HM2: on a device with unified addressing (every host device; every 64-bit platform CUDA
/// supports) pinned and registered memory serve every device's streams with no flag, as
/// CUDA makes `cudaMallocHost` memory portable there (issue 27 item 12: cueflow required
/// `.portable()`); on a device without it only memory made portable does. Portable memory
/// serves its own device's streams too.
pub fn hm2_portable_memory_on_every_device(a: &Device, b: &Device) {
    let sb = side_stream(b);
    let db = filled(b, N, 5.0);
    let uva = a.properties().unified_addressing;
    let mut plain = PinnedBuffer::<f32>::new(a, N).unwrap();
    let mut plain_reg =
        RegisteredBuffer::register(a, vec![0.0f32; N], PinnedFlags::default()).unwrap();
    assert_eq!(plain.is_portable(), uva);
    assert_eq!(plain_reg.is_portable(), uva);
    if uva {
        sb.copy_d2h(&mut plain, &db).unwrap();
        sb.copy_d2h(&mut *plain_reg, &db).unwrap();
        assert_all(&plain.read().unwrap(), 5.0);
        assert_all(&plain_reg.read().unwrap(), 5.0);
    } else {
        assert!(matches!(
            sb.copy_d2h(&mut plain, &db),
            Err(Error::InvalidHandle(m)) if m.contains("portable()")
        ));
    }
    let mut portable =
        PinnedBuffer::<f32>::with_flags(a, N, PinnedFlags::default().portable()).unwrap();
    assert!(portable.is_portable());
    sb.copy_d2h(&mut portable, &db).unwrap();
    assert_all(&portable.read().unwrap(), 5.0);
    let mut reg =
        RegisteredBuffer::register(a, vec![0.0f32; N], PinnedFlags::default().portable()).unwrap();
    sb.copy_d2h(&mut *reg, &db).unwrap();
    assert_all(&reg.read().unwrap(), 5.0);
    // And on its own device's streams, as any pinned memory.
    let da = zeros(a, N);
    let own = side_stream(a);
    own.copy_h2d(&da, &*reg).unwrap();
    own.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&da), 5.0);
}

// ---------------------------------------------------------------------------------------------
// HM3 Mapped memory

/// HM3: kernels read and write mapped memory in place; memory that is not mapped is refused
/// as a kernel argument (ER3).
pub fn hm3_kernels_use_mapped_memory_in_place(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let mut m = PinnedBuffer::<f32>::with_flags(dev, N, PinnedFlags::default().mapped()).unwrap();
    assert!(m.is_mapped() && m.device_addr().is_some());
    m.write().unwrap().fill(1.5);
    scale_mapped(&s, &mut m, 4.0).unwrap();
    assert_all(&m.read().unwrap(), 6.0);
    let mut plain = PinnedBuffer::<f32>::new(dev, N).unwrap();
    assert!(plain.device_addr().is_none());
    assert!(matches!(
        scale_mapped(&s, &mut plain, 2.0),
        Err(Error::InvalidArgument { .. })
    ));
    // Registered memory registered as mapped, too.
    let mut reg =
        RegisteredBuffer::register(dev, vec![2.0f32; N], PinnedFlags::default().mapped()).unwrap();
    scale_mapped(&s, &mut reg, 0.5).unwrap();
    assert_all(&reg.read().unwrap(), 1.0);
}

/// HM3: host access to mapped memory waits for exactly the kernels that touch the bytes
/// (MM3), and a kernel's accesses order against copies like any other (AC5/AC6 through the
/// stream order here, the sanitizer in its corpus).
pub fn hm3_host_access_waits_for_mapped_kernels(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let mut m = PinnedBuffer::<f32>::with_flags(dev, N, PinnedFlags::default().mapped()).unwrap();
    m.write().unwrap().fill(1.0);
    // Loaded before the gate: a CUDA module load waits for the running (gate) kernel.
    SCALE_IN_PLACE.prepare(dev).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    scale_mapped(&s, &mut m, 3.0).unwrap();
    let t = gate.open_after(Duration::from_millis(50));
    let v = m.read().unwrap();
    assert!(
        gate.is_open(),
        "the host read mapped memory a pending kernel writes"
    );
    assert_all(&v, 3.0);
    drop(v);
    t.join().unwrap();
    // A mapped buffer dropped while its kernel runs stays alive until the kernel is done (MM2).
    let gate = Gate::kernel(dev);
    gate.block(&s);
    let mut tmp = PinnedBuffer::<f32>::with_flags(dev, N, PinnedFlags::default().mapped()).unwrap();
    scale_mapped(&s, &mut tmp, 2.0).unwrap();
    drop(tmp);
    gate.open();
    s.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// HM5 Pools

/// HM5: the default pool starts with CUDA's attributes (release threshold 0), counts used and
/// reserved memory with high-water marks, and gives idle memory back at a synchronization.
pub fn hm5_default_pool_attributes_and_statistics(dev: &Device) {
    let pool = dev.default_pool();
    assert!(pool.is_default());
    assert_eq!(
        pool.release_threshold().unwrap(),
        0,
        "CUDA's default threshold"
    );
    let s = Stream::new(dev).unwrap();
    dev.synchronize().unwrap();
    pool.reset_peaks().unwrap();
    let before = pool.stats().unwrap();
    // Larger than CUDA's pool granule (32 MiB), so the block has memory reserved for itself
    // alone: what other tests left in the pool cannot keep it from going back.
    let bytes = 64usize << 20;
    let b = s.alloc_async::<u8>(bytes).unwrap();
    let during = pool.stats().unwrap();
    assert!(
        during.used >= before.used + bytes as u64,
        "{before:?} -> {during:?}"
    );
    assert!(during.reserved >= during.used && during.reserved_high >= during.reserved);
    assert!(during.used_high >= during.used);
    s.free_async(b).unwrap();
    s.synchronize().unwrap();
    let after = pool.stats().unwrap();
    // (On CUDA the default pool also serves synchronous allocations, which earlier tests may
    // still be freeing: compare with the round's own bytes, not for equality.)
    assert!(
        after.used + bytes as u64 <= during.used,
        "the freed block is no longer used ({during:?} -> {after:?})"
    );
    assert!(
        after.used_high >= before.used + bytes as u64,
        "the high-water mark stays"
    );
    assert!(
        after.reserved < during.reserved,
        "threshold 0: idle memory goes back at the synchronization ({during:?} -> {after:?})"
    );
}

/// HM5: an explicit pool: allocation from it in stream order, its threshold keeps idle memory
/// over a synchronization, `trim_to` gives it back.
pub fn hm5_explicit_pool_threshold_and_trim(dev: &Device) {
    let pool = dev.create_pool().unwrap();
    assert!(!pool.is_default());
    assert_eq!(pool.release_threshold().unwrap(), 0);
    pool.set_release_threshold(u64::MAX).unwrap();
    assert_eq!(pool.release_threshold().unwrap(), u64::MAX);
    let s = Stream::new(dev).unwrap();
    let b = s.alloc_from_pool::<f32>(&pool, N).unwrap();
    kernels::fill(&s, &b, 4.0).unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&b), 4.0);
    let used = pool.stats().unwrap();
    assert!(
        used.used >= (N * 4) as u64 && used.reserved >= used.used,
        "{used:?}"
    );
    s.free_async(b).unwrap();
    // The device's synchronization: `download`'s stream still holds the buffer for its finished
    // read until something retires that stream's work (the free reaches the pool then, MM2).
    dev.synchronize().unwrap();
    let kept = pool.stats().unwrap();
    assert_eq!(kept.used, 0);
    assert!(
        kept.reserved >= (N * 4) as u64,
        "threshold MAX keeps idle memory: {kept:?}"
    );
    pool.trim_to(0).unwrap();
    assert_eq!(
        pool.stats().unwrap().reserved,
        0,
        "trim_to(0) gives every idle byte back"
    );
    // A pool of another device is refused (ER3).
    let other = Device::host().unwrap();
    assert!(matches!(
        Stream::new(&other)
            .unwrap()
            .alloc_from_pool::<f32>(&pool, N),
        Err(Error::InvalidHandle(_))
    ));
}

// ---------------------------------------------------------------------------------------------
// HM6 Peer access for kernels

/// HM6: another device's buffer is refused as a kernel argument until peer access is enabled;
/// then kernels read and write it in place, tracked like any argument; disabling revokes it.
pub fn hm6_kernels_on_peer_memory(a: &Device, b: &Device) {
    let early_pool = b.create_pool().unwrap();
    let sa = side_stream(a);
    let xb = filled(b, N, 3.0);
    assert!(matches!(
        kernels::scale(&sa, &xb, 2.0),
        Err(Error::InvalidHandle(_))
    ));
    if !a.can_access_peer(b) || !a.enable_peer_access(b).unwrap() {
        eprintln!("SKIP hm6: the two devices cannot reach each other's memory");
        return;
    }
    kernels::scale(&sa, &xb, 2.0).unwrap(); // writes b's memory from a's stream
                                            // b's stream reads it after a's kernel only through an event wait (AC2).
    let done = sa.record().unwrap();
    let sb = side_stream(b);
    sb.wait_event(&done).unwrap();
    let yb = zeros(b, N);
    sb.copy_d2d(&yb, &xb).unwrap();
    sb.synchronize().unwrap(); // `download`'s own stream orders with nothing on CUDA
    assert_all(&download(&yb), 6.0);
    // Memory of a pool `b` creates is reached too (the grant covers created pools, issue 27),
    // whether the pool was made after peer access was enabled, as here, or before.
    let late_pool = b.create_pool().unwrap();
    let sb2 = side_stream(b);
    for pool in [&early_pool, &late_pool] {
        let pb = sb2.alloc_from_pool::<f32>(pool, N).unwrap();
        kernels::fill(&sb2, &pb, 5.0).unwrap();
        sa.wait_event(&sb2.record().unwrap()).unwrap();
        kernels::scale(&sa, &pb, 3.0).unwrap();
        sa.synchronize().unwrap();
        assert_all(&download(&pb), 15.0);
        sb2.free_async(pb).unwrap();
    }
    a.disable_peer_access(b).unwrap();
    assert!(matches!(
        kernels::scale(&sa, &xb, 2.0),
        Err(Error::InvalidHandle(_))
    ));
    assert_all(&download(&xb), 6.0);
}

// ---------------------------------------------------------------------------------------------
// HM4 Managed memory

/// HM4: managed memory is valid on the host and on the device: the host writes it, a kernel
/// scales it in place, copies read it, host access waits for the kernel (MM3); prefetches
/// and attachments are stream operations; advice is accepted.
pub fn hm4_managed_memory_on_host_and_device(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let mut m = ManagedBuffer::<f32>::new(dev, N).unwrap();
    assert!(m.is_mapped() && m.is_portable());
    assert_all(&m.read().unwrap(), 0.0);
    m.write().unwrap().fill(2.0);
    m.advise(.., Advice::SetReadMostly, dev).unwrap();
    m.advise(.., Advice::SetPreferredLocation(MemLocation::Device), dev)
        .unwrap();
    if dev.properties().concurrent_managed_access {
        s.prefetch(&m, .., MemLocation::Device).unwrap();
    }
    SCALE_IN_PLACE.prepare(dev).unwrap(); // before the gate, as above
    let gate = Gate::kernel(dev);
    gate.block(&s);
    scale_mapped(&s, &mut m, 3.0).unwrap();
    let d = zeros(dev, N);
    s.copy_h2d(&d, &*m).unwrap();
    s.prefetch(&m, .., MemLocation::Host).unwrap(); // returns while the stream is held
    assert!(!gate.is_open());
    let t = gate.open_after(Duration::from_millis(50));
    let v = m.read().unwrap();
    assert!(
        gate.is_open(),
        "the host read managed memory a pending kernel writes"
    );
    assert_all(&v, 6.0);
    drop(v);
    t.join().unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&d), 6.0);
    // Attached to one stream, then to the host, then globally again.
    s.attach_managed(&m, AttachMode::Single).unwrap();
    scale_mapped(&s, &mut m, 0.5).unwrap();
    assert_all(&m.read().unwrap(), 3.0);
    s.attach_managed(&m, AttachMode::Host).unwrap();
    s.synchronize().unwrap();
    m.write().unwrap().fill(1.0);
    s.attach_managed(&m, AttachMode::Global).unwrap();
    scale_mapped(&s, &mut m, 4.0).unwrap();
    assert_all(&m.read().unwrap(), 4.0);
}

/// HM4: managed memory allocated on one device is used by another device's streams and
/// kernels, and one device's stream prefetches it to the other device
/// (`Device::mem_location`, as `cudaMemPrefetchAsync` takes any destination device).
pub fn hm4_managed_memory_on_every_device(a: &Device, b: &Device) {
    let sb = side_stream(b);
    let mut m = ManagedBuffer::<f32>::new(a, N).unwrap();
    m.write().unwrap().fill(5.0);
    scale_mapped(&sb, &mut m, 2.0).unwrap();
    let db = zeros(b, N);
    sb.copy_h2d(&db, &*m).unwrap();
    sb.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&db), 10.0);
    assert_all(&m.read().unwrap(), 10.0);
    if a.properties().concurrent_managed_access && b.properties().concurrent_managed_access {
        let sa = side_stream(a);
        sa.prefetch(&m, .., b.mem_location()).unwrap();
        sb.wait_event(&sa.record().unwrap()).unwrap();
        scale_mapped(&sb, &mut m, 0.5).unwrap();
        sa.wait_event(&sb.record().unwrap()).unwrap();
        sa.prefetch(&m, .., a.mem_location()).unwrap();
        sa.synchronize().unwrap();
        assert_all(&m.read().unwrap(), 5.0);
    } else {
        eprintln!("SKIP hm4 cross-device prefetch: concurrentManagedAccess = 0");
    }
}

/// HM1: a graph that captured registered memory keeps the registration (GR4): `unregister`
/// says so, and the bytes stay registered until the graph is gone.
pub fn hm1_graph_keeps_the_registration(dev: &Device) {
    let mut mem = vec![0.0f32; N];
    let ptr = mem.as_mut_ptr();
    let d = filled(dev, N, 8.0);
    // SAFETY: `mem` outlives the registration: it ends with the graph, dropped below first.
    let mut reg =
        unsafe { RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()) }.unwrap();
    let s = side_stream(dev);
    s.begin_capture(cueflow::CaptureMode::Global).unwrap();
    s.copy_d2h(&mut *reg, &d).unwrap();
    let graph = s.end_capture().unwrap().instantiate().unwrap();
    graph.launch(&s).unwrap();
    assert!(matches!(
        reg.unregister(),
        Err(Error::NotPermitted { rule: "HM1", .. })
    ));
    // SAFETY: as above.
    let again = unsafe { RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()) };
    assert!(again.is_err(), "the graph still holds the registration");
    s.synchronize().unwrap();
    drop(graph);
    // SAFETY: as above; nothing holds the first registration any more.
    let again =
        unsafe { RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()) }.unwrap();
    assert_all(&again.read().unwrap(), 8.0);
    again.unregister().unwrap();
    drop(mem);
}

/// HM1: once its launch was waited for, a dropped graph lets go of the registration at once:
/// the memory can be registered again right away, every time (the host backend once
/// completed a launch while its engine thread still held the graph's nodes, so registering
/// again failed now and then).
pub fn hm1_a_waited_graph_lets_go_of_its_registration(dev: &Device) {
    let mut mem = vec![0.0f32; N];
    let ptr = mem.as_mut_ptr();
    let d = filled(dev, N, 3.0);
    let s = side_stream(dev);
    for _ in 0..200 {
        // SAFETY: `mem` outlives every registration: each ends in this iteration.
        let mut reg =
            unsafe { RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()) }.unwrap();
        s.begin_capture(cueflow::CaptureMode::Global).unwrap();
        s.copy_d2h(&mut *reg, &d).unwrap();
        let graph = s.end_capture().unwrap().instantiate().unwrap();
        graph.launch(&s).unwrap();
        s.synchronize().unwrap();
        drop((graph, reg));
        // SAFETY: as above; nothing holds the registration any more.
        let again = unsafe { RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()) }
            .expect("the graph let go of the registration");
        again.unregister().unwrap();
    }
    assert!(mem.iter().all(|&v| v == 3.0));
}

/// HM1: ending a registration waits for the work on the memory and orders nothing else:
/// another stream's unsynchronized write still races with a later access (AC4), also when a
/// graph holding the registration made the call wait for the whole device first. (Before,
/// that wait counted as a device synchronization, so whether a race was reported depended
/// on how soon finished work let go of the memory.)
pub fn hm1_unregister_orders_no_other_work(dev: &Device) {
    dev.set_sanitize(cueflow::SanitizeMode::Error);
    let (a, b) = (side_stream(dev), side_stream(dev));
    let d = filled(dev, N, 8.0);
    let other = zeros(dev, N);
    kernels::fill(&a, &other, 1.0).unwrap(); // not synchronized with `b`
    let mut reg = RegisteredBuffer::register(dev, vec![0.0f32; N], PinnedFlags::default()).unwrap();
    b.begin_capture(cueflow::CaptureMode::Global).unwrap();
    b.copy_d2h(&mut *reg, &d).unwrap();
    let graph = b.end_capture().unwrap().instantiate().unwrap();
    assert!(matches!(
        reg.unregister(),
        Err(Error::NotPermitted { rule: "HM1", .. })
    ));
    match kernels::fill(&b, &other, 2.0) {
        Err(Error::Race(r)) => assert_eq!(r.earlier.stream, Some(a.id())),
        other => panic!("unregister ordered another stream's work: {other:?}"),
    }
    dev.synchronize().unwrap();
    drop(graph);
    assert_all(&download(&other), 1.0);
}

/// HM1 + ST3: a registration whose last holder is a finished operation ends when that
/// operation is retired, which may happen inside any later call (here a query of its stream).
/// On CUDA ending it (`cudaHostUnregister`) waits for all the GPU's running work, so that call
/// must not: a kernel spinning until another stream's kernel sets its flag must not hold the
/// program up. (Before, the query waited for the spinning kernel, which waited for a flag the
/// program could set only after the query returned: the kernel faulted after its timeout.)
pub fn hm1_a_registration_ended_by_retired_work_waits_for_no_other_work(dev: &Device) {
    let (x, a, b) = (side_stream(dev), side_stream(dev), side_stream(dev));
    let reg = RegisteredBuffer::register(dev, vec![1.0f32; N], PinnedFlags::default()).unwrap();
    let d = zeros(dev, N);
    x.copy_h2d(&d, &reg).unwrap();
    drop(reg); // The copy holds the registration now.
    std::thread::sleep(Duration::from_millis(50)); // The copy finishes; nothing retires it.
    let f = flag(dev);
    kernels::wait_flag(&a, &f, 1, GATE_TIMEOUT).unwrap();
    assert!(x.query().unwrap()); // Retires the copy: the registration ends.
    kernels::set_flag(&b, &f, 1).unwrap();
    a.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
}

/// HM1 across backends: bytes whose registration is still ending may be registered on a
/// device of the host backend at once; the new registration waits for the end. On CUDA the
/// end (on the freeing thread, after a query retired the last copy that held the
/// registration) waits for every running kernel: a gate kernel holds it here until another
/// thread opens the gate with a 4-byte `write_value`. (Before, the host backend's registration
/// was refused while it waited; and the wait, inside `cuMemHostUnregister`, held up the
/// opening copy until the gate kernel's timeout faulted the device.)
pub fn hm1_bytes_whose_registration_is_ending_register_on_another_backend(dev: &Device) {
    let host = Device::host().unwrap();
    let mut mem = vec![1.0f32; N];
    let ptr = mem.as_mut_ptr();
    let x = side_stream(dev);
    // SAFETY: `mem` outlives both registrations (the second succeeds only once the first
    // ended, and is ended before `mem` goes), and only the copy touches it meanwhile.
    let reg = unsafe { RegisteredBuffer::register_raw(dev, ptr, N, PinnedFlags::default()) };
    let d = zeros(dev, N);
    x.copy_h2d(&d, &reg.unwrap()).unwrap(); // Dropped: the copy holds the registration now.
    x.record().unwrap().synchronize().unwrap(); // Finished, not retired.
    let (gate, g) = (Gate::kernel(dev), side_stream(dev));
    gate.block(&g);
    assert!(x.query().unwrap()); // Retires the copy: the registration ends, or is ending.
    let opener = gate.open_after(Duration::from_millis(50));
    // SAFETY: as above.
    let again = unsafe { RegisteredBuffer::register_raw(&host, ptr, N, PinnedFlags::default()) };
    again
        .expect("the new registration waits for the old one's end")
        .unregister()
        .unwrap();
    opener.join().unwrap();
    g.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
    drop(mem);
}

/// MM2 + HM4: managed memory whose last holder is a finished copy is freed once a query
/// retires the copy. On CUDA that free (`cuMemFree`, on the freeing thread) waits for running
/// kernels, and must not hold up the program meanwhile: a gate kernel runs, and another thread
/// opens it with a 4-byte `write_value`. (Before, the free's wait held the opening copy up
/// until the gate kernel's timeout faulted the device.)
pub fn hm4_freeing_managed_memory_holds_up_no_other_call(dev: &Device) {
    let x = side_stream(dev);
    let mut m = ManagedBuffer::<f32>::new(dev, N).unwrap();
    m.write().unwrap().fill(1.0);
    let d = zeros(dev, N);
    x.copy_h2d(&d, &*m).unwrap();
    drop(m); // The copy holds the memory now.
    x.record().unwrap().synchronize().unwrap(); // Finished, not retired.
    let (gate, g) = (Gate::kernel(dev), side_stream(dev));
    gate.block(&g);
    assert!(x.query().unwrap()); // Retires the copy: the memory is freed, or being freed.
    gate.open_after(Duration::from_millis(50)).join().unwrap();
    g.synchronize()
        .expect("the gate opened: freeing the memory held up no other call");
    assert_all(&download(&d), 1.0);
}

/// HM4 + ST4: a copy out of managed (or mapped) memory on the legacy stream follows the
/// kernel a blocking stream ran on that memory before, with no event, and a copy on a blocking
/// stream follows the legacy stream's kernel: ST4 orders them, and the sanitizer sees the
/// order too. (On CUDA the driver let small copies from pinned memory pass: see
/// `backend/cuda/legacy_order.rs`.)
pub fn hm4_legacy_stream_copies_follow_blocking_streams_kernels(dev: &Device) {
    dev.set_sanitize(cueflow::SanitizeMode::Error);
    SCALE_IN_PLACE.prepare(dev).unwrap();
    let blocking = Stream::new(dev).unwrap();
    let legacy = Stream::legacy(dev);
    let mut managed = ManagedBuffer::<f32>::new(dev, N).unwrap();
    let flags = PinnedFlags::default().mapped();
    let mut mapped = PinnedBuffer::<f32>::with_flags(dev, N, flags).unwrap();
    managed.write().unwrap().fill(1.0);
    mapped.write().unwrap().fill(1.0);
    let d = zeros(dev, N);
    let mut want = 1.0f32;
    for round in 1..=4 {
        for (first, then, way) in [
            (&blocking, &legacy, "blocking -> legacy"),
            (&legacy, &blocking, "legacy -> blocking"),
        ] {
            want *= 2.0;
            for (name, buf) in [("managed", &mut *managed), ("mapped", &mut mapped)] {
                let gate = Gate::kernel(dev);
                gate.block(first);
                scale_mapped(first, buf, 2.0).unwrap();
                let t = gate.open_after(Duration::from_millis(5));
                then.copy_h2d(&d, &*buf).unwrap();
                t.join().unwrap();
                then.synchronize().unwrap();
                let got = download(&d);
                assert!(
                    got.iter().all(|&x| x == want),
                    "{name}, {way}, round {round}: the copy read {} instead of {want}",
                    got[0]
                );
            }
        }
    }
}

/// HM2 + HM3: portable mapped memory is a kernel argument on every device; an event orders
/// one device's kernel after the other's (EV4 across devices), and host access waits for both.
pub fn hm3_portable_mapped_memory_across_devices(a: &Device, b: &Device) {
    let flags = PinnedFlags::default().mapped().portable();
    let mut m = PinnedBuffer::<f32>::with_flags(a, N, flags).unwrap();
    let (sa, sb) = (side_stream(a), side_stream(b));
    m.write().unwrap().fill(1.0);
    scale_mapped(&sa, &mut m, 2.0).unwrap();
    let e = sa.record().unwrap();
    sb.wait_event(&e).unwrap();
    scale_mapped(&sb, &mut m, 3.0).unwrap();
    assert_all(&m.read().unwrap(), 6.0);
    // Mapped without the flag: portable all the same with unified addressing (HM2), refused
    // on the other device without it.
    let mut own = PinnedBuffer::<f32>::with_flags(a, N, PinnedFlags::default().mapped()).unwrap();
    own.write().unwrap().fill(1.0);
    match scale_mapped(&sb, &mut own, 2.0) {
        Ok(()) if a.properties().unified_addressing => assert_all(&own.read().unwrap(), 2.0),
        Err(Error::InvalidHandle(_)) if !a.properties().unified_addressing => {}
        other => panic!("mapped memory without the portable flag on another device: {other:?}"),
    }
}

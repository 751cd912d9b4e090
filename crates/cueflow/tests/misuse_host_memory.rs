//! Misuse of registered, portable, mapped and managed memory, pools and peer kernels (HM1–HM6,
//! issue 19): the exact error, and nothing enqueued (the device's trace shows no operation
//! from the refused call, the stream is idle, the device not poisoned). Listed in
//! `tests/MISUSE.md`. Host backend only: validation happens before any backend sees the call
//! (ER3).

#[path = "common/refused.rs"]
mod refused;
use refused::refused;

use std::time::Duration;

use cueflow::{
    kernels, AttachMode, Device, DeviceBuffer, Error, KernelArgs, LaunchConfig, ManagedBuffer,
    MemLocation, PinnedBuffer, PinnedFlags, RegisteredBuffer, Stream,
};

const N: usize = 256;

fn dev() -> Device {
    Device::host().unwrap()
}

fn fill_mapped(s: &Stream, buf: &mut PinnedBuffer<f32>, v: f32) -> cueflow::Result<()> {
    let n = buf.len();
    s.launch(
        &kernels::FILL_F32,
        LaunchConfig::for_elements(n, 64),
        KernelArgs::new()
            .write_mapped(buf)
            .scalar(v)
            .scalar(n as u64),
    )
}

/// HM1: registering memory that is registered already (any overlapping byte).
#[test]
fn registering_overlapping_memory_twice() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let mut mem = vec![0u8; 8192];
    let p = mem.as_mut_ptr();
    // SAFETY: `mem` outlives the registration, which ends with no work on it.
    let first =
        unsafe { RegisteredBuffer::register_raw(&dev, p, 4096, PinnedFlags::default()) }.unwrap();
    let e = refused(&dev, &s, || {
        // SAFETY: as above (refused: nothing is registered).
        unsafe {
            RegisteredBuffer::register_raw(&dev, p.wrapping_add(4095), 2, PinnedFlags::default())
        }
    });
    assert!(matches!(e, Error::NotPermitted { rule: "HM1", .. }), "{e}");
    // The byte after the first registration is free.
    // SAFETY: as above.
    let next = unsafe {
        RegisteredBuffer::register_raw(&dev, p.wrapping_add(4096), 4096, PinnedFlags::default())
    }
    .unwrap();
    first.unregister().unwrap();
    next.unregister().unwrap();
    drop(mem);
}

/// HM1: unregistering with work pending is not refused: it waits for the work (never unlocks
/// memory under running work, MM2).
#[test]
fn unregistering_with_work_pending_waits() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let mut reg =
        RegisteredBuffer::register(&dev, vec![0.0f32; N], PinnedFlags::default()).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N).unwrap();
    s.host_fn(|| std::thread::sleep(Duration::from_millis(100)))
        .unwrap();
    s.memset(&d, 0).unwrap();
    s.copy_d2h(&mut *reg, &d).unwrap();
    reg.unregister().unwrap();
    assert!(
        s.query().unwrap(),
        "unregister returned before the copy into the memory ran"
    );
}

/// HM3: pinned memory that is not mapped as a kernel argument.
#[test]
fn unmapped_pinned_memory_as_kernel_argument() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let mut p = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let e = refused(&dev, &s, || fill_mapped(&s, &mut p, 1.0));
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

/// HM3/MM2: a mapped buffer dropped ("freed") while a kernel writes it is not misuse: the
/// memory lives until the kernel is done, and the kernel's writes land in it.
#[test]
fn mapped_buffer_freed_while_a_kernel_uses_it() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let mut m = PinnedBuffer::<f32>::with_flags(&dev, N, PinnedFlags::default().mapped()).unwrap();
    s.host_fn(|| std::thread::sleep(Duration::from_millis(50)))
        .unwrap();
    fill_mapped(&s, &mut m, 9.0).unwrap();
    let mut reg =
        RegisteredBuffer::register(&dev, vec![0.0f32; N], PinnedFlags::default().mapped()).unwrap();
    fill_mapped(&s, &mut reg, 7.0).unwrap();
    drop(m);
    drop(reg); // the Vec goes only after the kernel
    s.synchronize().unwrap();
    assert_eq!(dev.sticky_error(), None);
}

/// HM4: prefetch of a range outside the buffer; attaching to one stream at allocation.
#[test]
fn prefetch_and_attach_refused() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let m = ManagedBuffer::<f32>::new(&dev, N).unwrap();
    let e = refused(&dev, &s, || s.prefetch(&m, 0..N + 1, MemLocation::Device));
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    assert!(matches!(
        ManagedBuffer::<f32>::with_attach(&dev, N, AttachMode::Single),
        Err(Error::NotPermitted { rule: "HM4", .. })
    ));
    // A device that cannot take prefetches (concurrentManagedAccess = 0) is refused with
    // `Unsupported`: every host device can, so that refusal runs on such GPUs only.
    assert!(dev.properties().concurrent_managed_access);
}

/// HM5: a pool of another device.
#[test]
fn allocation_from_another_devices_pool() {
    let (a, b) = (dev(), dev());
    let sb = Stream::new(&b).unwrap();
    let pool = a.create_pool().unwrap();
    let e = refused(&b, &sb, || sb.alloc_from_pool::<f32>(&pool, N));
    assert!(matches!(e, Error::InvalidHandle(_)), "{e}");
}

/// HM6: another device's buffer as a kernel argument without peer access, and after it was
/// disabled.
#[test]
fn peer_buffer_as_kernel_argument_without_peer_access() {
    let (a, b) = (dev(), dev());
    let sa = Stream::new(&a).unwrap();
    let xb = DeviceBuffer::<f32>::new(&b, N).unwrap();
    let e = refused(&a, &sa, || kernels::fill(&sa, &xb, 1.0));
    assert!(matches!(e, Error::InvalidHandle(_)), "{e}");
    assert!(a.enable_peer_access(&b).unwrap());
    kernels::fill(&sa, &xb, 1.0).unwrap();
    sa.synchronize().unwrap();
    a.disable_peer_access(&b).unwrap();
    let e = refused(&a, &sa, || kernels::fill(&sa, &xb, 1.0));
    assert!(matches!(e, Error::InvalidHandle(_)), "{e}");
}

/// HM1 (issue 27): registering bytes that a `PinnedBuffer` or a `ManagedBuffer` already
/// page-locks, as CUDA refuses it (`cudaErrorHostMemoryAlreadyRegistered`); the host backend
/// accepted it, and the two allocations then aliased each other's bytes unseen by tracking.
#[test]
fn registering_memory_that_is_pinned_already() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let mut p = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let ptr = p.write().unwrap().as_mut_ptr();
    let e = refused(&dev, &s, || {
        // SAFETY: refused (nothing is registered); the memory is `p`'s, alive.
        unsafe {
            RegisteredBuffer::register_raw(&dev, ptr.wrapping_add(16), 16, PinnedFlags::default())
        }
    });
    assert!(
        matches!(&e, Error::NotPermitted { rule: "HM1", what } if what.contains("pinned")),
        "{e}"
    );
    let mut m = ManagedBuffer::<f32>::new(&dev, N).unwrap();
    let ptr = m.write().unwrap().as_mut_ptr();
    let e = refused(&dev, &s, || {
        // SAFETY: as above, for `m`.
        unsafe { RegisteredBuffer::register_raw(&dev, ptr, N, PinnedFlags::default()) }
    });
    assert!(matches!(e, Error::NotPermitted { rule: "HM1", .. }), "{e}");
    drop((p, m));
}

/// ER2, HM5 (issue 27): a pool's calls on a poisoned device return the sticky error, as every
/// CUDA call does after a fault (the CUDA backend did; the host backend answered as if
/// nothing had happened), and allocation from it is refused the same way.
#[test]
fn pool_calls_on_a_poisoned_device_return_the_sticky_error() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let (pool, default) = (dev.create_pool().unwrap(), dev.default_pool());
    kernels::fault(&s).unwrap();
    let sticky = s.synchronize().unwrap_err();
    for p in [&pool, &default] {
        let calls = [
            ("stats", p.stats().map(drop)),
            ("release_threshold", p.release_threshold().map(drop)),
            ("set_release_threshold", p.set_release_threshold(1)),
            ("trim_to", p.trim_to(0)),
            ("reset_peaks", p.reset_peaks()),
            ("alloc_from_pool", s.alloc_from_pool::<f32>(p, N).map(drop)),
        ];
        for (call, r) in calls {
            assert_eq!(r, Err(sticky.clone()), "{call} on {p:?}");
        }
    }
    assert_eq!(dev.create_pool().map(drop), Err(sticky));
}

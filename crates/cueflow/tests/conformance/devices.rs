//! DV1–DV3: devices — their properties, how the host waits for them, and how errors name them.

use std::time::Instant;

use cueflow::{ComputeMode, Device, DeviceBuffer, DeviceSpec, Error, Stream, SyncMode};

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// DV1 Properties

/// DV1: the properties a CUDA program reads from `cudaDeviceProp` are there and consistent;
/// free/total memory is reported.
pub fn dv1_properties_as_cuda_reports_them(dev: &Device) {
    let p = dev.properties();
    let (major, minor) = p.compute_capability;
    assert!(
        major >= 5 && minor < 10,
        "compute capability {major}.{minor}"
    );
    assert_eq!(p.warp_size, 32);
    assert!(p.compute_units >= 1);
    assert!(p.async_engines >= 1);
    assert!(p.max_threads_per_block >= 1024);
    assert!(p.max_block[0] >= 1024 && p.max_block[1] >= 1024 && p.max_block[2] >= 64);
    assert!(p.max_grid[0] >= 65535 && p.max_grid[1] >= 65535);
    assert!(p.max_threads_per_multiprocessor >= p.max_threads_per_block);
    assert_eq!(p.shared_per_block, 48 * 1024);
    assert!(p.max_shared_per_block >= p.shared_per_block);
    assert!(p.shared_per_multiprocessor >= p.max_shared_per_block);
    assert!(p.registers_per_block >= 32 * 1024);
    assert!(p.clock_rate_khz > 0);
    assert!(p.total_constant_memory >= 64 * 1024);
    assert!(p.max_parameter_bytes >= 4096);
    assert!(
        p.concurrent_kernels,
        "every device cueflow supports runs kernels concurrently"
    );
    assert!(p.unified_addressing && p.can_map_host_memory);
    assert!(p.total_memory > 0);
    if !is_host(dev) {
        // A discrete GPU: its own memory, a bus, a PCI address.
        assert!(p.memory_clock_rate_khz > 0 && p.memory_bus_width > 0);
        assert!(p.l2_cache_size > 0);
        assert!(p.priority_greatest < p.priority_least);
    }
    let (free, total) = dev.mem_info().unwrap();
    assert!(free > 0 && free <= total, "free {free} of {total}");
    assert_eq!(total, p.total_memory);
    // The driver's CUDA version and the compute mode (issue 27 item 15): stream-ordered
    // pools came with CUDA 11.2, and a device that opened is not prohibited.
    assert!(p.driver_version >= 11_020, "driver {}", p.driver_version);
    assert_eq!(p.driver_version % 10, 0, "1000 x major + 10 x minor");
    assert_ne!(p.compute_mode, ComputeMode::Prohibited);
    if is_host(dev) {
        assert_eq!(
            (p.driver_version, p.compute_mode),
            (13_000, ComputeMode::Default)
        );
    }
}

/// DV1: free memory goes down by what an allocation takes (on a GPU; host memory is given
/// lazily by the system, so the host backend's figure need not move).
pub fn dv1_mem_info_sees_allocations(dev: &Device) {
    let (free0, _) = dev.mem_info().unwrap();
    let bytes = 256usize << 20;
    let big = DeviceBuffer::<u8>::new(dev, bytes).unwrap();
    let (free1, total) = dev.mem_info().unwrap();
    assert!(free1 <= total);
    if !is_host(dev) {
        assert!(
            free0.saturating_sub(free1) >= (bytes as u64) / 2,
            "free memory went from {free0} to {free1} with {bytes} bytes allocated"
        );
    }
    drop(big);
}

// ---------------------------------------------------------------------------------------------
// DV2 Flags

/// DV2: with blocking synchronization set before the device's first work, a stream
/// synchronize sleeps instead of spinning (its thread uses little CPU while it waits); the
/// flag cannot change once work exists.
pub fn dv2_blocking_sync_sleeps(dev: &Device) {
    dev.set_sync_mode(SyncMode::BlockingSync).unwrap();
    let s = Stream::new(dev).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    let cpu0 = thread_cpu_time();
    let t0 = Instant::now();
    let t = gate.open_after(std::time::Duration::from_millis(200));
    s.synchronize().unwrap();
    let wall = t0.elapsed();
    assert!(gate.is_open());
    if let (Some(c0), Some(c1)) = (cpu0, thread_cpu_time()) {
        let cpu = c1 - c0;
        assert!(
            cpu < wall / 2,
            "a blocking-sync wait of {wall:?} used {cpu:?} of CPU time"
        );
    }
    t.join().unwrap();
    restore_sync_mode(dev);
}

/// DV2: device flags are refused once the device has a stream, an event or memory, with a
/// typed error naming the rule; nothing changes.
pub fn dv2_flags_fixed_after_first_work(dev: &Device) {
    let _s = Stream::new(dev).unwrap();
    for mode in [SyncMode::Spin, SyncMode::Yield, SyncMode::BlockingSync] {
        match dev.set_sync_mode(mode) {
            Err(Error::NotPermitted { rule: "DV2", what }) => {
                assert!(what.contains(&dev.spec().to_string()), "{what}")
            }
            other => panic!("expected a DV2 refusal, got {other:?}"),
        }
    }
    let fresh = Device::open(dev.spec()).unwrap();
    let _buf = DeviceBuffer::<u8>::new(&fresh, 16).unwrap();
    assert!(fresh.set_sync_mode(SyncMode::Spin).is_err());
}

/// The CUDA flags belong to the GPU's primary context, shared by every device of it in the
/// process: put them back on a fresh device so the tests after this one see the default.
fn restore_sync_mode(dev: &Device) {
    if !is_host(dev) {
        Device::open(dev.spec())
            .unwrap()
            .set_sync_mode(SyncMode::Auto)
            .unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// DV3 Naming

/// DV3: an error about a stream names the device (with its index) and the stream with its
/// label.
pub fn dv3_errors_name_device_and_stream(dev: &Device) {
    let other = match dev.spec() {
        DeviceSpec::Host(_) => Device::host_n(1, 0).unwrap(),
        spec => Device::open(spec).unwrap(),
    };
    let s = Stream::builder(dev).name("upload").build().unwrap();
    let foreign = zeros(&other, N);
    let err = s.memset(&foreign, 0).unwrap_err().to_string();
    assert!(err.contains("\"upload\""), "{err}");
    assert!(err.contains(&dev.spec().to_string()), "{err}");
    let err = s.wait_event(&cueflow::Event::new(&other).unwrap());
    // A wait on another device's event is allowed (MD2).
    assert!(err.is_ok());
    let err = s
        .record_event(&cueflow::Event::new(&other).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"upload\"") && err.contains(&other.spec().to_string()),
        "{err}"
    );
}

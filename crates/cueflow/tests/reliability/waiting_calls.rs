//! Calls that wait for every running kernel (`cuMemHostUnregister`, `cuMemFree` of managed
//! memory) run on CUDA's freeing thread only while no cueflow stream of the context runs
//! anything and nothing can start: one made right after a context synchronize, with a kernel
//! launched by another thread in between, waited for that kernel under the driver's lock, and
//! the copy that would have ended the kernel waited with it until the kernel gave up (an
//! intermittent failure of the conformance suite's gate tests on two H200s).

use super::*;
use cueflow::{ManagedBuffer, PinnedFlags, RegisteredBuffer};

/// 400 rounds: a registration's end and a managed buffer's free are handed to the freeing
/// thread (a synchronize retires the last copies that held them), and right after — at a
/// delay that sweeps 0–95 µs, across the freeing thread's synchronize — this thread launches a
/// kernel that waits for a flag and opens it with a 4-byte write from a third stream. Each
/// write returns at once, and every kernel finishes without giving up.
#[test]
fn frees_on_the_freeing_thread_hold_up_no_kernel_opening_cuda() {
    let name = "frees_on_the_freeing_thread_hold_up_no_kernel_opening_cuda";
    if cuda_in_child(name, &[], "WAITING-CALLS-OK") {
        return;
    }
    const BYTES: usize = 64 << 10;
    const ROUNDS: u32 = 400;
    let dev = Device::cuda(0).unwrap();
    let (user, gated, opener) = (
        Stream::new(&dev).unwrap(),
        Stream::new(&dev).unwrap(),
        Stream::new(&dev).unwrap(),
    );
    let flag = DeviceBuffer::from_slice(&dev, &[0u32]).unwrap();
    let dst = DeviceBuffer::<u8>::new(&dev, BYTES).unwrap();
    // Loaded before the rounds: a module load waits for running kernels too.
    kernels::wait_flag(&gated, &flag, 0, Duration::from_secs(1)).unwrap();
    gated.synchronize().unwrap();
    let mut worst = Duration::ZERO;
    for round in 1..=ROUNDS {
        let reg =
            RegisteredBuffer::register(&dev, vec![round as u8; BYTES], PinnedFlags::default())
                .unwrap();
        user.copy_h2d(&dst, &*reg).unwrap();
        drop(reg); // The copy holds the registration now.
        let mut managed = ManagedBuffer::<u8>::new(&dev, BYTES).unwrap();
        managed.write().unwrap().fill(round as u8);
        user.copy_h2d(&dst, &*managed).unwrap();
        drop(managed); // And the managed buffer.
        user.synchronize().unwrap(); // Retires both: their ends go to the freeing thread.
        let until = Instant::now() + Duration::from_micros(5 * u64::from(round % 20));
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        kernels::wait_flag(&gated, &flag, round, Duration::from_secs(5)).unwrap();
        let t = Instant::now();
        opener.write_value(&flag, round).unwrap();
        worst = worst.max(t.elapsed());
        gated
            .synchronize()
            .unwrap_or_else(|e| panic!("round {round}: the flag kernel gave up: {e}"));
    }
    assert!(
        worst < Duration::from_millis(500),
        "a write that opens a kernel took {worst:?}"
    );
    println!("WAITING-CALLS-OK {ROUNDS} rounds, the slowest opening write took {worst:?}");
}

/// RL6: a device opened while another device of the same GPU runs a kernel that waits for
/// later work loads nothing and holds up no other call: the opening thread's device shares the
/// context's modules (a module load waits for every running kernel under a lock that stream
/// creation waits for too, so this thread's stream for the opening write waited behind the
/// gate until it gave up). Then both devices run the built-ins.
#[test]
fn opening_a_device_beside_a_waiting_kernel_holds_up_nothing_cuda() {
    let name = "opening_a_device_beside_a_waiting_kernel_holds_up_nothing_cuda";
    if cuda_in_child(name, &[], "OPEN-BESIDE-OK") {
        return;
    }
    let dev = Device::cuda(0).unwrap();
    let gated = Stream::new(&dev).unwrap();
    let flag = DeviceBuffer::from_slice(&dev, &[0u32]).unwrap();
    let start = Instant::now();
    kernels::wait_flag(&gated, &flag, 1, Duration::from_secs(10)).unwrap();
    let (entering, entered) = mpsc::channel();
    let opener = std::thread::spawn(move || {
        entering.send(()).unwrap();
        let t = Instant::now();
        let other = Device::cuda(0).unwrap();
        let opening = t.elapsed();
        let s = Stream::new(&other).unwrap();
        let d = DeviceBuffer::<f32>::new(&other, 256).unwrap();
        kernels::fill(&s, &d, 3.0).unwrap();
        (other, s, d, opening)
    });
    // The other thread is inside its device's opening by then (an opening takes ~10 ms; a
    // module load in it would wait for the gate kernel).
    entered.recv().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let writer = Stream::new(&dev).unwrap();
    writer.write_value(&flag, 1).unwrap();
    gated
        .synchronize()
        .unwrap_or_else(|e| panic!("the gate kernel gave up: {e}"));
    let waited = start.elapsed();
    let (other, s, d, opening) = opener.join().unwrap();
    s.synchronize().unwrap();
    assert_eq!(d.to_vec().unwrap(), vec![3.0f32; 256]);
    drop((s, d, other));
    assert!(
        // The opening well under the wait before the gate opened: it waited for nothing.
        waited < Duration::from_secs(5) && opening < Duration::from_millis(100),
        "the gate opened after {waited:?}, the other device's opening took {opening:?}"
    );
    println!("OPEN-BESIDE-OK the gate opened after {waited:?}, the opening took {opening:?}");
}

/// RL6: a kernel's dynamic shared memory limit belongs to its function, which the devices
/// opened on one GPU share: a device asking for less after another raised it leaves it raised, so the
/// first device's larger launches still run (a per-device record of the limit lowered it under
/// them: the launch failed with `CUDA_ERROR_INVALID_VALUE`). In a child process: its kernel's
/// first launch loads a module, which would wait for the other tests' gate kernels.
#[test]
fn devices_of_one_gpu_share_a_kernels_shared_memory_limit_cuda() {
    let name = "devices_of_one_gpu_share_a_kernels_shared_memory_limit_cuda";
    if cuda_in_child(name, &[], "SHARED-LIMIT-OK") {
        return;
    }
    const SRC: &str = r#"
extern "C" __global__ void cf_big_shared(float *out) {
    extern __shared__ float tile[];
    tile[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = tile[31] + 1.0f;
}
"#;
    let (a, b) = (Device::cuda(0).unwrap(), Device::cuda(0).unwrap());
    // Sizes past the default 48 KiB this GPU allows: its most, and one between.
    let most = a.properties().max_shared_per_block / 1024;
    if most < 50 {
        println!("SHARED-LIMIT-OK (skipped: {most} KiB of shared memory at most)");
        return;
    }
    let (high, low) = (most, 49 + (most - 49) / 2);
    let k = Kernel::new("cf_big_shared")
        .cuda_source(SRC, "cf_big_shared")
        .build();
    let run = |dev: &Device, kib: u32| -> Result<f32> {
        let s = Stream::new(dev)?;
        let out = DeviceBuffer::<f32>::new(dev, 1)?;
        let cfg = LaunchConfig::new(1, 32).shared(kib * 1024);
        s.launch(&k, cfg, KernelArgs::new().write(&out))?;
        s.synchronize()?;
        Ok(out.to_vec()?[0])
    };
    assert_eq!(run(&a, high).unwrap(), 32.0);
    assert_eq!(run(&b, low).unwrap(), 32.0);
    let again = run(&a, high);
    assert_eq!(again.unwrap(), 32.0, "the first device's {high} KiB launch");
    assert_eq!(run(&b, high).unwrap(), 32.0);
    assert_eq!(run(&a, low).unwrap(), 32.0);
    println!("SHARED-LIMIT-OK");
}

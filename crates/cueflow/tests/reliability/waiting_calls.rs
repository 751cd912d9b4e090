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

/// A device opened while another device of the same GPU runs a kernel that waits for later
/// work loads nothing and holds up no other call: the opening thread's device shares the
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
    let opener = std::thread::spawn(|| {
        let other = Device::cuda(0).unwrap();
        let s = Stream::new(&other).unwrap();
        let d = DeviceBuffer::<f32>::new(&other, 256).unwrap();
        kernels::fill(&s, &d, 3.0).unwrap();
        (other, s, d)
    });
    // Long enough for the other thread to be inside its device's opening.
    std::thread::sleep(Duration::from_millis(300));
    let writer = Stream::new(&dev).unwrap();
    writer.write_value(&flag, 1).unwrap();
    gated
        .synchronize()
        .unwrap_or_else(|e| panic!("the gate kernel gave up: {e}"));
    let waited = start.elapsed();
    let (other, s, d) = opener.join().unwrap();
    s.synchronize().unwrap();
    assert_eq!(d.to_vec().unwrap(), vec![3.0f32; 256]);
    drop((s, d, other));
    assert!(
        waited < Duration::from_secs(5),
        "the gate opened after {waited:?}"
    );
    println!("OPEN-BESIDE-OK the gate opened after {waited:?}");
}

//! Item 2 (MD4) and item 9's message: a rank that gave up is never read, and says so.

use super::*;

/// A rank whose collective timed out returns; its buffers are freed; the late rank then runs
/// the call. It must fault with the first rank's reason, never read the freed input (which
/// was a SIGSEGV in `memcpy` before), and never say `ranks not arrived: []`.
#[test]
fn collective_timeout_never_reads_a_freed_input() {
    let devs = [Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
    let comm = Communicator::with_timeout(&devs, Duration::from_millis(300)).unwrap();
    let s: Vec<Stream> = devs.iter().map(|d| Stream::new(d).unwrap()).collect();
    // 16 MiB: allocated with mmap and unmapped when freed, so a read after the free faults.
    let n = 4 << 20;
    let x: Vec<DeviceBuffer<f32>> = devs
        .iter()
        .map(|d| DeviceBuffer::new(d, n).unwrap())
        .collect();
    let y: Vec<DeviceBuffer<f32>> = devs
        .iter()
        .map(|d| DeviceBuffer::new(d, 2 * n).unwrap())
        .collect();
    s[1].host_fn(|| std::thread::sleep(Duration::from_millis(1200)))
        .unwrap();
    comm.all_gather(&[(&s[0], &x[0], &y[0]), (&s[1], &x[1], &y[1])])
        .unwrap();
    let e0 = s[0].synchronize().unwrap_err();
    assert!(e0.to_string().contains("timed out"), "{e0}");
    // Rank 0's call returned: its memory goes now.
    let (mut x, mut y) = (x, y);
    drop((x.remove(0), y.remove(0)));
    let e1 = s[1].synchronize().unwrap_err();
    let msg = e1.to_string();
    assert!(
        msg.contains("rank 0") && msg.contains("gave up"),
        "the late rank says who gave up: {msg}"
    );
    assert!(!msg.contains("[]"), "no empty list of missing ranks: {msg}");
    // The communicator refuses later calls at once instead of waiting out a timeout.
    drop(comm);
}

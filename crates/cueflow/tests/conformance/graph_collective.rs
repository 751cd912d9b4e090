//! GR11: a capture records collectives (MD4) as nodes of each member's graph; each member's
//! graph replays its part, and the replays meet as new calls (on CUDA, NCCL operations the
//! driver captured).

use cueflow::{CaptureMode, Communicator, Device, DeviceBuffer, Error, ReduceOp, Stream};

use crate::support::*;

/// GR11: two all-reduces captured on both members' streams (after a kernel) replay
/// at every launch of each member's graph, and a collective of a capture that takes in only
/// some members is refused.
pub fn gr11_collectives_in_graphs(a: &Device, b: &Device) {
    let devs = [a, b];
    let comm = Communicator::new(&[a.clone(), b.clone()]).unwrap();
    let x: Vec<DeviceBuffer<f32>> = (0..2).map(|r| filled(devs[r], N, 1.0)).collect();
    let caps: Vec<Stream> = devs.iter().map(|d| Stream::new(d).unwrap()).collect();
    // Only one member capturing: refused.
    caps[0].begin_capture(CaptureMode::Relaxed).unwrap();
    let other = side_stream(b);
    let parts = [(&caps[0], &x[0], &x[0]), (&other, &x[1], &x[1])];
    assert!(matches!(
        comm.all_reduce(&parts, ReduceOp::Sum),
        Err(Error::Capture(_))
    ));
    caps[0].end_capture().unwrap();
    // Both capturing: x = 2 * x (a kernel), then x = sum over ranks, per launch.
    for c in &caps {
        c.begin_capture(CaptureMode::Relaxed).unwrap();
    }
    for r in 0..2 {
        cueflow::kernels::scale(&caps[r], &x[r], 2.0).unwrap();
    }
    let parts = [(&caps[0], &x[0], &x[0]), (&caps[1], &x[1], &x[1])];
    // Two collectives in one graph (on CUDA each is a child graph of its own NCCL capture: a
    // second call captured into the same graph failed in NCCL 2.28).
    comm.all_reduce(&parts, ReduceOp::Sum).unwrap();
    comm.all_reduce(&parts, ReduceOp::Sum).unwrap();
    let execs: Vec<_> = caps
        .iter()
        .map(|c| c.end_capture().unwrap().instantiate().unwrap())
        .collect();
    let s = [side_stream(a), side_stream(b)];
    let mut want = 1.0f32;
    for _ in 0..3 {
        for r in 0..2 {
            execs[r].launch(&s[r]).unwrap();
        }
        for st in &s {
            st.synchronize().unwrap();
        }
        want = 2.0 * want * 2.0 * 2.0;
        assert_all(&download(&x[0]), want);
        assert_all(&download(&x[1]), want);
    }
    // A plain collective after the replays still meets its partner.
    comm.all_reduce(
        &[(&s[0], &x[0], &x[0]), (&s[1], &x[1], &x[1])],
        ReduceOp::Sum,
    )
    .unwrap();
    s.iter().for_each(|st| st.synchronize().unwrap());
    assert_all(&download(&x[1]), 2.0 * want);
}

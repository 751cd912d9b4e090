//! MD1–MD4: several devices. Each test gets two devices of one backend (`host:0` and `host:1`,
//! or `cuda:0` and `cuda:1`; with fewer than two GPUs the CUDA half prints SKIP).

use std::time::Duration;

use cueflow::{
    kernels, CaptureMode, Communicator, Device, DeviceBuffer, Error, Event, ReduceOp, SanitizeMode,
    Stream,
};

use cueflow::CollectivePart as Part;

use crate::support::*;

/// Rank `r`'s input of `n` `i32`s: `r * 1000 + i`.
fn rank_data(r: usize, n: usize) -> Vec<i32> {
    (0..n).map(|i| (r * 1000 + i) as i32).collect()
}

/// MD1: each device has its own streams, events and memory: another device's are refused
/// (ER3), and both work side by side.
pub fn md1_devices_are_separate(a: &Device, b: &Device) {
    let (sa, sb) = (side_stream(a), side_stream(b));
    let (xa, xb) = (zeros(a, N), zeros(b, N));
    let eb = sb.record().unwrap();
    assert!(matches!(
        sa.copy_d2d(&xa, &xb),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(
        kernels::fill(&sa, &xb, 1.0),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(sa.record_event(&eb), Err(Error::InvalidHandle(_))));
    kernels::fill(&sa, &xa, 1.0).unwrap();
    kernels::fill(&sb, &xb, 2.0).unwrap();
    sa.synchronize().unwrap();
    sb.synchronize().unwrap();
    assert_all(&download(&xa), 1.0);
    assert_all(&download(&xb), 2.0);
}

/// MD1: a sticky fault on one device does not poison the other.
pub fn md1_fault_stays_on_its_device(a: &Device, b: &Device) {
    let sa = Stream::new(a).unwrap();
    kernels::fault(&sa).unwrap();
    assert!(sa.synchronize().unwrap_err().is_sticky());
    assert!(a.sticky_error().is_some());
    assert_eq!(b.sticky_error(), None);
    let sb = Stream::new(b).unwrap();
    let xb = zeros(b, N);
    kernels::fill(&sb, &xb, 4.0).unwrap();
    sb.synchronize().unwrap();
    b.synchronize().unwrap();
    assert_all(&download(&xb), 4.0);
}

/// MD2: a stream waits on an event recorded on another device's stream (EV4 across devices).
pub fn md2_wait_on_another_devices_event(a: &Device, b: &Device) {
    let (sa, sb) = (side_stream(a), side_stream(b));
    let gate = Gate::kernel(a);
    let xb = zeros(b, N);
    gate.block(&sa);
    let ea = sa.record().unwrap();
    sb.wait_event(&ea).unwrap();
    kernels::fill(&sb, &xb, 3.0).unwrap();
    let eb = sb.record().unwrap();
    assert_stays_pending(
        &eb,
        Duration::from_millis(150),
        "work waiting on a gated device",
    );
    assert_all(&peek(&xb), 0.0);
    gate.open();
    eb.synchronize().unwrap();
    assert_all(&download(&xb), 3.0);
}

/// MD2: another device's buffers are refused by a device's operations, except in peer copies
/// (and stream-ordered frees: `md2_another_devices_stream_frees_in_its_order`).
pub fn md2_foreign_buffers_only_in_peer_copies(a: &Device, b: &Device) {
    let sb = side_stream(b);
    let (xa, yb) = (filled(a, N, 6.0), zeros(b, N));
    assert!(matches!(
        kernels::scale(&sb, &xa, 2.0),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(
        sb.copy_d2d(&yb, &xa),
        Err(Error::InvalidHandle(_))
    ));
    sb.copy_peer(&yb, &xa).unwrap();
    sb.synchronize().unwrap();
    assert_all(&download(&yb), 6.0);
}

/// MD3: a peer copy is an operation of the stream it is enqueued on: after that stream's
/// earlier work, before its later work, on a stream of either device.
pub fn md3_peer_copy_in_stream_order(a: &Device, b: &Device) {
    let sa = side_stream(a);
    let gate = Gate::kernel(a);
    let (xa, yb) = (zeros(a, N), zeros(b, N));
    gate.block(&sa);
    kernels::fill(&sa, &xa, 5.0).unwrap();
    sa.copy_peer(&yb, &xa).unwrap(); // on a's stream, into b's memory
    kernels::fill(&sa, &xa, 7.0).unwrap();
    let done = sa.record().unwrap();
    assert_stays_pending(&done, Duration::from_millis(100), "a gated peer copy");
    assert_all(&peek(&yb), 0.0);
    gate.open();
    done.synchronize().unwrap();
    assert_all(&download(&yb), 5.0);
    assert_all(&download(&xa), 7.0);
    // Back again on b's stream, into a sub-range of a's memory.
    let sb = side_stream(b);
    sb.copy_peer(&xa.slice(0..N / 2).unwrap(), &yb.slice(N / 2..).unwrap())
        .unwrap();
    sb.synchronize().unwrap();
    let back = download(&xa);
    assert_all(&back[..N / 2], 5.0);
    assert_all(&back[N / 2..], 7.0);
    assert_eq!(
        a.can_access_peer(b),
        b.can_access_peer(a),
        "peer access is symmetric"
    );
}

/// MD1: memory of `b` that `a`'s streams used is released when `a` retires the last operation
/// that held it, in the middle of `a`'s own calls: `b`'s registered buffer, copied into on
/// `a`'s stream and dropped by the program while the copy still holds it, then `a`'s streams
/// launch, record, capture and are dropped — each call must still find `a`'s context.
pub fn md1_releasing_another_devices_memory_leaves_this_devices_calls_working(
    a: &Device,
    b: &Device,
) {
    let portable = cueflow::PinnedFlags {
        portable: true,
        ..Default::default()
    };
    let y = zeros(a, N);
    for round in 0..4 {
        let mut r = cueflow::RegisteredBuffer::register(b, vec![0f32; N], portable).unwrap();
        let (s1, s2) = (side_stream(a), side_stream(a));
        let x = filled(a, N, round as f32);
        s1.copy_d2h(&mut r, &x).unwrap();
        let copied = s1.record().unwrap();
        copied.synchronize().unwrap();
        assert!(
            r.read().unwrap().iter().all(|&v| v == round as f32),
            "round {round}"
        );
        drop(r); // The copy, done but not retired, holds the registration now.
        s2.wait_event(&copied).unwrap();
        kernels::fill(&s1, &y, 1.0).unwrap();
        let e = s1.record().unwrap();
        s2.wait_event(&e).unwrap();
        kernels::scale(&s2, &y, 2.0).unwrap();
        drop(s1);
        s2.begin_capture(CaptureMode::ThreadLocal).unwrap();
        kernels::scale(&s2, &y, 3.0).unwrap();
        let g = s2.end_capture().unwrap().instantiate().unwrap();
        g.launch(&s2).unwrap();
        s2.synchronize().unwrap();
        assert_all(&download(&y), 6.0);
    }
}

/// HM1 across devices: `unregister` of `b`'s registration waits for work `a`'s stream does on
/// it, and work `a` finished but has not retired yet does not make it refuse.
pub fn hm1_unregister_waits_for_and_lets_go_of_another_devices_work(a: &Device, b: &Device) {
    let portable = cueflow::PinnedFlags {
        portable: true,
        ..Default::default()
    };
    let x = filled(a, N, 3.0);
    let s = side_stream(a);
    // Finished on `a`, not retired by it: only the copy's event was waited for.
    let mut r = cueflow::RegisteredBuffer::register(b, vec![0f32; N], portable).unwrap();
    s.copy_d2h(&mut r, &x).unwrap();
    s.record().unwrap().synchronize().unwrap();
    assert_all(&r.read().unwrap(), 3.0);
    r.unregister()
        .expect("a's copy finished: nothing holds the memory any more");
    // Still pending on `a` when `unregister` is called: it returns once the copy is done.
    let gate = Gate::kernel(a);
    let mut r = cueflow::RegisteredBuffer::register(b, vec![0f32; N], portable).unwrap();
    gate.block(&s);
    s.copy_d2h(&mut r, &x).unwrap();
    let copied = s.record().unwrap();
    let opener = gate.open_after(Duration::from_millis(50));
    r.unregister()
        .expect("unregister waits for a's copy, then ends the registration");
    assert!(
        copied.query().unwrap(),
        "unregister returned before a's copy finished"
    );
    opener.join().unwrap();
}

/// MD3: the stream of a copy between device buffers may be a third device's, also when both
/// buffers are one other device's: `b`'s stream copies within `a`'s memory, in its order.
pub fn md3_a_copy_within_another_devices_memory_runs_on_this_devices_stream(
    a: &Device,
    b: &Device,
) {
    let sb = side_stream(b);
    let gate = Gate::kernel(b);
    let (x, y) = (filled(a, N, 3.0), zeros(a, N));
    gate.block(&sb);
    sb.copy_peer(&y, &x).unwrap();
    let done = sb.record().unwrap();
    assert_stays_pending(&done, Duration::from_millis(100), "a gated copy");
    assert_all(&peek(&y), 0.0);
    gate.open();
    done.synchronize().unwrap();
    assert_all(&download(&y), 3.0);
    // Sub-ranges.
    let sa = side_stream(a);
    kernels::fill(&sa, &x, 9.0).unwrap();
    sa.synchronize().unwrap();
    sb.copy_peer(&y.slice(0..N / 2).unwrap(), &x.slice(N / 2..).unwrap())
        .unwrap();
    sb.synchronize().unwrap();
    let back = download(&y);
    assert_all(&back[..N / 2], 9.0);
    assert_all(&back[N / 2..], 3.0);
}

/// MD3 with GR1: peer copies captured into a graph — to the other device, within its memory
/// on this device's stream, and back — run as the copies on the stream would, each launch
/// copying what is there then.
pub fn md3_captured_peer_copies_run_in_the_graph(a: &Device, b: &Device) {
    let sa = side_stream(a);
    let (xa, yb, zb) = (filled(a, N, 2.0), zeros(b, N), zeros(b, N));
    sa.begin_capture(CaptureMode::ThreadLocal).unwrap();
    sa.copy_peer(&yb, &xa).unwrap(); // a -> b
    sa.copy_peer(&zb, &yb).unwrap(); // within b, on a's stream
    kernels::scale(&sa, &xa, 3.0).unwrap();
    sa.copy_peer(&xa.slice(0..N / 2).unwrap(), &zb.slice(N / 2..).unwrap())
        .unwrap(); // b -> a
    let Some(g) = peer_graph(a, b, &sa.end_capture().unwrap()) else {
        return;
    };
    let halves = |v: &[f32], lo: f32, hi: f32| {
        assert_all(&v[..N / 2], lo);
        assert_all(&v[N / 2..], hi);
    };
    g.launch(&sa).unwrap();
    sa.synchronize().unwrap();
    halves(&download(&yb), 2.0, 2.0);
    halves(&download(&zb), 2.0, 2.0);
    halves(&download(&xa), 2.0, 6.0);
    g.launch(&sa).unwrap();
    sa.synchronize().unwrap();
    halves(&download(&yb), 2.0, 6.0);
    halves(&download(&zb), 2.0, 6.0);
    halves(&download(&xa), 6.0, 18.0);
}

/// MD3, GR6: an instantiated graph's peer copies updated to other buffers of the same devices
/// copy the new buffers, and only from the update on.
pub fn md3_updated_peer_copy_nodes_copy_the_new_buffers(a: &Device, b: &Device) {
    let sa = side_stream(a);
    let graph = |xa: &DeviceBuffer<f32>, yb: &DeviceBuffer<f32>, zb: &DeviceBuffer<f32>| {
        let cap = Stream::new(a).unwrap();
        cap.begin_capture(CaptureMode::ThreadLocal).unwrap();
        cap.copy_peer(yb, xa).unwrap(); // a -> b
        cap.copy_peer(zb, yb).unwrap(); // within b, on a's stream
        cap.end_capture().unwrap()
    };
    let one = [filled(a, N, 1.0), zeros(b, N), zeros(b, N)];
    let two = [filled(a, N, 2.0), zeros(b, N), zeros(b, N)];
    let Some(exec) = peer_graph(a, b, &graph(&one[0], &one[1], &one[2])) else {
        return;
    };
    exec.update(&graph(&two[0], &two[1], &two[2])).unwrap();
    exec.launch(&sa).unwrap();
    sa.synchronize().unwrap();
    assert_all(&download(&one[2]), 0.0);
    assert_all(&download(&two[1]), 2.0);
    assert_all(&download(&two[2]), 2.0);
}

/// MD3, GR6: an update that moves a graph's copy to memory of another device (the source from
/// `a` to `b`) and changes a memset before it either takes effect whole from then on, or is
/// refused with a typed error and leaves the graph as it was, the memset included (CUDA: a
/// memcpy node keeps its memory's contexts).
pub fn md3_an_update_that_moves_a_copy_to_another_device_is_whole_or_refused(
    a: &Device,
    b: &Device,
) {
    let sa = side_stream(a);
    let graph = |m: &DeviceBuffer<f32>, dst: &DeviceBuffer<f32>, src: &DeviceBuffer<f32>| {
        let cap = Stream::new(a).unwrap();
        cap.begin_capture(CaptureMode::ThreadLocal).unwrap();
        cap.memset(m, 0x3f).unwrap();
        cap.copy_peer(dst, src).unwrap();
        cap.end_capture().unwrap()
    };
    let (xa, yb, xb) = (filled(a, N, 1.0), zeros(b, N), filled(b, N, 3.0));
    let (m1, m2) = (zeros(a, N), zeros(a, N));
    let Some(exec) = peer_graph(a, b, &graph(&m1, &yb, &xa)) else {
        return;
    };
    exec.launch(&sa).unwrap();
    sa.synchronize().unwrap();
    assert_all(&download(&yb), 1.0);
    kernels::fill(&sa, &xa, 5.0).unwrap();
    kernels::fill(&sa, &m1, 0.0).unwrap();
    let set = f32::from_bits(0x3f3f_3f3f);
    let (want, m1_want, m2_want) = match exec.update(&graph(&m2, &yb, &xb)) {
        Ok(()) => (3.0, 0.0, set), // b's memory, and m2, from now on.
        Err(Error::Unsupported(_)) => (5.0, set, 0.0), // Still a's memory, and m1.
        Err(e) => panic!("expected the update or Unsupported, got {e:?}"),
    };
    exec.launch(&sa).unwrap();
    sa.synchronize().unwrap();
    assert_all(&download(&yb), want);
    assert_all(&download(&m1), m1_want);
    assert_all(&download(&m2), m2_want);
}

/// `g` instantiated, if `a` and `b` have peer access; otherwise the instantiation must be
/// refused as `Unsupported` (MD3: on CUDA a copy between two GPUs inside a graph needs peer
/// access), and there is nothing to launch.
fn peer_graph(a: &Device, b: &Device, g: &cueflow::Graph) -> Option<cueflow::GraphExec> {
    let r = g.instantiate();
    if a.can_access_peer(b) {
        return Some(r.unwrap());
    }
    assert!(matches!(r, Err(Error::Unsupported(_))), "{:?}", r.err());
    eprintln!(
        "SKIP the launches: {:?} and {:?} have no peer access",
        a.spec(),
        b.spec()
    );
    None
}

/// MD3: peer copies are bounds-checked (CP4) and enqueue nothing when refused.
pub fn md3_peer_copy_bounds(a: &Device, b: &Device) {
    let sa = side_stream(a);
    let (xa, yb) = (filled(a, N, 1.0), zeros(b, N / 2));
    a.start_trace().unwrap();
    let e = sa.copy_peer(&yb, &xa).unwrap_err();
    let t = a.stop_trace().unwrap();
    assert!(matches!(e, Error::OutOfBounds { rule: "CP4", .. }), "{e:?}");
    assert_eq!(enqueued(&t), 0);
    assert_all(&download(&yb), 0.0);
}

/// Two ranks' streams and a communicator over `a` and `b`, warmed up: NCCL sets up its
/// connections during a communicator's first call, which must not meet a gated stream.
fn pair(a: &Device, b: &Device) -> (Communicator, [Stream; 2]) {
    let comm = Communicator::new(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(comm.ranks(), 2);
    assert_eq!(comm.local_ranks(), vec![0, 1]);
    let s = [side_stream(a), side_stream(b)];
    let w = [zeros(a, 64), zeros(b, 64)];
    comm.all_reduce(
        &[(&s[0], &w[0], &w[0]), (&s[1], &w[1], &w[1])],
        ReduceOp::Sum,
    )
    .unwrap();
    s.iter().for_each(|s| s.synchronize().unwrap());
    (comm, s)
}

/// MD4: every collective gives NCCL's results on two ranks.
pub fn md4_every_collective(a: &Device, b: &Device) {
    let (comm, s) = pair(a, b);
    let devs = [a, b];
    let n = 1000;
    let send: Vec<DeviceBuffer<i32>> = (0..2).map(|r| upload(devs[r], &rank_data(r, n))).collect();
    let sentinel = vec![-1i32; 2 * n];
    let recv = |len: usize| -> Vec<DeviceBuffer<i32>> {
        (0..2).map(|r| upload(devs[r], &sentinel[..len])).collect()
    };
    fn parts<'a>(
        s: &'a [Stream; 2],
        send: &'a [DeviceBuffer<i32>],
        recv: &'a [DeviceBuffer<i32>],
    ) -> Vec<Part<'a, i32>> {
        (0..2).map(|r| (&s[r], &send[r], &recv[r])).collect()
    }
    let sync = || s.iter().for_each(|s| s.synchronize().unwrap());
    let (d0, d1) = (rank_data(0, n), rank_data(1, n));

    let out = recv(n);
    comm.all_reduce(&parts(&s, &send, &out), ReduceOp::Sum)
        .unwrap();
    sync();
    let sum: Vec<i32> = d0.iter().zip(&d1).map(|(x, y)| x + y).collect();
    assert_eq!(download(&out[0]), sum);
    assert_eq!(download(&out[1]), sum);

    comm.all_reduce(&parts(&s, &send, &out), ReduceOp::Min)
        .unwrap();
    sync();
    assert_eq!(download(&out[1]), d0);

    let out = recv(n);
    comm.broadcast(&parts(&s, &send, &out), 1).unwrap();
    sync();
    assert_eq!(download(&out[0]), d1);
    assert_eq!(download(&out[1]), d1);

    let out = recv(n);
    comm.reduce(&parts(&s, &send, &out), ReduceOp::Max, 0)
        .unwrap();
    sync();
    assert_eq!(download(&out[0]), d1);
    assert_eq!(
        download(&out[1]),
        sentinel[..n],
        "a reduce leaves non-root ranks alone"
    );

    let out = recv(2 * n);
    comm.all_gather(&parts(&s, &send, &out)).unwrap();
    sync();
    let gathered: Vec<i32> = d0.iter().chain(&d1).copied().collect();
    assert_eq!(download(&out[0]), gathered);
    assert_eq!(download(&out[1]), gathered);

    let out = recv(n / 2);
    comm.reduce_scatter(&parts(&s, &send, &out), ReduceOp::Sum)
        .unwrap();
    sync();
    assert_eq!(download(&out[0]), sum[..n / 2]);
    assert_eq!(download(&out[1]), sum[n / 2..]);
}

/// MD4: collectives in place, and in floating point.
pub fn md4_in_place_and_floats(a: &Device, b: &Device) {
    let (comm, s) = pair(a, b);
    let x = [filled(a, N, 1.5), filled(b, N, 2.25)];
    let parts: Vec<_> = (0..2).map(|r| (&s[r], &x[r], &x[r])).collect();
    comm.all_reduce(&parts, ReduceOp::Sum).unwrap();
    comm.all_reduce(&parts, ReduceOp::Prod).unwrap(); // 3.75 * 3.75
    s.iter().for_each(|s| s.synchronize().unwrap());
    assert_all(&download(&x[0]), 14.0625);
    assert_all(&download(&x[1]), 14.0625);
    // All-gather in place: each rank's part of `recv` is its send buffer.
    let g = [zeros(a, 2 * N), zeros(b, 2 * N)];
    for (r, s) in s.iter().enumerate() {
        kernels::fill(s, &g[r].slice(r * N..(r + 1) * N).unwrap(), r as f32 + 1.0).unwrap();
    }
    let sends = [g[0].slice(0..N).unwrap(), g[1].slice(N..2 * N).unwrap()];
    let parts: Vec<_> = (0..2).map(|r| (&s[r], &sends[r], &g[r])).collect();
    comm.all_gather(&parts).unwrap();
    s.iter().for_each(|s| s.synchronize().unwrap());
    for buf in &g {
        let v = download(buf);
        assert_all(&v[..N], 1.0);
        assert_all(&v[N..], 2.0);
    }
}

/// MD4: a collective is an operation of each rank's stream: it runs after that stream's
/// earlier work (so no rank finishes while another rank's stream is held), and later work on
/// the stream sees its result.
pub fn md4_collectives_are_stream_operations(a: &Device, b: &Device) {
    let (comm, s) = pair(a, b);
    // A host-function gate: it holds the stream without holding a multiprocessor, which
    // NCCL's kernels may need all of.
    let gate = Gate::host(a);
    let x = [filled(a, N, 1.0), filled(b, N, 2.0)];
    gate.block(&s[0]);
    kernels::scale(&s[0], &x[0], 10.0).unwrap(); // 10, before the collective in a's order
    let parts: Vec<_> = (0..2).map(|r| (&s[r], &x[r], &x[r])).collect();
    comm.all_reduce(&parts, ReduceOp::Sum).unwrap(); // 12
    kernels::scale(&s[1], &x[1], 0.5).unwrap(); // 6, after it in b's order
    let eb = s[1].record().unwrap();
    assert_stays_pending(
        &eb,
        Duration::from_millis(150),
        "rank 1 while rank 0 is held",
    );
    assert_all(&peek(&x[1]), 2.0);
    gate.open();
    eb.synchronize().unwrap();
    s[0].synchronize().unwrap();
    gate.assert_not_timed_out();
    assert_all(&download(&x[0]), 12.0);
    assert_all(&download(&x[1]), 6.0);
}

/// MD4: members that disagree, and other misuse, are refused at the call with a typed error;
/// nothing is enqueued, and the next correct call still pairs up (no rank waits for ever).
pub fn md4_mismatches_refused(a: &Device, b: &Device) {
    let (comm, s) = pair(a, b);
    let x = [filled(a, N, 1.0), filled(b, N, 1.0)];
    let short = filled(b, N / 2, 1.0);
    let wide = zeros(a, 2 * N);
    let e = comm
        .all_reduce(
            &[(&s[0], &x[0], &x[0]), (&s[1], &short, &short)],
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::Collective(m) if m.contains("disagree")),
        "{e}"
    );
    let checks: Vec<(&str, Error)> = vec![
        (
            "one part for two ranks",
            comm.all_reduce(&[(&s[0], &x[0], &x[0])], ReduceOp::Sum)
                .unwrap_err(),
        ),
        (
            "root out of range",
            comm.broadcast(&[(&s[0], &x[0], &x[0]), (&s[1], &x[1], &x[1])], 2)
                .unwrap_err(),
        ),
        (
            "receive of the wrong length",
            comm.all_gather(&[(&s[0], &x[0], &x[0]), (&s[1], &x[1], &x[1])])
                .unwrap_err(),
        ),
        (
            "overlap not in place",
            comm.all_reduce(
                &[
                    (
                        &s[0],
                        &wide.slice(0..N).unwrap(),
                        &wide.slice(1..N + 1).unwrap(),
                    ),
                    (&s[1], &x[1], &x[1]),
                ],
                ReduceOp::Sum,
            )
            .unwrap_err(),
        ),
    ];
    for (what, e) in &checks {
        assert!(matches!(e, Error::Collective(_)), "{what}: {e:?}");
    }
    let swapped = comm.all_reduce(
        &[(&s[1], &x[1], &x[1]), (&s[0], &x[0], &x[0])],
        ReduceOp::Sum,
    );
    assert!(
        matches!(swapped, Err(Error::InvalidHandle(_))),
        "{swapped:?}"
    );
    assert!(
        s[0].query().unwrap() && s[1].query().unwrap(),
        "nothing was enqueued"
    );
    comm.all_reduce(
        &[(&s[0], &x[0], &x[0]), (&s[1], &x[1], &x[1])],
        ReduceOp::Sum,
    )
    .unwrap();
    s.iter().for_each(|s| s.synchronize().unwrap());
    assert_all(&download(&x[0]), 2.0);
    assert_all(&download(&x[1]), 2.0);
    // Mixed backends or a device twice.
    let host = Device::host().unwrap();
    if a.properties().backend != "host" {
        assert!(Communicator::new(&[a.clone(), host]).is_err());
    }
    assert!(matches!(
        Communicator::new(&[a.clone(), a.clone()]),
        Err(Error::Collective(_))
    ));
    assert!(matches!(Communicator::new(&[]), Err(Error::Collective(_))));
}

/// MD4: collectives take part in tracking like any operation: an unordered read of what a
/// collective wrote is a race the sanitizer reports (AC3, AC4), and a capture that takes in
/// only some members refuses them (GR11).
pub fn md4_collectives_are_tracked(a: &Device, b: &Device) {
    let (comm, s) = pair(a, b);
    let x = [filled(a, N, 1.0), filled(b, N, 1.0)];
    let y = zeros(b, N);
    let parts: Vec<_> = (0..2).map(|r| (&s[r], &x[r], &x[r])).collect();
    b.set_sanitize(SanitizeMode::Error);
    comm.all_reduce(&parts, ReduceOp::Sum).unwrap();
    let other = side_stream(b);
    let e = other.copy_d2d(&y, &x[1]).unwrap_err();
    assert!(
        matches!(&e, Error::Race(r) if r.to_string().contains("all_reduce")),
        "{e}"
    );
    let done = Event::new(b).unwrap();
    s[1].record_event(&done).unwrap();
    other.wait_event(&done).unwrap();
    other.copy_d2d(&y, &x[1]).unwrap();
    other.synchronize().unwrap();
    s[0].synchronize().unwrap();
    b.set_sanitize(SanitizeMode::Off);
    assert_all(&download(&y), 2.0);

    let cap = Stream::new(a).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    let e = comm
        .all_reduce(
            &[(&cap, &x[0], &x[0]), (&s[1], &x[1], &x[1])],
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(matches!(e, Error::Capture(_)), "{e:?}");
    cap.end_capture().unwrap();
}

/// MD4 over four ranks: `host:0`–`host:3` (four GPUs on CUDA, SKIP with fewer). Integer results
/// equal a sequential reference bit for bit; on the host backend floats are reduced in rank
/// order, left to right, as documented.
pub fn md4_four_ranks(a: &Device, b: &Device) {
    let host = is_host(a);
    let more = |n: usize| {
        if host {
            Device::host_n(n, 0).ok()
        } else {
            Device::cuda(n).ok()
        }
    };
    let (Some(c), Some(d)) = (more(2), more(3)) else {
        eprintln!("SKIP four-rank collectives: fewer than four devices");
        return;
    };
    let devs = [a.clone(), b.clone(), c, d];
    let comm = Communicator::new(&devs).unwrap();
    let s: Vec<Stream> = devs.iter().map(side_stream).collect();
    let n = 512;
    let x: Vec<DeviceBuffer<i32>> = (0..4).map(|r| upload(&devs[r], &rank_data(r, n))).collect();
    let sum: Vec<i32> = (0..n)
        .map(|i| (0..4).map(|r| rank_data(r, n)[i]).sum())
        .collect();
    let out: Vec<DeviceBuffer<i32>> = (0..4).map(|r| upload(&devs[r], &vec![0; n])).collect();
    let parts: Vec<_> = (0..4).map(|r| (&s[r], &x[r], &out[r])).collect();
    comm.all_reduce(&parts, ReduceOp::Sum).unwrap();
    let quarter: Vec<DeviceBuffer<i32>> =
        (0..4).map(|r| upload(&devs[r], &vec![0; n / 4])).collect();
    let parts: Vec<_> = (0..4).map(|r| (&s[r], &x[r], &quarter[r])).collect();
    comm.reduce_scatter(&parts, ReduceOp::Sum).unwrap();
    s.iter().for_each(|s| s.synchronize().unwrap());
    for r in 0..4 {
        assert_eq!(download(&out[r]), sum, "all_reduce on rank {r}");
        assert_eq!(
            download(&quarter[r]),
            sum[r * n / 4..(r + 1) * n / 4],
            "reduce_scatter on rank {r}"
        );
    }
    if host {
        // ((1e8 + 1) - 1e8) + 1 = 1 in f32, left to right; another order gives 0 or 2.
        let v = [1e8f32, 1.0, -1e8, 1.0];
        let f: Vec<DeviceBuffer<f32>> = (0..4).map(|r| upload(&devs[r], &[v[r]; 8])).collect();
        let parts: Vec<_> = (0..4).map(|r| (&s[r], &f[r], &f[r])).collect();
        comm.all_reduce(&parts, ReduceOp::Sum).unwrap();
        s.iter().for_each(|s| s.synchronize().unwrap());
        assert_all(&download(&f[3]), 1.0);
    }
}

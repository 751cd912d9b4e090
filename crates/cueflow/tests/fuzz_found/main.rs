//! Defects the program fuzzer (`tests/fuzz/`, `tests/differential_fuzz.rs`) found, each
//! shrunk to a minimal program written with the public API — or, where no smaller one was
//! found, replayed through the fuzzer's own harness (`replayed.rs`, with the fuzzer's modules
//! included below). Each says what the fuzzer saw, what must happen, and the cause that was
//! fixed. A test of a defect not fixed yet is `#[ignore = "fuzz-found: …"]` (run those with
//! `cargo test --test fuzz_found -- --ignored`), and the fuzzer goes around its pattern
//! (`tests/fuzz/known.rs`) unless `FUZZ_KNOWN` names it.
//!
//! F1 to F8 are fixed. F2 to F8 had one cause: access records were numbered per device while
//! an allocation's access map holds the accesses of every device that touches it, so two
//! devices' records could share an id, and a call that met both as conflicts kept only one
//! (automatic ordering, conflict serialization and the sanitizer all missed the other); ids
//! are process-wide now (`core/tracking/access.rs`, `rec_ids`).
//!
//! F10 (fixed) has its test beside the code, where a stress of the worker makes it fail in a
//! few rounds rather than once in a hundred fuzzed programs:
//! `backend/host/isolate/read_only_tests.rs`,
//! `w7_launches_arriving_together_run_only_after_stale_pages_are_released`. A CUDA C kernel
//! that wrote a buffer the kernel before it read in full faulted now and then: the kernel
//! worker leaves a read-declared argument's pages read-only after its launch (AC7) until the
//! next launch releases them, and of the writing kernel's blocks, arriving as several requests
//! at once, one cleared the "stale pages exist" flag before releasing them while another,
//! seeing the flag clear, ran on the pages still read-only (`isolate/worker.cpp`, `ro_start`).
//!
//! F11 and F12 (worked around) are the CUDA driver's: a graph's while node fails the launch
//! now and then (`CUDA_ERROR_LAUNCH_FAILED`) while a kernel beside it reaches host memory —
//! faulting managed pages in (F11), writing mapped memory (F12). Raw CUDA does the same
//! (`benches/cuda/while_managed_probe.cu`, `benches/cuda/switch_while_probe.cu`). cueflow
//! keeps such nodes off the conditional nodes' time with edges (C6 of
//! `backend/cuda/graph_cond.rs`), and such work of other streams apart from those graphs'
//! launches (C7); the replayed programs (`while_managed.rs`, `switch_while.rs`) run on a GPU
//! only, and running the two at once (the default test threads) checks C7.
#![allow(dead_code)] // The fuzzer's modules, some of whose items only the fuzzer uses.

#[path = "../fuzz/exec.rs"]
mod exec;
#[path = "../fuzz/gen.rs"]
mod gen;
#[path = "../fuzz/graphs.rs"]
mod graphs;
#[path = "../fuzz/kernels.rs"]
mod kernels;
#[path = "../fuzz/known.rs"]
mod known;
#[path = "../fuzz/model.rs"]
mod model;
#[path = "../fuzz/program.rs"]
mod program;
#[path = "../fuzz/run.rs"]
mod run;
#[path = "../fuzz/stats.rs"]
mod stats;

/// Programs the fuzzer found that are replayed through its harness (F5–F8).
mod replayed;
/// F12, replayed on a GPU.
mod switch_while;
/// F11, replayed on a GPU.
mod while_managed;

use cueflow::{
    kernels as builtins, Device, DeviceBuffer, Error, Event, Graph, GraphNodeId, Kernel,
    KernelArgs, LaunchConfig, ManagedBuffer, PinnedBuffer, PinnedFlags, SanitizeMode, Stream,
};

const ADD_ONE: &str = r#"
extern "C" __global__ void add_one(float* dst, const float* src, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] + 1.0f;
}
"#;

/// The whole of buffer `b` of a fuzzer program.
/// GPU 0 for a replay that runs on a GPU only, or `None` after saying why `test` skips (a
/// failure where `CUEFLOW_REQUIRE_CUDA` is set).
fn gpu_or_skip(test: &str) -> Option<Device> {
    match Device::cuda(0) {
        Ok(dev) => Some(dev),
        Err(e) if std::env::var_os("CUEFLOW_REQUIRE_CUDA").is_some() => panic!("{e}"),
        Err(e) => {
            eprintln!("SKIP cuda ({test}): {e}");
            None
        }
    }
}

/// Run `p` on `dev` in `mode` as many times as the variable `runs` says (else `default`):
/// every run must match the model.
fn replay_on_gpu(dev: Device, p: &program::Program, mode: run::Mode, runs: &str, default: u32) {
    let devs = vec![dev];
    let shared = exec::Shared::on(&devs, false).unwrap();
    let n = std::env::var(runs).map_or(default, |v| v.parse().unwrap());
    for i in 0..n {
        let r = exec::execute(&devs, &shared, p, mode, known::Known::default());
        assert!(r.is_ok(), "run {i}: {:?}", r.err());
    }
}

fn whole(b: u8) -> program::Loc {
    program::Loc {
        buf: b,
        part: program::Part::Whole,
    }
}

/// Half `i` of buffer `b`.
fn half(b: u8, i: u8) -> program::Loc {
    program::Loc {
        buf: b,
        part: program::Part::Half(i),
    }
}

/// Quarter `i` of buffer `b`.
fn quarter(b: u8, i: u8) -> program::Loc {
    program::Loc {
        buf: b,
        part: program::Part::Quarter(i),
    }
}

/// Three device buffers of `dev`, zeroed and synchronized.
fn zeroed(dev: &Device) -> cueflow::Result<Vec<DeviceBuffer<f32>>> {
    let setup = Stream::new(dev)?;
    let bufs = (0..3)
        .map(|_| {
            let b = DeviceBuffer::<f32>::new(dev, 64)?;
            builtins::fill(&setup, &b, 0.0)?;
            Ok(b)
        })
        .collect::<cueflow::Result<Vec<_>>>()?;
    setup.synchronize()?;
    Ok(bufs)
}

/// One try of [`graph_with_a_wait_node_after_a_cross_device_wait_runs_its_c_kernel_on_its_device`]:
/// the kernel's result.
fn wait_node_after_cross_device_wait(add: &Kernel) -> cueflow::Result<f32> {
    let (d0, d1) = (Device::host_n(0, 2)?, Device::host_n(1, 2)?);
    let (b0, b1) = (zeroed(&d0)?, zeroed(&d1)?);
    let (s0, s1) = (Stream::new(&d0)?, Stream::new(&d1)?);
    // Device 0 has work pending when device 1's stream waits for it.
    s0.copy_d2d(&b0[2], &b0[1])?;
    let e = s0.record()?;
    let mut g = Graph::new(&d1);
    let never = Event::new(&d1)?;
    let wait: GraphNodeId = g.add_event_wait(&[], &never)?;
    let args = KernelArgs::new()
        .write(&b1[0].slice(48..64)?)
        .read(&b1[1].slice(0..16)?)
        .scalar(16u32);
    g.add_kernel(&[wait], add, LaunchConfig::for_elements(16, 16), args)?;
    let exec = g.instantiate()?;
    s1.wait_event(&e)?;
    exec.launch(&s1)?;
    d0.synchronize()?;
    d1.synchronize()?;
    let mut out = vec![0f32; 64];
    s1.read_pageable(&mut out, &b1[0])?;
    Ok(out[48])
}

/// Found by `fuzz_two_devices_full_ordering_by_events` (host backend, graphs and several
/// devices): a graph of device 1 with an event wait node, launched on a stream that waits on
/// an event of device 0 whose work is still pending, runs its CUDA C kernel where device 1's
/// memory is not mapped: the kernel faults with "illegal address" on its own device's
/// buffer, and the device is poisoned. Expected: 1.0 on every try. Seen before the fix (F1):
/// a `KernelFault` (`illegal address: access to 0x…`) in most tries.
///
/// Cause: the launch is started by device 0's compute worker as it completes the copy device
/// 1 waits for; the graph's root (the wait node, as an allocation node would) has no work, and
/// the scheduler's graph fast path ran the ready single-block kernel after it inline on that
/// worker — in device 0's kernel worker process, which maps device 0's memory only (the
/// arena's rule A5). Fixed: a compute worker inlines only its own scheduler's graph nodes
/// (`backend/host/sched.rs` `on_own_compute_worker`, `graph_walk.rs` `graph_node_done`).
#[test]
fn graph_with_a_wait_node_after_a_cross_device_wait_runs_its_c_kernel_on_its_device() {
    let add = Kernel::new("add_one")
        .cuda_source(ADD_ONE, "add_one")
        .build();
    for i in 0..20 {
        let got = wait_node_after_cross_device_wait(&add);
        assert!(
            matches!(got, Ok(v) if v == 1.0),
            "try {i}: expected 1.0, got {got:?}"
        );
    }
}

/// One try of [`automatic_ordering_waits_for_its_own_device_and_another_at_once`]: the value
/// that ends up in `g1[16]`.
fn write_after_write_and_read_after_write_across_devices() -> cueflow::Result<f32> {
    let (d0, d1) = (Device::host_n(0, 2)?, Device::host_n(1, 2)?);
    for d in [&d0, &d1] {
        d.set_auto_order(true);
        d.set_sanitize(SanitizeMode::Error);
    }
    let mut p1 = PinnedBuffer::<f32>::with_flags(&d1, 64, PinnedFlags::default().portable())?;
    let mut g1 = ManagedBuffer::<f32>::new(&d1, 64)?;
    // Device 1 writes p1[16..32] = 1.
    let s1 = Stream::new(&d1)?;
    let t = DeviceBuffer::<f32>::new(&d1, 16)?;
    builtins::fill(&s1, &t, 1.0)?;
    s1.copy_d2h(p1.range_mut(16..32)?, &t)?;
    // A stream of device 0 writes all of g1 = 7.
    let a = Stream::new(&d0)?;
    let sevens = DeviceBuffer::<f32>::new(&d0, 64)?;
    builtins::fill(&a, &sevens, 7.0)?;
    a.copy_d2h(g1.range_mut(..)?, &sevens)?;
    // Another stream of device 0 copies p1 over g1: after device 1's write of p1 (a read
    // after write) and after stream a's write of g1 (a write after write).
    let b = Stream::builder(&d0).non_blocking().build()?;
    b.copy_h2h(g1.range_mut(..)?, p1.range(..)?)?;
    d0.synchronize()?;
    d1.synchronize()?;
    let v = g1.read()?[16];
    Ok(v)
}

/// Found by `fuzz_two_devices_auto_ordering` (automatic ordering, several devices): an
/// operation that conflicts with pending work on another stream of its own device and with
/// pending work of another device waits for the other device only. Here stream b's copy into
/// `g1` must follow stream a's copy into `g1` (a write after write on device 0) and device 1's
/// write of `p1` (a read after write across devices). Expected: `g1[16] == 1.0` on every try.
/// Seen before the fix (F2): 7.0 (stream a's copy landed last) in about one try in ten.
/// Cause: device 1's record of its write of `p1` and device 0's record of stream a's write of
/// `g1` could carry one id, and b's call kept one conflict per id: it waited for device 1's
/// write only (see the module docs).
#[test]
fn automatic_ordering_waits_for_its_own_device_and_another_at_once() {
    for i in 0..200 {
        let got = write_after_write_and_read_after_write_across_devices();
        assert!(
            matches!(got, Ok(v) if v == 1.0),
            "try {i}: expected 1.0, got {got:?}"
        );
    }
}

/// Found by `fuzz_two_devices_random_ordering_under_the_sanitizer` (sanitizer, several
/// devices, pageable copies): after a `read_pageable` of device 1's buffer, a peer copy on a
/// stream of device 0 that reads the buffer and a kernel on another stream of device 1 that
/// then writes it, with nothing ordering the two, are not reported as a race (AC4); without
/// the `read_pageable` — or with a stream or device synchronization, a `write_pageable`, or a
/// `read_pageable` of other bytes in its place — they are. The fuzzer saw the race happen:
/// the copy read the kernel's result (-0.0 for 0.0). Expected: `Error::Race` from the
/// kernel's launch. Seen before the fix (F3): the launch is accepted — the `read_pageable`
/// moved device 1's record numbering so that device 0's record of the peer read and a record
/// of device 1 the kernel also conflicts with got one id, and the check kept one of them.
#[test]
fn sanitizer_sees_another_devices_peer_read_after_a_pageable_read() {
    let (d0, d1) = (Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap());
    for d in [&d0, &d1] {
        d.set_sanitize(SanitizeMode::Error);
    }
    let a0 = DeviceBuffer::<f32>::new(&d0, 64).unwrap();
    let a1 = DeviceBuffer::<f32>::new(&d1, 64).unwrap();
    let quiet = |s: Stream, b: &DeviceBuffer<f32>| {
        s.memset(b, 0).unwrap();
        s.synchronize().unwrap();
    };
    quiet(Stream::new(&d0).unwrap(), &a0);
    quiet(Stream::new(&d1).unwrap(), &a1);
    let reader = Stream::builder(&d1).non_blocking().build().unwrap();
    let mut host = vec![0f32; 64];
    reader.read_pageable(&mut host, &a1).unwrap();
    // Device 0 reads a1[0..32]; device 1 then writes it on another stream, unordered.
    let s0 = Stream::builder(&d0).non_blocking().build().unwrap();
    s0.copy_peer(&a0.slice(32..64).unwrap(), &a1.slice(0..32).unwrap())
        .unwrap();
    let s1 = Stream::builder(&d1).non_blocking().build().unwrap();
    let r = builtins::scale(&s1, &a1.slice(0..32).unwrap(), -1.0);
    d0.synchronize().unwrap();
    d1.synchronize().unwrap();
    assert!(
        matches!(r, Err(Error::Race(_))),
        "an unordered write after another device's read must be refused as a race, got {r:?}"
    );
}

/// Found by `fuzz_two_devices_random_ordering_under_the_sanitizer` (sanitizer, several
/// devices): once a stream of device 1 has made a peer copy between buffers of device 0 and
/// device 1 has been synchronized, a kernel on one stream of device 0 that reads a buffer
/// another stream of device 0 is writing, with nothing ordering them, is not reported as a
/// race (AC4) — a copy in the kernel's place is. Without the peer copy, without device 1's
/// own earlier kernel, or without the synchronization, it is reported. The fuzzer saw the
/// race happen (the kernel read the buffer before the write). Expected: `Error::Race` from
/// the saxpy. Seen before the fix (F4): accepted, every time — device 1's record of the peer
/// copy's read and device 0's record of the writer's fill had one id, and the saxpy's check
/// kept one of its two conflicts.
#[test]
fn sanitizer_sees_a_race_on_a_device_another_device_copied_on() {
    let (d0, d1) = (Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap());
    for d in [&d0, &d1] {
        d.set_sanitize(SanitizeMode::Error);
    }
    let (x0, y0) = (
        DeviceBuffer::<f32>::new(&d0, 64).unwrap(),
        DeviceBuffer::<f32>::new(&d0, 64).unwrap(),
    );
    let z1 = DeviceBuffer::<f32>::new(&d1, 64).unwrap();
    let setup = Stream::new(&d0).unwrap();
    builtins::fill(&setup, &x0, 0.0).unwrap();
    builtins::fill(&setup, &y0, 0.0).unwrap();
    setup.synchronize().unwrap();
    // Device 1: a kernel of its own, then a peer copy between device 0's buffers; finished.
    let a1 = Stream::new(&d1).unwrap();
    builtins::fill(&a1, &z1, 2.0).unwrap();
    a1.copy_peer(&x0, &y0).unwrap();
    d1.synchronize().unwrap();
    // Device 0: one stream writes y0, another reads it, unordered.
    let writer = Stream::new(&d0).unwrap();
    builtins::fill(&writer, &y0, 1.0).unwrap();
    let reader = Stream::builder(&d0).non_blocking().build().unwrap();
    let r = builtins::saxpy(&reader, 1.0, &y0, &x0);
    d0.synchronize().unwrap();
    assert!(
        matches!(r, Err(Error::Race(_))),
        "a kernel reading what another stream writes, unordered, must be refused as a race, \
         got {r:?}"
    );
}

/// Found by `fuzz_random_ordering_under_the_sanitizer` (one device, built graphs with event
/// record nodes): a graph whose kernel node is upstream of a record node, launched on a
/// stream that is then dropped; after `Device::synchronize` a new stream reads the kernel's
/// bytes — and the sanitizer reported a race with the kernel (AC4), though the device
/// synchronization waited for it (ST9). Expected: the read is accepted. Seen before the fix
/// (F9): `Error::Race` ("nothing orders stream … after stream …"), every time.
///
/// Cause: the nodes upstream of record nodes are stamped by an actor of the graph's own
/// (GR8's exact scope, `core/tracking/track_scope.rs` rule 3), which only the launching stream's
/// clock carries; a dropped stream left behind its own last operation only, so a device
/// synchronization afterwards observed the stream but not the graph's actor. Fixed: a
/// device's tracking state keeps the join of its dropped streams' clocks (`core/tracking/history.rs`).
#[test]
fn device_synchronize_observes_a_dropped_streams_graph_nodes_before_a_record_node() {
    let dev = Device::host_n(0, 1).unwrap();
    dev.set_sanitize(SanitizeMode::Error);
    let b = DeviceBuffer::<f32>::new(&dev, 64).unwrap();
    let mut g = Graph::new(&dev);
    let fill = g
        .add_kernel(
            &[],
            &builtins::FILL_F32,
            LaunchConfig::for_elements(64, builtins::BLOCK),
            KernelArgs::new().write(&b).scalar(3.0f32).scalar(64u64),
        )
        .unwrap();
    let e = Event::new(&dev).unwrap();
    g.add_event_record(&[fill], &e).unwrap();
    let exec = g.instantiate().unwrap();
    let s = Stream::new(&dev).unwrap();
    exec.launch(&s).unwrap();
    drop(s);
    dev.synchronize().unwrap();
    let reader = Stream::new(&dev).unwrap();
    let mut out = vec![0f32; 64];
    let r = reader.read_pageable(&mut out, &b);
    assert!(
        r.is_ok(),
        "a read after a device synchronization must be accepted, got {r:?}"
    );
    assert_eq!(out, vec![3.0; 64]);
}

/// One try of [`sanitizer_tells_two_devices_accesses_apart`]: a peer copy on a stream of
/// device 0 from `x1` (device 1) into `y0` (device 0), after a write of each by a stream of
/// its own device, one of the two writes observed by a synchronization and the other not;
/// `extra` earlier writes on device 0 shift the numbering of its accesses.
fn peer_copy_after_one_observed_write(racy_src: bool, extra: usize) -> cueflow::Result<()> {
    let (d0, d1) = (Device::host_n(0, 2)?, Device::host_n(1, 2)?);
    for d in [&d0, &d1] {
        d.set_sanitize(SanitizeMode::Error);
    }
    let x1 = DeviceBuffer::<f32>::new(&d1, 64)?;
    let (y0, scratch) = (
        DeviceBuffer::<f32>::new(&d0, 64)?,
        DeviceBuffer::<f32>::new(&d0, 64)?,
    );
    let (w0, w1) = (Stream::new(&d0)?, Stream::new(&d1)?);
    for _ in 0..extra {
        w0.memset(&scratch, 0)?;
    }
    w1.memset(&x1, 0)?;
    w0.memset(&y0, 0)?;
    if racy_src {
        w0.synchronize()?;
    } else {
        w1.synchronize()?;
    }
    let r0 = Stream::builder(&d0).non_blocking().build()?;
    let r = r0.copy_peer(&y0, &x1);
    d0.synchronize()?;
    d1.synchronize()?;
    r
}

/// The cause of F2 to F8, without the chance their programs need: a call whose accesses
/// conflict with an observed access of one device and an unordered one of another must be
/// reported as a race (AC4), whatever the two devices' accesses were numbered. Before the fix
/// the numbering was per device, and with equal numbers (no `extra` write here) the check
/// kept the observed access and dropped the racy one.
#[test]
fn sanitizer_tells_two_devices_accesses_apart() {
    for racy_src in [true, false] {
        for extra in 0..3 {
            let r = peer_copy_after_one_observed_write(racy_src, extra);
            assert!(
                matches!(r, Err(Error::Race(_))),
                "racy {}, {extra} earlier writes: the unordered write must be reported, got {r:?}",
                if racy_src { "source" } else { "destination" }
            );
        }
    }
}

/// One try of [`automatic_ordering_waits_for_a_graph_write_after_a_record_nodes_scope`]:
/// what a copy of `b` to the host, made on another stream right after the launch, reads.
fn copy_after_a_write_outside_the_record_nodes_scope() -> cueflow::Result<f32> {
    let dev = Device::host_with_workers(2)?;
    dev.set_auto_order(true);
    const N: usize = 4096;
    let (b, other) = (
        DeviceBuffer::<f32>::new(&dev, N)?,
        DeviceBuffer::<f32>::new(&dev, N)?,
    );
    let cfg = LaunchConfig::for_elements(N, builtins::BLOCK);
    let fill =
        |buf: &DeviceBuffer<f32>, v: f32| KernelArgs::new().write(buf).scalar(v).scalar(N as u64);
    let mut g = Graph::new(&dev);
    // A node outside the record node's scope, made first: its part comes first.
    g.add_kernel(&[], &builtins::FILL_F32, cfg, fill(&other, 0.0))?;
    let first = g.add_kernel(&[], &builtins::FILL_F32, cfg, fill(&b, 1.0))?;
    // The record node covers the first fill of b only; the second comes later, after a
    // host node that takes its time.
    g.add_event_record(&[first], &Event::new(&dev)?)?;
    let pause = g.add_host(&[first], || {
        std::thread::sleep(std::time::Duration::from_millis(30))
    })?;
    g.add_kernel(&[pause], &builtins::FILL_F32, cfg, fill(&b, 2.0))?;
    let exec = g.instantiate()?;
    let (s, t) = (Stream::new(&dev)?, Stream::new(&dev)?);
    let mut host = PinnedBuffer::<f32>::new(&dev, N)?;
    exec.launch(&s)?;
    // The device-to-host engine runs beside the compute workers.
    t.copy_d2h(host.range_mut(..)?, &b)?;
    dev.synchronize()?;
    let v = host.read()?[N - 1];
    Ok(v)
}

/// Found by `fuzz_two_devices_auto_ordering` with `FUZZ_KNOWN=8` (event record nodes placed
/// anywhere in built graphs, GR8's exact scope): a copy on another stream of what a graph
/// wrote read the bytes of an earlier node of the graph. Here the record node covers the
/// first fill of `b`; the fill after it is outside its scope, and the copy must wait for it
/// (AC5). Expected: 2.0 on every try. Seen before the fix (F11): 1.0, every time.
///
/// Cause: the launch's accesses go into the access maps part by part (`core/tracking/track_scope.rs`);
/// the part of the nodes upstream of the record node completes with the record node, the
/// others with the launch, and a write replaces the state of its bytes (access rule 2). The
/// parts were recorded in their own order, so the first fill's write, recorded last, replaced
/// the later fill's, and the copy waited for the record node only. Fixed: parts go in the
/// order the graph's own order allows (more record nodes downstream first: a node upstream
/// of another has every record node of the other downstream too).
#[test]
fn automatic_ordering_waits_for_a_graph_write_after_a_record_nodes_scope() {
    for i in 0..3 {
        let got = copy_after_a_write_outside_the_record_nodes_scope();
        assert!(
            matches!(got, Ok(v) if v == 2.0),
            "try {i}: expected 2.0, got {got:?}"
        );
    }
}

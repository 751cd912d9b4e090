//! HK3 tests: compiled entries of the host-kernel ABI run in the worker over arena memory; a
//! wild or out-of-bounds access, an `abort` or a returned fault is a sticky kernel fault naming
//! the kernel, and the program's other allocations and its heap stay intact.
//!
//! The test entries are a tiny C++ shared object built here with the machine's compiler, so
//! these tests do not depend on the CUDA-C compiler path. Without a compiler they print
//! `SKIP isolate: …` and pass.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::{arena, build, LaunchDesc, Worker, WorkerFault};
use crate::backend::contract::device::Backend;
use crate::backend::contract::kernel::{KernelInner, Launch};
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::{Op, Work};
use crate::backend::host::HostBackend;
use crate::error::Error;

const ENTRIES: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
struct cueflow_launch {
    uint32_t grid[3], block[3];
    uint32_t dyn_shared;
    uint32_t block_begin, block_end;
    char* fault_msg;
    uint32_t fault_msg_len;
};
#define ENTRY(name) extern "C" int cueflow_run_##name(const cueflow_launch* l, void** p)
ENTRY(add) {
    const float* a = *(const float**)p[0];
    const float* b = *(const float**)p[1];
    float* c = *(float**)p[2];
    uint32_t n = *(uint32_t*)p[3];
    for (uint32_t blk = l->block_begin; blk < l->block_end; blk++)
        for (uint32_t t = 0; t < l->block[0]; t++) {
            uint32_t i = blk * l->block[0] + t;
            if (i < n) c[i] = a[i] + b[i];
        }
    return 0;
}
ENTRY(oob_write) {  // runs off the end of its buffer into the guard page
    volatile float* c = *(float**)p[0];
    uint32_t n = *(uint32_t*)p[1];
    for (uint32_t i = n; i < n + 65536; i++) c[i] = 7.0f;
    return 0;
}
ENTRY(wild_write) {
    *(volatile uint64_t*)*(uint64_t*)p[0] = 0xdeadbeefdeadbeefull;
    return 0;
}
ENTRY(write_at) {
    (*(volatile float**)p[0])[*(uint32_t*)p[1]] = 1.0f;
    return 0;
}
ENTRY(abort) { abort(); }
ENTRY(assert_fail) {
    snprintf(l->fault_msg, l->fault_msg_len, "assertion `i < n` failed in block %u", l->block_begin);
    return 1;
}
ENTRY(read_for) {  // reads a buffer over and over for a while, checking its pattern
    const volatile uint32_t* a = *(const uint32_t**)p[0];
    uint32_t n = *(uint32_t*)p[1];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (uint32_t i = 0; i < n; i++)
            if (a[i] != 0x01010101u) {
                snprintf(l->fault_msg, l->fault_msg_len, "element %u changed", i);
                return 1;
            }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < *(uint32_t*)p[2] * 1000L);
    return 0;
}
static int deeper(volatile char* up) {  // unbounded recursion: a stack overflow
    volatile char frame[4096];
    frame[0] = up ? up[0] + 1 : 0;
    return deeper(frame) + frame[1];
}
ENTRY(overflow) { return deeper(0); }
ENTRY(exit) { exit(3); }
ENTRY(sleep) { usleep(*(uint32_t*)p[0]); return 0; }
ENTRY(empty) { return 0; }
"#;

/// The test shared object, built once per process; `None` (and a visible skip) without a
/// compiler or without an arena.
pub(super) fn entries() -> Option<PathBuf> {
    static SO: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = SO.get_or_init(|| {
        arena::global()
            .ok_or("no device-memory arena (CUEFLOW_HOST_ARENA=0, or no memfd on this system)")?;
        let cc = crate::backend::host::cxx::compiler()?;
        // One build per source and compiler, shared by test processes (renamed into place).
        let key = build::key(&[
            ENTRIES.as_bytes(),
            cc.program.as_os_str().as_encoded_bytes(),
        ]);
        let dir = std::env::temp_dir().join("cueflow-isolate-test");
        let so = dir.join(format!("entries-{key:032x}.so"));
        if so.is_file() {
            return Ok(so);
        }
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let tag = format!("{key:032x}-{}", std::process::id());
        let src = dir.join(format!("entries-{tag}.cpp"));
        let tmp = dir.join(format!("entries-{tag}.tmp"));
        std::fs::write(&src, ENTRIES).map_err(|e| e.to_string())?;
        let out = std::process::Command::new(&cc.program)
            .args(&cc.pre_args)
            .args(["-O1", "-shared", "-fPIC", "-o"])
            .arg(&tmp)
            .arg(&src)
            .output()
            .map_err(|e| format!("running the C++ compiler {}: {e}", cc.program.display()))?;
        let _ = std::fs::remove_file(&src);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        std::fs::rename(&tmp, &so).map_err(|e| e.to_string())?;
        Ok(so)
    });
    match r {
        Ok(p) => Some(p.clone()),
        Err(why) => {
            // Straight to stderr, past the test harness's capture: a skip must be visible.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIP isolate: {why}");
            None
        }
    }
}

fn open(id: u64) -> HostBackend {
    open_with(id, 2)
}

/// A host device with `workers` compute workers (and as many worker channels).
pub(super) fn open_with(id: u64, workers: usize) -> HostBackend {
    HostBackend::open(id, 0, workers).expect("host device")
}

pub(super) fn ptr_param(a: &Allocation) -> [u8; 8] {
    a.addr.to_ne_bytes()
}

pub(super) fn fill(a: &Allocation, byte: u8) {
    // SAFETY: a live host-backend allocation of `a.bytes` bytes that nothing else uses.
    unsafe { a.host_ptr().write_bytes(byte, a.bytes) };
}

fn bytes_of(a: &Allocation) -> &[u8] {
    // SAFETY: a live host-backend allocation; the test reads it only while no work runs.
    unsafe { std::slice::from_raw_parts(a.host_ptr(), a.bytes) }
}

/// Write `f(i)` to every f32 element of `a`.
fn write_floats(a: &Allocation, f: impl Fn(usize) -> f32) {
    let n = a.bytes / 4;
    // SAFETY: a live allocation nothing else uses; page-aligned, so aligned for f32.
    let s = unsafe { std::slice::from_raw_parts_mut(a.host_ptr() as *mut f32, n) };
    for (i, v) in s.iter_mut().enumerate() {
        *v = f(i);
    }
}

pub(super) fn floats(a: &Allocation) -> &[f32] {
    // SAFETY: as `bytes_of`; allocations are page-aligned, so aligned for f32.
    unsafe { std::slice::from_raw_parts(a.host_ptr() as *const f32, a.bytes / 4) }
}

pub(super) fn one_block(blocks: u32) -> LaunchDesc {
    LaunchDesc {
        grid: [blocks, 1, 1],
        block: [1, 1, 1],
        block_begin: 0,
        block_end: blocks,
        ..LaunchDesc::default()
    }
}

/// Run `add` over three fresh arena buffers on `dev` and check the sums.
fn check_add(dev: &HostBackend, worker: &Worker, so: &std::path::Path) {
    let n = 3000u32;
    let [a, b, c] = [0; 3].map(|_| dev.alloc_device(n as usize * 4).unwrap());
    write_floats(&a, |i| i as f32);
    write_floats(&b, |i| 2.0 * i as f32);
    let (pa, pb, pc, pn) = (ptr_param(&a), ptr_param(&b), ptr_param(&c), n.to_ne_bytes());
    let params: [&[u8]; 4] = [&pa, &pb, &pc, &pn];
    // Two block ranges from two threads, as two compute workers would run them (W3).
    std::thread::scope(|s| {
        for (lo, hi) in [(0u32, 6u32), (6, 12)] {
            let params = &params;
            s.spawn(move || {
                let l = LaunchDesc {
                    grid: [12, 1, 1],
                    block: [256, 1, 1],
                    block_begin: lo,
                    block_end: hi,
                    ..LaunchDesc::default()
                };
                worker.run(so, "cueflow_run_add", &l, params).unwrap();
            });
        }
    });
    for i in 0..n as usize {
        assert_eq!(floats(&c)[i], 3.0 * i as f32, "element {i}");
    }
}

/// HK3: a compiled entry runs in the worker over memory the program allocated (before and
/// after the worker started: W2) and its writes are visible to the program.
#[test]
fn hk3_worker_runs_entries_over_device_memory() {
    let Some(so) = entries() else { return };
    let dev = open(9001);
    let worker = dev.kernel_worker().expect("worker");
    assert_ne!(worker.pid(), std::process::id());
    assert_eq!(worker.channels(), 2, "one channel per compute worker");
    check_add(&dev, &worker, &so);
    // Memory freed and allocated again between launches is remapped in the worker.
    check_add(&dev, &worker, &so);
}

/// A launch through the host backend's scheduler whose blocks run `symbol` in the worker, as
/// the CUDA-C launch path does: a worker fault becomes a panic, which the scheduler turns into
/// the sticky `KernelFault` naming the kernel (KN2).
fn launch_via_scheduler(dev: &HostBackend, name: &str, so: PathBuf, params: Vec<Vec<u8>>) {
    let worker = dev.kernel_worker().expect("worker");
    let symbol = format!("cueflow_run_{name}");
    let f = move |ctx: &crate::types::BlockCtx, _: &crate::types::BlockArgs| {
        let p: Vec<&[u8]> = params.iter().map(Vec::as_slice).collect();
        let b = ctx.linear_block as u32;
        let l = LaunchDesc {
            block_begin: b,
            block_end: b + 1,
            ..one_block(ctx.grid_dim.x)
        };
        if let Err(fault) = worker.run(&so, &symbol, &l, &p) {
            std::panic::resume_unwind(Box::new(fault.to_string()));
        }
    };
    let launch = Launch::new(
        Arc::new(KernelInner {
            name: name.to_string(),
            host: Some(Arc::new(f)),
            cuda: None,
            loaded: Default::default(),
        }),
        [2, 1, 1],
        [1, 1, 1],
        0,
        Arc::from(Vec::new()),
    );
    dev.legacy_stream()
        .submit(Op::new(Work::Launch(launch)), &[], false)
        .expect("submit");
}

fn expect_kernel_fault(r: crate::error::Result<()>, kernel: &str, detail: &str) {
    match r {
        Err(Error::KernelFault {
            kernel: k,
            detail: d,
            ..
        }) => {
            assert_eq!(k, kernel);
            assert!(d.contains(detail), "detail `{d}` lacks `{detail}`");
            assert!(!d.contains("panicked at"), "no Rust source location: `{d}`");
        }
        other => panic!("expected a KernelFault of `{kernel}`, got {other:?}"),
    }
}

/// HK3 (with KN2, ER2): an out-of-bounds write in a compiled kernel is a sticky kernel fault
/// naming the kernel; the program's other allocations and its heap are intact, nothing hangs,
/// and a new device context gets a fresh worker that works.
#[test]
fn hk3_out_of_bounds_write_is_a_sticky_fault_and_corrupts_nothing() {
    let Some(so) = entries() else { return };
    let dev = open(9002);
    // Neighbours on both sides of the victim, and the Rust heap, with fill patterns.
    let before = dev.alloc_device(4096).unwrap();
    let victim = dev.alloc_device(1000 * 4).unwrap();
    let after = dev.alloc_device(64 << 10).unwrap();
    let pinned = dev
        .alloc_pinned(8192, Default::default())
        .expect("pinned memory");
    fill(&before, 0x11);
    fill(&after, 0x22);
    fill(&pinned, 0x33);
    let heap: Vec<u64> = (0..100_000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9))
        .collect();
    let heap_copy = heap.clone();

    let n = 1000u32.to_ne_bytes().to_vec();
    launch_via_scheduler(
        &dev,
        "oob_write",
        so.clone(),
        vec![ptr_param(&victim).to_vec(), n],
    );
    expect_kernel_fault(dev.synchronize(), "oob_write", "SIGSEGV");
    // ER2: sticky, on every later call.
    expect_kernel_fault(dev.synchronize(), "oob_write", "SIGSEGV");
    assert!(dev.alloc_device(16).is_err(), "ER2: the device is poisoned");
    let worker = dev.kernel_worker().unwrap();
    match worker.run(&so, "cueflow_run_empty", &one_block(1), &[]) {
        Err(WorkerFault::Crashed { culprits, .. }) => {
            assert_eq!(culprits, ["cueflow_run_oob_write"])
        }
        other => panic!("W5: a dead worker stays dead, got {other:?}"),
    }

    assert!(
        bytes_of(&before).iter().all(|&b| b == 0x11),
        "allocation before"
    );
    assert!(
        bytes_of(&after).iter().all(|&b| b == 0x22),
        "allocation after"
    );
    assert!(
        bytes_of(&pinned).iter().all(|&b| b == 0x33),
        "pinned allocation"
    );
    assert_eq!(heap, heap_copy, "the Rust heap");
    // The program goes on: a new device context, a fresh worker.
    let fresh = open(9003);
    let w2 = fresh.kernel_worker().expect("a fresh worker");
    assert_ne!(w2.pid(), worker.pid());
    check_add(&fresh, &w2, &so);
}

/// HK3, A2: device memory ends against its guard page, so an overrun just past the size
/// rounded up to 256 bytes faults; within that rounding it does not (as on a GPU).
#[test]
fn hk3_a_small_overrun_of_device_memory_faults() {
    let Some(so) = entries() else { return };
    let dev = open(9018);
    let buf = dev.alloc_device(1000 * 4).unwrap();
    assert_eq!(buf.addr % 256, 0, "CUDA's alignment");
    let w = dev.kernel_worker().unwrap();
    let at = |i: u32| {
        w.run(
            &so,
            "cueflow_run_write_at",
            &one_block(1),
            &[&ptr_param(&buf), &i.to_ne_bytes()],
        )
    };
    at(999).expect("the last element");
    at(1023).expect("within the 256-byte rounding");
    match at(1024) {
        Err(WorkerFault::Crashed {
            this_call: true,
            detail,
            ..
        }) => assert!(detail.contains("SIGSEGV"), "{detail}"),
        other => panic!("one element past the rounded size: {other:?}"),
    }
}

/// HK3: a wild write (to the program's heap address, or to unallocated arena space) reaches
/// only the worker: the heap is intact and, where the address is unmapped there, the launch
/// faults naming the kernel.
#[test]
fn hk3_wild_writes_reach_only_the_worker() {
    let Some(so) = entries() else { return };
    let dev = open(9004);
    let w = dev.kernel_worker().unwrap();
    let target = Box::new([0x5555_5555_5555_5555u64; 512]);
    let addr = (target.as_ptr() as u64 + 2048).to_ne_bytes();
    // The heap address may or may not be mapped in the worker: either way the program's copy
    // stays as it was.
    let r = w.run(&so, "cueflow_run_wild_write", &one_block(1), &[&addr]);
    assert!(
        r.is_ok()
            || matches!(
                r,
                Err(WorkerFault::Crashed {
                    this_call: true,
                    ..
                })
            ),
        "{r:?}"
    );
    assert!(target.iter().all(|&v| v == 0x5555_5555_5555_5555));

    // Unallocated space in the arena is never mapped: a sure fault.
    let dev = open(9005);
    let w = dev.kernel_worker().unwrap();
    let a = arena::global().unwrap();
    let hole = (a.base() + a.cap() - arena::PAGE) as u64;
    match w.run(
        &so,
        "cueflow_run_wild_write",
        &one_block(1),
        &[&hole.to_ne_bytes()],
    ) {
        Err(WorkerFault::Crashed {
            culprits,
            this_call: true,
            detail,
        }) => {
            assert_eq!(culprits, ["cueflow_run_wild_write"]);
            assert!(detail.contains(&format!("{hole:#x}")), "{detail}");
        }
        other => panic!("expected a crash, got {other:?}"),
    }
}

/// HK3: `abort` (a failed C `assert`) kills only the worker; a fault the entry returns (the
/// prelude's `assert`, a trap) comes back with its message and leaves the worker running.
#[test]
fn hk3_abort_and_returned_faults() {
    let Some(so) = entries() else { return };
    let dev = open(9006);
    let w = dev.kernel_worker().unwrap();
    match w.run(&so, "cueflow_run_assert_fail", &one_block(3), &[]) {
        Err(WorkerFault::Kernel { symbol, message }) => {
            assert_eq!(symbol, "cueflow_run_assert_fail");
            assert_eq!(message, "assertion `i < n` failed in block 0");
        }
        other => panic!("{other:?}"),
    }
    check_add(&dev, &w, &so);
    match w.run(&so, "cueflow_run_abort", &one_block(1), &[]) {
        Err(
            f @ WorkerFault::Crashed {
                this_call: true, ..
            },
        ) => {
            assert!(f.to_string().contains("SIGABRT"), "{f}")
        }
        other => panic!("{other:?}"),
    }
    match w.run(&so, "cueflow_run_missing", &one_block(1), &[]) {
        Err(WorkerFault::Crashed { .. }) => {}
        other => panic!("W5: {other:?}"),
    }
    // A missing entry in a live worker is reported, not a crash.
    let dev = open(9007);
    let w = dev.kernel_worker().unwrap();
    assert!(matches!(
        w.run(&so, "cueflow_run_missing", &one_block(1), &[]),
        Err(WorkerFault::Unavailable(m)) if m.contains("cueflow_run_missing")
    ));
}

/// HK3: a stack overflow in a kernel is reported (the worker's handler runs on its own
/// stack), and a kernel that ends the worker without a signal (`exit`) is a fault naming the
/// kernels that were running (W4).
#[test]
fn hk3_stack_overflow_and_exit_are_faults() {
    let Some(so) = entries() else { return };
    let dev = open(9016);
    let w = dev.kernel_worker().unwrap();
    match w.run(&so, "cueflow_run_overflow", &one_block(1), &[]) {
        Err(WorkerFault::Crashed {
            this_call: true,
            culprits,
            detail,
        }) => {
            assert_eq!(culprits, ["cueflow_run_overflow"]);
            assert!(detail.contains("SIGSEGV"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let dev = open(9017);
    let w = dev.kernel_worker().unwrap();
    match w.run(&so, "cueflow_run_exit", &one_block(1), &[]) {
        Err(
            f @ WorkerFault::Crashed {
                this_call: true, ..
            },
        ) => assert!(f.to_string().contains("exited with status 3"), "{f}"),
        other => panic!("{other:?}"),
    }
}

/// HK3, RL5: a crash wakes every caller waiting on the worker at once (no hang), and each
/// names the entry that crashed, not its own.
#[test]
fn hk3_a_crash_wakes_every_waiter_and_names_the_culprit() {
    let Some(so) = entries() else { return };
    let dev = open_with(9008, 3);
    let w = dev.kernel_worker().unwrap();
    let t = Instant::now();
    let ten_s = 10_000_000u32.to_ne_bytes();
    std::thread::scope(|s| {
        let sleepers: Vec<_> = (0..2)
            .map(|_| s.spawn(|| w.run(&so, "cueflow_run_sleep", &one_block(1), &[&ten_s])))
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let r = w.run(&so, "cueflow_run_abort", &one_block(1), &[]);
        assert!(
            matches!(
                r,
                Err(WorkerFault::Crashed {
                    this_call: true,
                    ..
                })
            ),
            "{r:?}"
        );
        for h in sleepers {
            match h.join().unwrap() {
                Err(
                    f @ WorkerFault::Crashed {
                        this_call: false, ..
                    },
                ) => {
                    assert!(!f.is_own());
                    assert!(
                        f.to_string().contains("while running cueflow_run_abort"),
                        "{f}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    });
    assert!(t.elapsed() < Duration::from_secs(5), "waiters were woken");
}

/// HK3, A5: a compiled kernel of one device cannot reach another device's memory (it faults,
/// and the other device's bytes stay as they were) until peer access is enabled (MD3), which
/// maps it into a worker that is already running.
#[test]
fn hk3_another_devices_memory_is_out_of_reach_until_peer_access() {
    let Some(so) = entries() else { return };
    let (a, b) = (open(9011), open(9012));
    let theirs = b.alloc_device(4096).unwrap();
    fill(&theirs, 0x44);
    let w = a.kernel_worker().unwrap();
    let addr = theirs.addr.to_ne_bytes();
    match w.run(&so, "cueflow_run_wild_write", &one_block(1), &[&addr]) {
        Err(WorkerFault::Crashed {
            this_call: true, ..
        }) => {}
        other => panic!("expected a fault on another device's memory, got {other:?}"),
    }
    assert!(bytes_of(&theirs).iter().all(|&v| v == 0x44));

    let (c, d) = (open(9013), open(9014));
    let wc = c.kernel_worker().unwrap();
    wc.run(&so, "cueflow_run_empty", &one_block(1), &[])
        .unwrap();
    assert!(c.enable_peer(&d).unwrap());
    // Device d's buffers, summed by a kernel of device c.
    check_add(&d, &wc, &so);
}

/// A4: while one launch runs over a buffer, another synchronises a resynchronisation of the
/// worker's mapping (more changes queued than a mirror keeps): the running kernel never sees its
/// buffer unmapped or changed.
#[test]
fn hk3_remapping_never_disturbs_a_running_kernel() {
    let Some(so) = entries() else { return };
    let dev = open_with(9010, 2);
    let w = dev.kernel_worker().unwrap();
    let buf = dev.alloc_device(1 << 16).unwrap();
    fill(&buf, 0x01);
    let (pb, pn, us) = (
        ptr_param(&buf),
        ((1u32 << 16) / 4).to_ne_bytes(),
        400_000u32.to_ne_bytes(),
    );
    std::thread::scope(|s| {
        let reader =
            s.spawn(|| w.run(&so, "cueflow_run_read_for", &one_block(1), &[&pb, &pn, &us]));
        std::thread::sleep(Duration::from_millis(50));
        for round in 0..3 {
            for _ in 0..arena::MIRROR_LIMIT + 10 {
                drop(dev.alloc_device(8192).unwrap());
            }
            w.run(&so, "cueflow_run_empty", &one_block(1), &[])
                .unwrap_or_else(|f| panic!("round {round}: {f}"));
        }
        reader
            .join()
            .unwrap()
            .expect("the running kernel was not disturbed");
    });
}

/// RL2: a device's worker process ends with the device (reaped: no zombie, no leaked process),
/// also when the device is dropped with launches still to run.
#[test]
fn the_worker_ends_with_its_device() {
    let Some(so) = entries() else { return };
    for _ in 0..3 {
        let dev = open(9015);
        let w = dev.kernel_worker().unwrap();
        w.run(&so, "cueflow_run_empty", &one_block(1), &[]).unwrap();
        let pid = w.pid() as libc::pid_t;
        drop(w);
        drop(dev);
        // SAFETY: signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "worker {pid} outlived its device");
    }
}

/// Launch round trip through the worker (prints; not a timed assertion): an empty entry,
/// and an empty entry after an allocation (one mapping update first, W2).
#[test]
fn launch_round_trip_cost() {
    let Some(so) = entries() else { return };
    let dev = open(9009);
    let t = Instant::now();
    let w = dev.kernel_worker().unwrap();
    let start = t.elapsed();
    let l = one_block(1);
    w.run(&so, "cueflow_run_empty", &l, &[]).unwrap();
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        w.run(&so, "cueflow_run_empty", &l, &[&[0u8; 24]]).unwrap();
    }
    let plain = t.elapsed() / n;
    let t = Instant::now();
    for _ in 0..n / 4 {
        let a = dev.alloc_device(4096).unwrap();
        w.run(&so, "cueflow_run_empty", &l, &[&ptr_param(&a)])
            .unwrap();
    }
    let with_map = t.elapsed() / (n / 4);
    println!(
        "isolate: worker start {start:?} (spawn and handshake; plus the build when not cached); launch round trip {plain:?} per launch; \
         with an allocation and a mapping update before it {with_map:?}"
    );
}

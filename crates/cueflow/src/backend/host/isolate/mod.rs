//! Compiled kernels in a worker process: faults, not corruption (SPEC HK3).
//!
//! A CUDA C kernel compiled for the CPU is native code: an out-of-bounds index, a wild pointer
//! or an `abort` inside it would, run on a thread of the program, overwrite the Rust heap or
//! kill the program. On a GPU the same bug is an illegal-address fault that poisons the device
//! and leaves the host program running (KN2, ER2). This module gives the host backend the
//! GPU's behaviour: compiled kernels run in a separate **worker process** that shares only the
//! device's memory with the program.
//!
//! # Design
//!
//! * **A (arena, [`arena`]).** Host-backend device and pinned memory come from one `memfd`
//!   mapped at the same virtual address in the program and in every worker, so the pointers a
//!   kernel gets in its parameters are valid on both sides and need no translation. Each block
//!   is followed by an unmapped guard page, so running off the end of a buffer faults, and a
//!   worker maps only the blocks its device may reach. Rust closures keep running in the
//!   program on the same memory, exactly as before; the only change to allocation is where the
//!   pages come from (`memory.rs`: `block_alloc`, `block_free`). Rules A1–A5 are in [`arena`].
//! * **W1 A helper executable.** The worker is a small C++ program (`worker.cpp`) compiled at
//!   run time with the machine's C++ compiler (the compiler the CUDA-C path needs anyway) and
//!   cached by source and compiler ([`build`]). Alternatives rejected: re-executing the
//!   program's own binary with a special argument runs the program's `main` or the test
//!   harness, which a library cannot rely on; a `fork()` of the multithreaded program may only
//!   call async-signal-safe functions in the child (no `dlopen`, no allocation, no threads), so
//!   it could not load kernels; a prebuilt binary would need a build script and ship per target.
//! * **W2 Mapping first.** Before a launch the worker applies the arena's queued changes over
//!   its control socket (one round trip, only when memory was allocated or freed since the last
//!   launch: a launch that finds the mirror's change count where the worker last applied it
//!   takes no lock), so every block allocated before the launch is mapped there.
//! * **W3 Parallel channels.** The worker has one thread and one launch slot ("channel") per
//!   compute worker of the device, the slots in a shared memfd (`ring.rs`, rules R1–R5).
//!   [`Worker::call`] takes a free channel, writes the launch (entry, shared object, shape,
//!   block range, the parameter bytes, read-only ranges) into its slot and waits for the reply
//!   there. The host scheduler already splits a launch's blocks over its compute workers, and
//!   each calls for its range, so blocks run in parallel in the worker. The doorbell is the
//!   slot's state word: both sides poll it briefly (the caller 50 µs, a worker thread 200 µs
//!   after each launch, yielding the core between checks, as the host scheduler's engines do)
//!   and then sleep on it as a futex shared by the two processes, so back-to-back launches
//!   cross with no system call. A caller that sleeps wakes at least every 10 ms to see whether
//!   the process still runs, so no waiter hangs on a worker that died without a word. (Until
//!   issue 30 this was a socket pair per channel: about 14 system calls per launch,
//!   `examples/host_launch_cost.rs` has the measurements.) A request may carry several
//!   launches (R5, [`Worker::call_batch`]): the compute worker that claims a one-part launch
//!   sends the launches queued behind it in its stream with it (`sched/chain.rs`), and the
//!   worker thread runs them in order, so one hand-over between the processes serves them
//!   all. A launch with a time limit (W6), traced or checked by the sanitizer goes alone.
//! * **W4 Crash reports.** The worker handles `SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL`, `SIGABRT`,
//!   `SIGTRAP` and `SIGSYS` on an alternate stack: with async-signal-safe calls only it writes
//!   one report (signal, faulting address, the channel whose thread took it) into every slot
//!   whose launch has not replied (R1), wakes their callers, and dies of the signal. Each
//!   waiting caller reads the report, so the crashing call gets [`WorkerFault::Crashed`] naming
//!   its own entry and concurrent calls get the same fault naming the culprit (RL5); a write
//!   to pages a running launch holds read-only (W7) is named by argument. A worker that ends
//!   without a report (killed, `exit`) is found by the callers' checks; the fault then names
//!   every entry that was running.
//! * **W5 Sticky.** A dead worker stays dead: every later [`Worker::run`] returns the fault at
//!   once. The caller (the CUDA-C launch path) turns a fault into the device's sticky
//!   `KernelFault` naming the kernel, as a panicking closure does today (a panic caught by the
//!   scheduler). A new device context opens a fresh worker ([`HostBackend::kernel_worker`](super::HostBackend::kernel_worker)).
//! * **W7 Read-only arguments (SPEC AC7).** A launch request carries the page ranges of the
//!   arguments it declares read (`KernelArgs::read`); the worker thread maps them read-only
//!   for the time the entry runs, so a write through such an argument is a fault (W4) that
//!   the report names by argument. Ranges are whole pages inside the argument's bytes — or
//!   inside its allocation's padding, which nothing uses, where the argument starts or ends
//!   its allocation (A2: every allocation is its own block) — less every page that a written
//!   or atomic argument of the same launch touches (KC4 allows `in` and `out` over one
//!   buffer). Sound with launches running beside it: a page held read-only lies inside bytes
//!   this launch reads, and any other access that writes them conflicts with it, which the
//!   host backend never runs at the same time (AC6) — only an undeclared write can meet the
//!   protection, and that is the fault to report. The worker counts holders per page (the
//!   blocks of one launch run as several requests at once; two launches may read one
//!   buffer), protecting a run of pages when its count leaves zero. When the count returns to
//!   zero the run is unprotected at once if another launch is running, and otherwise when the
//!   next launch arrives — unless that launch holds it too, so a stream of launches reading
//!   one buffer pays two `mprotect` calls, not two per launch (a launch never runs with pages
//!   read-only that neither it nor a running launch holds). What a resynchronisation remapped
//!   is protected again, and freed blocks drop their record (A4). An argument smaller than a
//!   page within a larger allocation is not covered, nor are launches that run in the
//!   program's own process.
//! * **W6 Time limit (SPEC HK4).** With a limit set (`Device::set_kernel_timeout`,
//!   `CUEFLOW_KERNEL_TIMEOUT_MS`), a caller waits for its reply at most that long. Past it, the
//!   launch's fault is recorded first ("ran longer than …", naming its kernel), then the
//!   worker process is killed and every other waiter woken: each finds that fault (RL5), the device is poisoned (W5), and the program, its other devices and their
//!   workers go on. The limit applies to each range of blocks a compute worker hands the
//!   worker (a launch's blocks run as several such ranges, in parallel).
//!
//! # Using it
//!
//! The CUDA-C launch path compiles a kernel to a shared object whose entry has the C ABI
//! `extern "C" int cueflow_run_<entry>(const cueflow_launch* l, void** params)` (blocks
//! `l->block_begin..l->block_end` of the linear grid; nonzero with a message in `l->fault_msg`
//! on a fault), then for each range of blocks a compute worker runs:
//!
//! ```ignore
//! let worker = host_backend.kernel_worker()?; // this device's worker, started on first use
//! let desc = LaunchDesc { grid, block, dyn_shared, block_begin, block_end };
//! if let Err(fault) = worker.run(&so_path, "cueflow_run_add", &desc, &[&a_ptr, &n_bytes]) {
//!     // The scheduler makes a panic the sticky KernelFault naming the kernel (KN2, ER2);
//!     // `resume_unwind` leaves the panic's source location out of the message.
//!     std::panic::resume_unwind(Box::new(fault.to_string()));
//! }
//! ```
//!
//! A fault with `is_own() == false` came from another launch that crashed the shared worker;
//! its message names the culprit entries, and the error should name them rather than this
//! call's kernel (RL5).
//!
//! `params[i]` are the parameter bytes as `cuLaunchKernel` takes them (device pointers are
//! arena addresses, the same in both processes); they are copied into the request.
//!
//! # What it protects and what it does not
//!
//! A kernel can reach only the arena, and of it only the blocks of its own device, of the
//! devices it was given peer access to (`enable_peer_access`), and pinned, mapped and managed
//! host memory, which every device reaches (A5 in [`arena`]) — the reach of a GPU kernel.
//! Everything else of the program — its heap, stacks, other devices' memory — is not mapped in
//! the worker: a wild write either faults or lands in the worker's own memory. Not caught: an access within the
//! last page of a block past its end (blocks are page-granular, as a GPU's allocation
//! granularity hides small overruns), an access to another live block, and — without a time
//! limit (W6) — a kernel that never returns (as on a GPU, the device hangs). Memory registered from the program's own pages
//! (`cudaHostRegister`) lives outside the arena and is not reachable by the worker: a launch
//! with such an argument runs in the program's process instead (`cuda_c/launch.rs` says why).
//! Each block is its own mapping, so the live blocks of a process are bounded by the system's
//! map count (`vm.max_map_count`, 65530 by default: about 32,000 live blocks; the stream-ordered
//! pool's idle blocks count too); past it allocation fails with an out-of-memory error.
//! Without a `memfd` (or with `CUEFLOW_HOST_ARENA=0`) memory comes from the heap and no worker
//! can be started.

pub(crate) mod arena;
pub(crate) mod build;
mod fault;
mod request;
mod ring;
pub(crate) mod worker;

#[cfg(test)]
mod read_only_tests;
#[cfg(test)]
mod tests;

pub(crate) use fault::WorkerFault;
pub(crate) use request::record_bytes;
pub(crate) use ring::REQ_CAP as REQUEST_CAP;
pub(crate) use worker::{Call, LaunchDesc, ReadOnly, Worker};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

/// One device's kernel worker, started on first use (W5: one per device context), shared by
/// the device ([`HostBackend::kernel_worker`](super::HostBackend::kernel_worker)) and its
/// engine threads (the CUDA-C launch path finds it there).
pub(crate) struct WorkerSlot {
    device: u64,
    channels: usize,
    /// Devices whose memory this device's compiled kernels may reach (peer access, A5).
    pub(crate) peers: Arc<Mutex<Vec<u64>>>,
    /// The kernel time limit in nanoseconds, 0 for none (W6).
    limit_ns: AtomicU64,
    cell: OnceLock<Result<Arc<Worker>, WorkerFault>>,
}

impl WorkerSlot {
    /// The slot of device `device` whose launches run on `channels` compute workers.
    pub(crate) fn new(device: u64, channels: usize) -> WorkerSlot {
        let slot = WorkerSlot {
            device,
            channels,
            peers: Arc::new(Mutex::new(Vec::new())),
            limit_ns: AtomicU64::new(0),
            cell: OnceLock::new(),
        };
        slot.set_limit(crate::config::kernel_timeout());
        slot
    }

    /// Stop a launch of a compiled kernel that runs longer than `limit` (W6); `None`: no limit.
    pub(crate) fn set_limit(&self, limit: Option<Duration>) {
        let ns = limit.map_or(0, |d| d.as_nanos().clamp(1, u64::MAX as u128) as u64);
        self.limit_ns.store(ns, Ordering::Relaxed);
    }

    /// The kernel time limit (W6).
    pub(crate) fn limit(&self) -> Option<Duration> {
        match self.limit_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// The worker, started the first time (and the same answer, a worker or why none could
    /// start, every later time).
    pub(crate) fn get(&self) -> Result<Arc<Worker>, WorkerFault> {
        self.cell
            .get_or_init(|| {
                // The worker reads the list itself: a peer added while it starts is seen at
                // its first launch (its first synchronisation maps everything, A4).
                Worker::spawn(self.channels, self.device, self.peers.clone()).map(Arc::new)
            })
            .clone()
    }

    /// The worker if it has started and runs (no start here).
    pub(crate) fn started(&self) -> Option<Arc<Worker>> {
        self.cell.get()?.as_ref().ok().cloned()
    }

    /// Let the compiled kernels reach device `peer`'s memory from their next launch (A5).
    pub(crate) fn allow_peer(&self, peer: u64) {
        let mut peers = self.peers.lock();
        if !peers.contains(&peer) {
            peers.push(peer);
        }
        drop(peers);
        if let Some(Ok(w)) = self.cell.get() {
            w.peers_changed();
        }
    }
}

//! The kernel worker process of one host device (W1–W7 in [`super`]).

use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::arena::{self, Arena, Mirror};
use super::build;
use super::fault::WorkerFault;
use super::request;
use super::ring::{self, Ring};

/// Status words of the worker's replies (mirrors `worker.cpp`).
const ST_OK: u32 = 0;
const ST_FAULT: u32 = 1;
const ST_CRASH: u32 = 2;

/// The shape of one launch as the C entry sees it (`struct cueflow_launch` without the fault
/// buffer, which the worker supplies): blocks `block_begin..block_end` of the linear grid run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LaunchDesc {
    /// Grid size in blocks.
    pub grid: [u32; 3],
    /// Block size in threads.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub dyn_shared: u32,
    /// First linear block to run.
    pub block_begin: u32,
    /// One past the last linear block to run.
    pub block_end: u32,
}

/// A page range of a launch's argument that the worker maps read-only while the launch runs
/// (W7): the argument is declared read (`KernelArgs::read`), so a write through it faults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadOnly {
    /// Whole pages of the arena, inside the argument's bytes (or its allocation's padding).
    pub range: std::ops::Range<usize>,
    /// The argument's index.
    pub arg: usize,
}

/// One launch request (W3): blocks `launch.block_begin..launch.block_end` of entry `symbol`
/// (the C ABI `int symbol(const cueflow_launch*, void** params)`) in the shared object
/// `so_path`, with `params[i]` the bytes of parameter `i` (copied; device pointers among them
/// are arena addresses).
pub(crate) struct Call<'a> {
    /// The shared object.
    pub so_path: &'a Path,
    /// The entry's symbol.
    pub symbol: &'a str,
    /// What a fault names for this launch (the kernel's name, W4, RL5).
    pub name: &'a str,
    /// The blocks and their shape.
    pub launch: LaunchDesc,
    /// The parameters' bytes.
    pub params: &'a [&'a [u8]],
    /// Pages to map read-only while it runs (W7).
    pub read_only: &'a [ReadOnly],
    /// How long it may take (W6).
    pub limit: Option<std::time::Duration>,
}

/// Requests sent to kernel workers in this process, and the launches they carried (R5;
/// counted for the tests).
#[cfg(test)]
static REQUESTS: AtomicU64 = AtomicU64::new(0);
#[cfg(test)]
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// How many requests this process sent to kernel workers so far, and how many launches they
/// carried (R5: a request carries a stream's queued launches together).
#[cfg(test)]
pub(crate) fn sent() -> (u64, u64) {
    (
        REQUESTS.load(Ordering::Relaxed),
        LAUNCHES.load(Ordering::Relaxed),
    )
}

/// One launch of a request: what a crash report names (W4, W7).
#[derive(Clone, Default)]
struct Running {
    name: String,
    read_only: Vec<ReadOnly>,
}

/// What the worker runs on a channel: the launches of its request, in order (R5).
#[derive(Clone, Default)]
struct InFlight {
    launches: Vec<Running>,
    /// Running now (the record stays, for its buffers).
    busy: bool,
}

/// A worker process that runs compiled kernels over the arena (W1).
pub(crate) struct Worker {
    arena: &'static Arena,
    mirror: Arc<Mirror>,
    child: Mutex<Child>,
    /// Control socket (W2); its lock also orders mapping updates before launches.
    ctl: Mutex<UnixStream>,
    /// One launch slot per channel (W3, `ring.rs`).
    ring: Ring,
    channels: usize,
    /// Channels not in use (W3).
    free: Mutex<Vec<usize>>,
    freed: Condvar,
    /// The launch running on each channel (W4 names the culprit, W7 the argument).
    in_flight: Vec<Mutex<Option<InFlight>>>,
    /// Set once the process died (W5).
    dead: Mutex<Option<WorkerFault>>,
    /// The mirror's generation the worker has applied (A4: a launch syncs only when it grew).
    applied: AtomicU64,
}

fn io_err(what: &str, e: std::io::Error) -> WorkerFault {
    WorkerFault::Unavailable(format!("{what}: {e}"))
}

/// Read one reply header and its payload from the control socket.
fn read_reply(s: &mut UnixStream) -> std::io::Result<(u32, Vec<u8>)> {
    poll_briefly(s);
    let mut h = [0u8; 8];
    s.read_exact(&mut h)?;
    let status = u32::from_ne_bytes(h[..4].try_into().expect("4 bytes"));
    let len = u32::from_ne_bytes(h[4..].try_into().expect("4 bytes")) as usize;
    let mut msg = vec![0u8; len];
    s.read_exact(&mut msg)?;
    Ok((status, msg))
}

/// How long a caller polls for a reply (a launch's in its slot, a mapping update's on the
/// control socket) before it sleeps (short launches skip the wake-up; the host scheduler's
/// engines poll the same way).
const POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// Poll `s` for readable data (or its end) for up to [`POLL`], yielding between checks.
fn poll_briefly(s: &UnixStream) {
    let t = std::time::Instant::now();
    let mut c = 0u8;
    loop {
        // SAFETY: a one-byte buffer we own; MSG_PEEK leaves the data in the socket.
        let n = unsafe {
            libc::recv(
                s.as_raw_fd(),
                &mut c as *mut u8 as *mut libc::c_void,
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 || t.elapsed() > POLL {
            return;
        }
        let e = std::io::Error::last_os_error().kind();
        if e != std::io::ErrorKind::WouldBlock && e != std::io::ErrorKind::Interrupted {
            return;
        }
        std::thread::yield_now();
    }
}

/// A fault message the kernel returned (the prelude caught the signal, so the worker lives
/// on), with the argument named when an address in it lies in pages the call held read-only
/// (W7): the prelude words an access fault as `illegal address: access to 0x…`.
fn explain_read_only(message: String, c: &Call<'_>) -> String {
    let hit = message.split("0x").skip(1).find_map(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
        let addr = usize::from_str_radix(&digits, 16).ok()?;
        c.read_only.iter().find(|r| r.range.contains(&addr))
    });
    match hit {
        Some(r) => format!(
            "{message}: a write through argument {}, which the launch declares read-only \
             (KernelArgs::read, AC7); declare it with write() if the kernel writes it",
            r.arg
        ),
        None => message,
    }
}

/// Write all of `buf` to `s` with `MSG_NOSIGNAL`: a dead worker is an error here, never a
/// `SIGPIPE` that would kill a program which did not ignore it.
fn send_all(s: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` bytes; the descriptor is our open socket.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Clear `FD_CLOEXEC` on `fd` (runs between fork and exec: async-signal-safe calls only).
fn inherit(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor this process owns; both calls are async-signal-safe.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Worker {
    /// Start a worker for device `device` with `channels` launch threads (one per compute
    /// worker of the device), mapping the memory of `device` and of `peers` (A5).
    pub(crate) fn spawn(
        channels: usize,
        device: u64,
        peers: Arc<Mutex<Vec<u64>>>,
    ) -> Result<Worker, WorkerFault> {
        let arena = arena::global().ok_or_else(|| {
            WorkerFault::Unavailable("no shared device-memory arena on this system".into())
        })?;
        let bin = build::worker_binary().map_err(WorkerFault::Unavailable)?;
        let (ctl, ctl_child) = UnixStream::pair().map_err(|e| io_err("socketpair", e))?;
        let channels = channels.max(1);
        let ring = Ring::new(channels).map_err(|e| io_err("the launch slots' memfd", e))?;
        let keep: Vec<RawFd> = vec![arena.fd(), ctl_child.as_raw_fd(), ring.fd()];
        let mut cmd = Command::new(&bin);
        cmd.arg(arena.fd().to_string())
            .arg(format!("{:x}", arena.base()))
            .arg(format!("{:x}", arena.cap()))
            .arg(ctl_child.as_raw_fd().to_string())
            .arg(ring.fd().to_string())
            .arg(channels.to_string())
            .stdin(Stdio::null());
        let inherited = keep.clone();
        // SAFETY: the closure runs in the forked child before exec and calls only fcntl
        // (async-signal-safe); it allocates nothing (the vector was built before the fork).
        unsafe {
            cmd.pre_exec(move || inherited.iter().try_for_each(|&fd| inherit(fd)));
        }
        let child = cmd
            .spawn()
            .map_err(|e| io_err(&format!("starting {}", bin.display()), e))?;
        // The child holds its end now; ours must close so its death reads as end of file.
        drop(ctl_child);
        let mut ctl = ctl;
        let worker = Worker {
            arena,
            mirror: arena.mirror(device, peers),
            child: Mutex::new(child),
            ctl: Mutex::new(ctl.try_clone().map_err(|e| io_err("dup", e))?),
            in_flight: (0..channels).map(|_| Mutex::new(None)).collect(),
            free: Mutex::new((0..channels).rev().collect()),
            ring,
            channels,
            freed: Condvar::new(),
            dead: Mutex::new(None),
            applied: AtomicU64::new(0),
        };
        match read_reply(&mut ctl) {
            Ok((ST_OK, _)) => Ok(worker),
            Ok((_, msg)) => Err(WorkerFault::Unavailable(
                String::from_utf8_lossy(&msg).into_owned(),
            )),
            Err(e) => Err(io_err("the kernel worker did not start", e)),
        }
    }

    /// The device's peer list grew (peer access, A5): the next launch maps what it adds.
    pub(crate) fn peers_changed(&self) {
        self.arena.resync(&self.mirror);
    }

    /// The operating system's id of the worker process.
    #[cfg_attr(not(test), allow(dead_code))] // tests
    pub(crate) fn pid(&self) -> u32 {
        self.child.lock().id()
    }

    /// Launches that can run at once (one worker thread each, W3): split a launch's blocks
    /// into at least this many ranges to use them all.
    #[cfg_attr(not(test), allow(dead_code))] // tests
    pub(crate) fn channels(&self) -> usize {
        self.channels
    }

    /// The fault that ended the worker, if it died (W5).
    pub(crate) fn dead(&self) -> Option<WorkerFault> {
        self.dead.lock().as_ref().map(WorkerFault::for_later)
    }

    /// Record the worker's death (the first report wins) and return what this call sees: the
    /// first report's culprits (a later reader may find the culprit's channel already idle),
    /// with this call's own `this_call`.
    fn died(&self, fault: WorkerFault) -> WorkerFault {
        let mut d = self.dead.lock();
        match &*d {
            None => {
                *d = Some(fault.clone());
                fault
            }
            Some(WorkerFault::Crashed {
                culprits, detail, ..
            }) => WorkerFault::Crashed {
                culprits: culprits.clone(),
                this_call: matches!(
                    fault,
                    WorkerFault::Crashed {
                        this_call: true,
                        ..
                    }
                ),
                detail: detail.clone(),
            },
            Some(first) => first.clone(),
        }
    }

    /// Apply the arena's pending mapping changes in the worker (A4, W2).
    fn sync(&self) -> Result<(), WorkerFault> {
        if self.applied.load(Ordering::Acquire) == self.mirror.generation() {
            return Ok(());
        }
        let mut ctl = self.ctl.lock();
        // Read before the take: every change it counts is in what the take returns.
        let generation = self.mirror.generation();
        let changes = self.arena.take(&self.mirror);
        if changes.is_empty() {
            self.applied.store(generation, Ordering::Release);
            return Ok(());
        }
        let mut msg = Vec::with_capacity(8 + changes.len() * 24);
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&(changes.len() as u32).to_ne_bytes());
        for c in &changes {
            msg.extend_from_slice(&c.offset.to_ne_bytes());
            msg.extend_from_slice(&c.len.to_ne_bytes());
            msg.extend_from_slice(&(c.map as u32).to_ne_bytes());
            msg.extend_from_slice(&0u32.to_ne_bytes());
        }
        let r = send_all(&ctl, &msg).and_then(|_| read_reply(&mut ctl));
        match r {
            Ok((ST_OK, _)) => {
                // Applied: later launches skip the lock until something new is queued.
                self.applied.store(generation, Ordering::Release);
                Ok(())
            }
            Ok((ST_CRASH, m)) => Err(self.crash_report(&m, None)),
            Ok((_, m)) => Err(self.died(WorkerFault::Crashed {
                culprits: Vec::new(),
                this_call: false,
                detail: String::from_utf8_lossy(&m).into_owned(),
            })),
            Err(_) => Err(self.lost(None)),
        }
    }

    /// The launch each channel runs now, if busy: the record its request's `progress` word
    /// points at (R5).
    fn running(&self) -> Vec<Option<Running>> {
        self.in_flight
            .iter()
            .enumerate()
            .map(|(ch, f)| {
                let f = f.lock();
                let f = f.as_ref().filter(|f| f.busy)?;
                let at = self.ring.progress(ch, f.launches.len());
                f.launches.get(at).cloned()
            })
            .collect()
    }

    /// A crash report (W4): the channel whose thread took the signal, the faulting address,
    /// then what happened. The culprit is the launch running on that channel; `ch` is the
    /// caller's own channel. A write to pages a running launch holds read-only (W7) says
    /// which argument declared them so.
    fn crash_report(&self, m: &[u8], ch: Option<usize>) -> WorkerFault {
        let word = |r: std::ops::Range<usize>| m.get(r).map(|b| b.to_vec());
        let at = word(0..4).map_or(-1, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
        let addr = word(4..12).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
        let mut detail = String::from_utf8_lossy(m.get(12..).unwrap_or_default()).into_owned();
        let at = usize::try_from(at).ok();
        let flights = self.running();
        let culprit = at.and_then(|i| flights.get(i).cloned().flatten());
        let holder = |f: &Running| {
            f.read_only
                .iter()
                .find(|r| r.range.contains(&(addr as usize)))
                .map(|r| r.arg)
        };
        if let Some((c, arg)) = culprit.as_ref().and_then(|c| Some((c, holder(c)?))) {
            detail = format!(
                "{detail}: a write through argument {arg} of `{}`, which the launch declares \
                 read-only (KernelArgs::read, AC7); declare it with write() if the kernel \
                 writes it",
                c.name
            );
        } else if let Some((other, arg)) = flights
            .iter()
            .flatten()
            .find_map(|f| Some((f.name.clone(), holder(f)?)))
        {
            detail = format!(
                "{detail}: a write to bytes that `{other}` (argument {arg}), running at the \
                 same time, declares read-only (AC7): the kernel wrote memory it was not given \
                 to write"
            );
        }
        self.died(WorkerFault::Crashed {
            this_call: at.is_some() && at == ch,
            culprits: culprit.map(|c| c.name).into_iter().collect(),
            detail,
        })
    }

    /// A launch of `name` ran past the time `limit` (W6): record its fault first, so every
    /// other waiter finds it, then kill the process (which ends every channel).
    fn stop(&self, name: &str, limit: std::time::Duration) -> WorkerFault {
        let fault = self.died(WorkerFault::Crashed {
            culprits: vec![name.to_string()],
            this_call: true,
            detail: format!(
                "the kernel ran longer than {limit:?}, the device's kernel time limit (HK4: \
                 Device::set_kernel_timeout, CUEFLOW_KERNEL_TIMEOUT_MS); its worker process \
                 was stopped"
            ),
        });
        let mut child = self.child.lock();
        let _ = child.kill();
        let _ = child.wait();
        drop(child);
        // The other waiters find the fault at once rather than at their next check (R3).
        (0..self.channels).for_each(|i| self.ring.wake(i));
        fault
    }

    /// The process went away without a crash report: reap it and say how it ended.
    fn lost(&self, me: Option<&str>) -> WorkerFault {
        if let Some(f) = self.dead() {
            return f;
        }
        let status = self.child.lock().wait();
        let detail = match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("the kernel worker process exited with status {c}"),
                (_, Some(sig)) => format!("the kernel worker process was killed by signal {sig}"),
                _ => format!("the kernel worker process ended ({s})"),
            },
            Err(e) => format!("the kernel worker process is gone ({e})"),
        };
        let culprits: Vec<String> = self
            .running()
            .into_iter()
            .flatten()
            .map(|r| r.name)
            .collect();
        let this_call = me.is_some_and(|m| culprits.iter().any(|c| c == m));
        self.died(WorkerFault::Crashed {
            culprits,
            this_call,
            detail,
        })
    }

    /// Run blocks `launch.block_begin..launch.block_end` of entry `symbol` (the C ABI
    /// `int symbol(const cueflow_launch*, void** params)`) from the shared object `so_path`,
    /// with `params[i]` the bytes of parameter `i` (copied; device pointers among them are
    /// arena addresses). Blocks until the entry returned; several callers run in parallel, one
    /// worker thread each (W3). A crash of the worker, here or in a concurrent launch, returns
    /// [`WorkerFault::Crashed`] and every later call the same (W4, W5).
    #[cfg_attr(not(test), allow(dead_code))] // the launch path uses `call`
    pub(crate) fn run(
        &self,
        so_path: &Path,
        symbol: &str,
        launch: &LaunchDesc,
        params: &[&[u8]],
    ) -> Result<(), WorkerFault> {
        self.call(&Call {
            so_path,
            symbol,
            name: symbol,
            launch: *launch,
            params,
            read_only: &[],
            limit: None,
        })
        .map(drop)
    }

    /// Run one launch request ([`run`](Self::run), with what a fault names, the pages mapped
    /// read-only meanwhile and the time limit: [`Call`]); `Ok` holds what the entry left in
    /// its message buffer on success (the conditions it set), usually nothing.
    pub(crate) fn call(&self, c: &Call<'_>) -> Result<Vec<u8>, WorkerFault> {
        self.call_batch(std::slice::from_ref(c)).map_err(|(_, f)| f)
    }

    /// Run `calls` in order in one request on one channel (R5): one hand-over and one reply
    /// for all of them. `Ok` holds what they recorded for the host, a line each; `Err((i, f))`
    /// says launch `i` ended with fault `f`, after the ones before it succeeded and before
    /// those after it ran. The time limit is the first call's, for the whole request: callers
    /// put launches with a limit in requests of their own.
    pub(crate) fn call_batch(&self, calls: &[Call<'_>]) -> Result<Vec<u8>, (usize, WorkerFault)> {
        if let Some(f) = self.dead() {
            return Err((0, f));
        }
        self.sync().map_err(|f| (0, f))?;
        let (at, len) = request::layouts(calls);
        if len > ring::REQ_CAP {
            return Err((
                0,
                WorkerFault::Unavailable(format!(
                    "a launch request of {len} bytes (path, parameters, read-only ranges); the \
                     worker takes at most {}",
                    ring::REQ_CAP
                )),
            ));
        }
        let ch = self.take_channel(calls);
        let limit = calls.first().and_then(|c| c.limit);
        let deadline = limit.and_then(|l| Instant::now().checked_add(l));
        // A worker that died while this call waited for a channel takes no more requests.
        if self.dead.lock().is_none() {
            #[cfg(test)]
            {
                REQUESTS.fetch_add(1, Ordering::Relaxed);
                LAUNCHES.fetch_add(calls.len() as u64, Ordering::Relaxed);
            }
            self.ring.request(ch, (len, calls.len()), |b| {
                for (c, (start, l)) in calls.iter().zip(&at) {
                    request::write(&mut b[*start..*start + l.end], c, l);
                }
            });
        }
        let reply = self.await_reply(ch, deadline);
        let i = self.ring.progress(ch, calls.len());
        let (c, name) = (&calls[i], calls[i].name);
        let out = match reply {
            Ok((ST_OK, m)) => Ok(m),
            Ok((ST_FAULT, m)) => Err(WorkerFault::Kernel {
                symbol: c.symbol.to_string(),
                message: explain_read_only(String::from_utf8_lossy(&m).into_owned(), c),
            }),
            Ok((ST_CRASH, m)) => Err(self.crash_report(&m, Some(ch))),
            Ok((_, m)) => Err(WorkerFault::Unavailable(
                String::from_utf8_lossy(&m).into_owned(),
            )),
            Err(Gone::TimedOut) => Err(self.stop(name, limit.unwrap_or_default())),
            // Dead already: another waiter read the crash's report first.
            Err(Gone::Dead(f)) => Err(f.seen_by(name)),
            Err(Gone::Lost) => Err(self.lost(Some(name))),
        };
        if let Some(f) = &mut *self.in_flight[ch].lock() {
            f.busy = false;
        }
        self.free.lock().push(ch);
        self.freed.notify_one();
        out.map_err(|f| (i, f))
    }

    /// A free channel, its record naming `calls` (W4, W7), its buffers reused from request to
    /// request.
    fn take_channel(&self, calls: &[Call<'_>]) -> usize {
        let ch = {
            let mut free = self.free.lock();
            loop {
                if let Some(i) = free.pop() {
                    break i;
                }
                self.freed.wait(&mut free);
            }
        };
        let mut f = self.in_flight[ch].lock();
        let f = f.get_or_insert_with(InFlight::default);
        f.launches.resize_with(calls.len(), Running::default);
        for (r, c) in f.launches.iter_mut().zip(calls) {
            r.name.clear();
            r.name.push_str(c.name);
            r.read_only.clear();
            r.read_only.extend_from_slice(c.read_only);
        }
        f.busy = true;
        ch
    }

    /// Wait for channel `ch`'s reply (R2, R3): polled for [`POLL`], then slept on, waking at
    /// `deadline` (W6) and every [`ring::CHECK`] to see whether the worker still lives.
    fn await_reply(&self, ch: usize, deadline: Option<Instant>) -> Result<(u32, Vec<u8>), Gone> {
        let state = self.ring.state(ch);
        let t = Instant::now();
        while state.load(Ordering::Acquire) != ring::REPLY && t.elapsed() < POLL {
            std::thread::yield_now();
        }
        loop {
            let seen = state.load(Ordering::Acquire);
            if seen == ring::REPLY {
                return Ok(self.ring.take_reply(ch));
            }
            if let Some(f) = self.dead() {
                return Err(Gone::Dead(f));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Gone::TimedOut);
            }
            let nap = deadline.map_or(ring::CHECK, |d| (d - now).min(ring::CHECK));
            self.ring.sleep(ch, seen, nap);
            if state.load(Ordering::Acquire) == seen && now.elapsed() >= nap {
                // Slept the whole nap without a reply: is the process still there?
                if let Ok(Some(_)) = self.child.lock().try_wait() {
                    return Err(Gone::Lost);
                }
            }
        }
    }
}

/// Why a reply will not come.
enum Gone {
    /// The time limit passed (W6).
    TimedOut,
    /// The worker died and another caller recorded how (W5).
    Dead(WorkerFault),
    /// The process is gone without a word (R3).
    Lost,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The end of the control socket tells the worker to flush what kernels printed and
        // exit; one that does not within a moment (a kernel that never returns) is killed.
        let _ = self.ctl.lock().shutdown(std::net::Shutdown::Both);
        let mut child = self.child.lock();
        for _ in 0..100 {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

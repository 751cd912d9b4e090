//! The launch doorbell (W3): one slot per channel in a shared `memfd`, a request written into
//! it by the program and a reply written back by the worker thread of that channel, each side
//! told by a state word it polls briefly and then sleeps on (a futex shared by the two
//! processes). No system call on the way when both sides are awake; one wake-up each way
//! when they sleep.
//!
//! Rules (the worker's half is `worker.cpp`, which mirrors the layout):
//!
//! * **R1 States.** A slot is `IDLE`, `REQUEST` (the program wrote a request; only the worker
//!   moves it on), `WRITING` (someone is writing the reply: the worker thread, or the crash
//!   handler, whichever took it from `REQUEST` first) or `REPLY` (only the program moves it
//!   back to `IDLE`, once it has read the reply). So a reply is never written twice or read
//!   while it is being written, and a crash reports on exactly the slots whose launch had not
//!   replied (W4).
//! * **R2 Sleeping.** A side about to sleep sets its `*_sleeps` flag, then waits on the state
//!   word for the value it last saw (the kernel checks the value and sleeps atomically); the
//!   other side changes the state, then wakes it if the flag is set. Both are sequentially
//!   consistent, so either the sleeper sees the new state or the waker sees the flag: no lost
//!   wake-up.
//! * **R3 Death.** A dead worker writes nothing more. Its crash handler replies on every busy
//!   slot (R1) and wakes the program; a worker that dies without a report (killed, `exit`) is
//!   seen by the program's sleeps, which last at most [`CHECK`] before it checks whether the
//!   process still runs.
//! * **R4 Untrusted.** The worker process runs arbitrary kernels that may scribble over the
//!   slots: the program reads back only a status, a length it bounds by the slot's size and
//!   a launch index it bounds by the request's count (R5).
//! * **R5 Several launches per request.** A request holds one or more launch records, each
//!   64-aligned after the previous one; the worker runs them in order on the channel's thread,
//!   writes the index of the record it is about to run into the slot's `progress` word, and
//!   stops at the first that does not succeed. The reply is that launch's status and message,
//!   or, when all succeeded, `OK` and what each recorded for the host (one line each). So a
//!   stream's queued launches cross to the worker in one request (one wake-up and one reply
//!   for all), and a fault names the launch that made it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Slot states (R1), as `worker.cpp` has them.
const IDLE: u32 = 0;
pub(super) const REQUEST: u32 = 1;
pub(super) const REPLY: u32 = 3;

/// Offset of the request in a slot; the words before it are the header.
pub(super) const REQ_AT: usize = 64;
/// Bytes of a request: the largest a launch makes (a 4 KiB path, its 32 KiB of parameters at
/// most and 256 read-only ranges) fits.
pub(crate) const REQ_CAP: usize = 64 << 10;
/// Bytes of a reply (the entry's message buffer is 4 KiB).
pub(super) const REPLY_CAP: usize = 8 << 10;
/// Bytes of a slot, whole pages.
pub(super) const SLOT: usize = (REQ_AT + REQ_CAP + REPLY_CAP).next_multiple_of(4096);

/// The longest a sleeping program waits before it looks whether the worker still runs (R3).
pub(super) const CHECK: Duration = Duration::from_millis(10);

/// The slots of one worker, mapped in this process.
pub(super) struct Ring {
    base: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping lives as long as the ring; slots are shared by design, every access to
// their header goes through atomics, and a slot's request and reply areas are written by one
// side at a time (R1: the state word hands them over).
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// `channels` slots in a new memfd (inherited by the worker, which maps it too).
    pub(super) fn new(channels: usize) -> std::io::Result<Ring> {
        // SAFETY: a NUL-terminated name; flags are valid for memfd_create.
        let raw =
            unsafe { libc::memfd_create(c"cueflow-worker-slots".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = SLOT * channels.max(1);
        // SAFETY: ftruncate on our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh shared mapping of the whole memfd, which is `len` bytes long.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Ring {
            base: p as *mut u8,
            len,
            fd,
        })
    }

    /// The memfd, for the worker to map.
    pub(super) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Header word `w` of slot `i` (0 state, 1 worker sleeps, 2 program sleeps, 3 request
    /// length, 4 reply status, 5 reply length, 6 launch records, 7 progress: R5).
    fn word(&self, i: usize, w: usize) -> &AtomicU32 {
        debug_assert!((i + 1) * SLOT <= self.len && w < REQ_AT / 4);
        // SAFETY: inside the mapping (slot `i` exists, the header is 64 bytes), 4-aligned
        // (slots are page-aligned); shared with the worker only through atomics (R2).
        unsafe { &*(self.base.add(i * SLOT + 4 * w) as *const AtomicU32) }
    }

    /// The state word of slot `i` (R1).
    pub(super) fn state(&self, i: usize) -> &AtomicU32 {
        self.word(i, 0)
    }

    /// Write the request `write` makes (at most [`REQ_CAP`] bytes, into the slice it gets)
    /// into slot `i`, which must be ours, and ring (R1, R2). The slot is idle unless the
    /// worker died with a launch in it (then nobody reads it any more).
    /// `count` launch records (R5).
    pub(super) fn request(
        &self,
        i: usize,
        (len, count): (usize, usize),
        write: impl FnOnce(&mut [u8]),
    ) {
        assert!(len <= REQ_CAP, "a launch request of {len} bytes");
        // SAFETY: the request area of slot `i`, inside the mapping; the slot is IDLE and the
        // caller holds its channel, so neither the worker (R1: it reads only in REQUEST) nor
        // another caller touches it.
        let area = unsafe { std::slice::from_raw_parts_mut(self.base.add(i * SLOT + REQ_AT), len) };
        write(area);
        self.word(i, 3).store(len as u32, Ordering::Relaxed);
        self.word(i, 6).store(count as u32, Ordering::Relaxed);
        self.word(i, 7).store(0, Ordering::Relaxed);
        self.state(i).store(REQUEST, Ordering::SeqCst);
        if self.word(i, 1).load(Ordering::SeqCst) != 0 {
            futex_wake(self.state(i));
        }
    }

    /// Sleep until slot `i`'s state is no longer `seen`, for at most `limit` (R2).
    pub(super) fn sleep(&self, i: usize, seen: u32, limit: Duration) {
        let sleeps = self.word(i, 2);
        sleeps.store(1, Ordering::SeqCst);
        if self.state(i).load(Ordering::SeqCst) == seen {
            futex_wait(self.state(i), seen, limit);
        }
        sleeps.store(0, Ordering::Relaxed);
    }

    /// Slot `i`'s reply (status, bytes), once its state is `REPLY`; the slot is idle again
    /// after (R1). The length is bounded by the area (R4).
    pub(super) fn take_reply(&self, i: usize) -> (u32, Vec<u8>) {
        let status = self.word(i, 4).load(Ordering::Acquire);
        let len = (self.word(i, 5).load(Ordering::Acquire) as usize).min(REPLY_CAP);
        // SAFETY: the reply area of slot `i`, inside the mapping; in REPLY nobody writes it
        // (R1) until we set IDLE below.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.base.add(i * SLOT + REQ_AT + REQ_CAP), len) }
                .to_vec();
        self.state(i).store(IDLE, Ordering::Release);
        (status, bytes)
    }

    /// The index of the launch record slot `i`'s worker thread runs or stopped at (R5),
    /// bounded by `count`, the request's records (R4).
    pub(super) fn progress(&self, i: usize, count: usize) -> usize {
        (self.word(i, 7).load(Ordering::Acquire) as usize).min(count.saturating_sub(1))
    }

    /// Wake whoever sleeps on slot `i` (the program's own waiters, when the worker died: R3).
    pub(super) fn wake(&self, i: usize) {
        futex_wake(self.state(i));
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once; nothing refers to it after the ring.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Sleep while `word` holds `expected`, at most `limit` (a shared futex: both processes).
fn futex_wait(word: &AtomicU32, expected: u32, limit: Duration) {
    let ts = libc::timespec {
        tv_sec: limit.as_secs() as libc::time_t,
        tv_nsec: limit.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 of a shared mapping, with a valid timeout;
    // it returns on a wake, a change of the value, a signal or the timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wake the sleepers on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; wakes at most every waiter, nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Request layout (W3), shared with `worker.cpp`: the header's 15 words, then from byte 64 the
/// path and the symbol, each NUL-terminated, the parameter sizes (4-aligned), the parameters'
/// bytes (16-aligned, each padded to 16) and the read-only ranges (16 bytes each). Offsets are
/// from the record's start, which is 64-aligned in the slot (R5: the next record starts at
/// `end` rounded up to 64).
pub(super) struct Layout {
    pub path: usize,
    pub sym: usize,
    pub sizes: usize,
    pub data: usize,
    pub ro: usize,
    pub end: usize,
}

impl Layout {
    pub(super) fn new(path: usize, sym: usize, nparams: usize, data: usize, nro: usize) -> Self {
        let p = 64;
        let s = p + path + 1;
        let sizes = (s + sym + 1).next_multiple_of(4);
        let d = (sizes + 4 * nparams).next_multiple_of(16);
        let ro = d + data;
        Layout {
            path: p,
            sym: s,
            sizes,
            data: d,
            ro,
            end: ro + 16 * nro,
        }
    }
}

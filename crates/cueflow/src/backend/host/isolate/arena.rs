//! The shared device-memory arena (HK3): host-backend device and pinned memory live in one
//! `memfd`, mapped at the same virtual address in this process and in every kernel worker
//! process, so a pointer in a kernel's parameters means the same bytes on both sides.
//!
//! Rules (numbered as the module docs of [`super`] cite them):
//!
//! * **A1 One reservation.** At first use the process reserves `cap` bytes of address space
//!   (`PROT_NONE`, `MAP_NORESERVE`: no memory, no commit charge), preferably at a fixed,
//!   rarely used address ([`PREFERRED_BASES`]) so a freshly started worker finds it free. The
//!   memfd is sized to `cap` once (sparse: pages exist only once written), and offset `o` of
//!   the file is always mapped at `base + o`.
//! * **A2 Blocks with guards.** A block is a page-aligned run of whole pages followed by one
//!   guard page that is never mapped, so an access running off the end of any block (or before
//!   the first) faults instead of reaching a neighbour. Device memory is placed at the end of
//!   its block, aligned to [`DEVICE_ALIGN`] (CUDA's guarantee), so an overrun faults once it
//!   passes the size rounded up to 256 bytes; host memory (pinned, mapped, managed) starts at
//!   the page, as the system's page-locked memory does. Free runs are kept by address (to
//!   coalesce) and by size (best fit); untouched space past `top` is taken last.
//! * **A3 Zero on allocation.** A freed block's pages are punched out of the memfd
//!   (`FALLOC_FL_PUNCH_HOLE`): their memory goes back to the system and they read as zero when
//!   the range is handed out again.
//! * **A4 Mirrors.** Every worker process registers a [`Mirror`]; each map and unmap of a block
//!   is queued on every live mirror, in order, under the arena's lock. Before it runs a kernel a
//!   worker applies what its mirror queued, so every block allocated before the launch was
//!   submitted is mapped in the worker, and freed blocks are protected again. A queue that
//!   grows past [`MIRROR_LIMIT`] collapses into one resynchronisation (protect the gaps
//!   between live blocks, map the live blocks again), so a worker that runs nothing for a long
//!   time holds bounded memory. A live block is never protected, not even for a moment: a
//!   kernel may be running over it while another launch synchronises (remapping it with
//!   `MAP_FIXED` replaces the mapping in one step, over the same pages).
//! * **A5 Visibility.** A block has an [`Owner`]: one device (device memory, as a GPU's) or
//!   every device (pinned, mapped, managed memory). A worker maps only the blocks of its own
//!   device, of the devices it was given peer access to, and shared ones, so a wild access in a
//!   kernel of one device faults on another device's memory, as on GPUs without peer access.
//!   Granting a peer later resynchronises the worker.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

/// Page size the arena works in.
pub(crate) const PAGE: usize = 4096;

/// Alignment of device-memory blocks, which end against their guard page (A2): CUDA's.
pub(crate) const DEVICE_ALIGN: usize = 256;

/// Where the process's arena is reserved, the first of these that is free: from 32 TiB up, far
/// below where Linux puts shared libraries, thread stacks and `mmap` (just under 128 TiB) and
/// far above where it puts executables and the `brk` heap (about 85 TiB with ASLR on x86-64,
/// but well below 32 TiB for non-PIE programs and AArch64). A fresh worker process has next to
/// nothing mapped there, so it can map the arena at the same address. Only when none is free
/// does the kernel choose, and the worker then takes its chance.
pub(crate) const PREFERRED_BASES: [usize; 3] =
    [0x2000_0000_0000, 0x3000_0000_0000, 0x1000_0000_0000];

/// Queued changes per mirror before they collapse into one resynchronisation (A4).
pub(crate) const MIRROR_LIMIT: usize = 4096;

/// Which devices' kernels may reach a block (A5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Device memory of the device with this id.
    Device(u64),
    /// Host memory every device reaches (pinned, mapped, managed).
    Shared,
}

/// One change of the arena's mapping, as a worker replays it (A4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    /// Offset in the arena (and the memfd).
    pub offset: u64,
    /// Length in bytes (whole pages).
    pub len: u64,
    /// True: map the range read-write from the memfd; false: protect it (`PROT_NONE`).
    pub map: bool,
}

/// What a worker has yet to apply of the arena's mapping (A4), and which blocks it maps (A5).
pub(crate) struct Mirror {
    device: u64,
    /// The devices it reaches besides its own: the device's list, shared with it.
    peers: Arc<Mutex<Vec<u64>>>,
    queue: Mutex<Queued>,
    /// Counts the changes queued (and resyncs), each counted after it was queued: a worker
    /// that applied everything up to a count it read before [`Arena::take`] finds nothing
    /// new to apply while the count stays, without taking a lock.
    generation: AtomicU64,
}

impl Mirror {
    /// The count of changes queued so far (A4). An allocation made before a launch was
    /// submitted counted before the launch's thread reads it (the submission orders them).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn sees(&self, owner: Owner) -> bool {
        match owner {
            Owner::Shared => true,
            Owner::Device(d) => d == self.device || self.peers.lock().contains(&d),
        }
    }
}

enum Queued {
    Changes(Vec<Change>),
    Resync,
}

/// The process's arena (A1).
pub(crate) struct Arena {
    base: usize,
    cap: usize,
    fd: OwnedFd,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Free runs (guard included) by offset, and by (length, offset) (A2).
    free_at: BTreeMap<usize, usize>,
    free_by_size: BTreeSet<(usize, usize)>,
    /// Offsets at and past `top` are free and untouched since `top` last grew.
    top: usize,
    /// The highest `top` ever: past it, nothing was ever mapped.
    high: usize,
    /// Live blocks: offset → (mapped length without the guard, owner).
    live: BTreeMap<usize, (usize, Owner)>,
    mirrors: Vec<Weak<Mirror>>,
}

static ARENA: OnceLock<Option<Arena>> = OnceLock::new();

/// The process's arena, created on first use; `None` where it cannot be made (no `memfd`, no
/// address space), and host memory then comes from the heap as before (no isolation).
pub(crate) fn global() -> Option<&'static Arena> {
    ARENA
        .get_or_init(|| {
            crate::config::host_arena()
                .then(|| Arena::create(arena_cap(), &PREFERRED_BASES).ok())
                .flatten()
        })
        .as_ref()
}

/// Reservation size: twice the machine's memory, at least 64 GiB, at most 8 TiB.
fn arena_cap() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ram = (pages.max(0) as usize).saturating_mul(size.max(0) as usize);
    ram.saturating_mul(2)
        .clamp(64 << 30, 8 << 40)
        .next_multiple_of(PAGE)
}

fn last_os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

impl Arena {
    /// Reserve `cap` bytes at the first free address of `bases` (else where the kernel
    /// chooses) and make the memfd (A1).
    pub(crate) fn create(cap: usize, bases: &[usize]) -> Result<Arena, String> {
        // SAFETY: a NUL-terminated name; flags are valid for memfd_create.
        let raw =
            unsafe { libc::memfd_create(c"cueflow-device-memory".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(last_os_error("memfd_create"));
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), cap as libc::off_t) } != 0 {
            return Err(last_os_error("ftruncate of the arena"));
        }
        let base = reserve(cap, bases)?;
        Ok(Arena {
            base,
            cap,
            fd,
            inner: Mutex::new(Inner {
                // The page at offset 0 is a guard before the first block (A2).
                top: PAGE,
                high: PAGE,
                ..Inner::default()
            }),
        })
    }

    /// First address of the reservation.
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Size of the reservation in bytes.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// The memfd, for a worker to map.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// True if `addr` lies in the reservation.
    pub(crate) fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr < self.base + self.cap
    }

    /// A zeroed block of at least `bytes` bytes with a guard page after it (page-aligned, or
    /// for device memory ending at the guard, A2), or `None` when the reservation has no run
    /// that large (out of memory).
    pub(crate) fn alloc(&self, bytes: usize, owner: Owner) -> Option<*mut u8> {
        let len = bytes.max(1).checked_next_multiple_of(PAGE)?;
        let need = len.checked_add(PAGE)?;
        let mut g = self.inner.lock();
        let off = match g.free_by_size.range((need, 0)..).next().copied() {
            Some((run, off)) => {
                g.free_by_size.remove(&(run, off));
                g.free_at.remove(&off);
                if run > need {
                    g.insert_free(off + need, run - need);
                }
                off
            }
            None => {
                let off = g.top;
                if off.checked_add(need)? > self.cap {
                    return None;
                }
                g.top = off + need;
                g.high = g.high.max(g.top);
                off
            }
        };
        let addr = self.base + off;
        // SAFETY: `addr..addr+len` lies in our reservation and belongs to no live block, so
        // replacing its mapping affects nothing else; the memfd is `cap` bytes long.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.fd.as_raw_fd(),
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            g.insert_free(off, need);
            return None;
        }
        g.live.insert(off, (len, owner));
        // A2: device memory ends against the guard page, at CUDA's 256-byte alignment.
        let shift = match owner {
            Owner::Device(_) => len - bytes.max(1).next_multiple_of(DEVICE_ALIGN),
            Owner::Shared => 0,
        };
        g.push(
            Change {
                offset: off as u64,
                len: len as u64,
                map: true,
            },
            owner,
        );
        Some((addr + shift) as *mut u8)
    }

    /// Give back the block at `ptr` (from [`Arena::alloc`]); its pages return to the system
    /// (A3) and the range faults again in this process and, once they synchronise, in workers.
    pub(crate) fn free(&self, ptr: *mut u8) {
        // The block starts at the page the pointer is in (A2).
        let off = (ptr as usize - self.base) & !(PAGE - 1);
        let ptr = (self.base + off) as *mut u8;
        let mut g = self.inner.lock();
        let Some((len, owner)) = g.live.remove(&off) else {
            debug_assert!(false, "freeing {ptr:?}, which the arena did not hand out");
            return;
        };
        // SAFETY: the range is a block of ours that nothing uses any more (the caller's
        // contract: the last holder dropped); protecting it and punching its pages touches
        // nothing else.
        unsafe {
            libc::mmap(
                ptr as *mut libc::c_void,
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            );
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            );
        }
        g.insert_free(off, len + PAGE);
        g.push(
            Change {
                offset: off as u64,
                len: len as u64,
                map: false,
            },
            owner,
        );
    }

    /// Register the mirror of a worker of device `device` that reaches the memory of the
    /// devices in `peers` too (a list the device keeps and may grow: call [`Arena::resync`]
    /// after). It starts with a full resynchronisation (A4, A5).
    pub(crate) fn mirror(&self, device: u64, peers: Arc<Mutex<Vec<u64>>>) -> Arc<Mirror> {
        let m = Arc::new(Mirror {
            device,
            peers,
            queue: Mutex::new(Queued::Resync),
            generation: AtomicU64::new(1),
        });
        let mut g = self.inner.lock();
        g.mirrors.retain(|w| w.strong_count() > 0);
        g.mirrors.push(Arc::downgrade(&m));
        m
    }

    /// What `mirror` has to apply, in order, and empty its queue (A4).
    pub(crate) fn take(&self, mirror: &Mirror) -> Vec<Change> {
        let g = self.inner.lock();
        let queued = std::mem::replace(&mut *mirror.queue.lock(), Queued::Changes(Vec::new()));
        match queued {
            Queued::Changes(c) => c,
            Queued::Resync => {
                // Protect the gaps and map the live blocks; a live block is never protected,
                // even for a moment, since a kernel may be running over it (A4).
                let (mut out, mut at) = (Vec::new(), 0);
                for (&o, &(l, owner)) in &g.live {
                    if !mirror.sees(owner) {
                        continue;
                    }
                    if o > at {
                        out.push(Change {
                            offset: at as u64,
                            len: (o - at) as u64,
                            map: false,
                        });
                    }
                    out.push(Change {
                        offset: o as u64,
                        len: l as u64,
                        map: true,
                    });
                    at = o + l;
                }
                if g.high > at {
                    out.push(Change {
                        offset: at as u64,
                        len: (g.high - at) as u64,
                        map: false,
                    });
                }
                out
            }
        }
    }

    /// The mirror's peers changed: its next synchronisation maps everything it sees (A5).
    pub(crate) fn resync(&self, mirror: &Mirror) {
        *mirror.queue.lock() = Queued::Resync;
        mirror.generation.fetch_add(1, Ordering::Release);
    }

    /// Bytes of live blocks (guards excluded).
    #[cfg_attr(not(test), allow(dead_code))] // tests
    pub(crate) fn live_bytes(&self) -> usize {
        self.inner.lock().live.values().map(|&(l, _)| l).sum()
    }
}

impl Inner {
    /// Add a free run, merged with free neighbours (A2); a run that ends at `top` lowers it.
    fn insert_free(&mut self, mut off: usize, mut len: usize) {
        if let Some((&p, &pl)) = self.free_at.range(..off).next_back() {
            if p + pl == off {
                self.free_at.remove(&p);
                self.free_by_size.remove(&(pl, p));
                off = p;
                len += pl;
            }
        }
        if let Some(&nl) = self.free_at.get(&(off + len)) {
            self.free_at.remove(&(off + len));
            self.free_by_size.remove(&(nl, off + len));
            len += nl;
        }
        if off + len == self.top {
            self.top = off;
            return;
        }
        self.free_at.insert(off, len);
        self.free_by_size.insert((len, off));
    }

    /// Queue a change of a block of `owner` on every live mirror that sees it (A4, A5).
    fn push(&mut self, c: Change, owner: Owner) {
        self.mirrors.retain(|w| w.strong_count() > 0);
        for m in self.mirrors.iter().filter_map(Weak::upgrade) {
            if !m.sees(owner) {
                continue;
            }
            let mut q = m.queue.lock();
            if let Queued::Changes(v) = &mut *q {
                if v.len() >= MIRROR_LIMIT {
                    *q = Queued::Resync;
                } else {
                    v.push(c);
                }
            }
            drop(q);
            m.generation.fetch_add(1, Ordering::Release);
        }
    }
}

/// Reserve `cap` bytes of address space, at the first free address of `bases` (A1).
fn reserve(cap: usize, bases: &[usize]) -> Result<usize, String> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    let tries = bases
        .iter()
        .map(|&b| (b, libc::MAP_FIXED_NOREPLACE))
        .chain([(0, 0)]);
    for (hint, extra) in tries {
        // SAFETY: a fresh PROT_NONE reservation; MAP_FIXED_NOREPLACE never replaces a mapping.
        let p = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                cap,
                libc::PROT_NONE,
                flags | extra,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            // An old kernel that ignores MAP_FIXED_NOREPLACE may place it elsewhere: workers
            // are told the address, so any place will do.
            return Ok(p as usize);
        }
    }
    Err(last_os_error("reserving the device-memory arena"))
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the reservation is ours; only test arenas are dropped, after their blocks.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.cap) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_zeroed_guarded_reused_and_coalesced() {
        let a = Arena::create(1 << 30, &[]).expect("arena");
        let p = a.alloc(100, Owner::Shared).unwrap();
        let q = a.alloc(3 * PAGE, Owner::Shared).unwrap();
        assert_eq!(p as usize % PAGE, 0);
        // A2: one guard page between blocks.
        assert_eq!(q as usize - p as usize, 2 * PAGE);
        // SAFETY: p is a live block of one page.
        unsafe { p.write_bytes(0xab, PAGE) };
        a.free(p);
        let p2 = a.alloc(PAGE, Owner::Device(1)).unwrap();
        assert_eq!(p2, p, "best fit reuses the freed run");
        // SAFETY: p2 is a live block of one page.
        let s = unsafe { std::slice::from_raw_parts(p2, PAGE) };
        assert!(
            s.iter().all(|&b| b == 0),
            "A3: a reused block reads as zero"
        );
        a.free(p2);
        a.free(q);
        // Everything free again: `top` is back at the first block.
        let r = a.alloc(8 * PAGE, Owner::Shared).unwrap();
        assert_eq!(r, p, "free runs coalesce");
        assert_eq!(a.live_bytes(), 8 * PAGE);
        a.free(r);
        assert!(
            a.alloc(2 << 30, Owner::Shared).is_none(),
            "past the reservation: out of memory"
        );
        // Device memory ends against the guard page, 256-byte aligned.
        let d = a.alloc(1000, Owner::Device(1)).unwrap();
        assert_eq!(d as usize % DEVICE_ALIGN, 0);
        assert_eq!((d as usize + 1024) % PAGE, 0, "1000 bytes end at the guard");
        // SAFETY: the block's 1000 bytes (and the slack up to 1024) are mapped.
        unsafe { d.add(1023).write(1) };
        a.free(d);
        let e = a.alloc(PAGE, Owner::Device(1)).unwrap();
        assert_eq!(e as usize % PAGE, 0, "a whole page needs no shift");
        a.free(e);
        assert_eq!(a.live_bytes(), 0);
    }

    #[test]
    fn mirrors_replay_changes_then_resync_when_full() {
        let a = Arena::create(1 << 30, &[]).expect("arena");
        let keep = a.alloc(1, Owner::Shared).unwrap();
        let peers = Arc::new(Mutex::new(Vec::new()));
        let m = a.mirror(1, peers.clone());
        let first = a.take(&m);
        assert_eq!(
            first.len(),
            3,
            "resync: protect the gaps, map the live block"
        );
        assert!(!first[0].map && first[1].map && !first[2].map);
        assert_eq!(first[1].offset as usize, keep as usize - a.base());
        let p = a.alloc(PAGE, Owner::Device(1)).unwrap();
        a.free(p);
        let c = a.take(&m);
        assert_eq!(c.len(), 2);
        assert!(c[0].map && !c[1].map && c[0].offset == c[1].offset);
        for _ in 0..MIRROR_LIMIT {
            let p = a.alloc(PAGE, Owner::Device(1)).unwrap();
            a.free(p);
        }
        let c = a.take(&m);
        assert_eq!(c.len(), 3, "collapsed into a resync");
        assert!(c[1].map && c[2].offset + c[2].len > c[1].offset + c[1].len);
        // A5: another device's blocks are invisible until it is a peer.
        let other = a.alloc(PAGE, Owner::Device(2)).unwrap();
        assert!(
            a.take(&m).is_empty(),
            "device 2's block is not mapped for device 1"
        );
        peers.lock().push(2);
        a.resync(&m);
        let c = a.take(&m);
        let off = (other as usize - a.base()) as u64;
        assert!(c.iter().any(|c| c.map && c.offset == off), "{c:?}");
        a.free(other);
        assert_eq!(a.take(&m).len(), 1, "its free is mirrored now");
        a.free(keep);
    }
}

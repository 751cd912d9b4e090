//! A word the host and running kernels share (SPEC HM7): the latch that holds a kernel until the
//! host has enqueued what comes after it, a progress counter a persistent kernel bumps, a stop
//! request — `volatile int*` in mapped pinned memory, as CUDA programs write it, with the host
//! side made safe.
//!
//! A [`PinnedBuffer`](crate::PinnedBuffer)'s host access waits for the device work that touches
//! it (MM3), which is right for data and wrong for a latch: the host would wait for the kernel
//! that waits for the host. A flag's host side is atomic loads and stores that never wait, and
//! its device side is an atomic kernel argument ([`KernelArgs::flag`]); atomic accesses do not
//! race with each other (AC3), so neither side is a data race, and the sanitizer has nothing to
//! report.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::api::device::Device;
use crate::api::kernel::KernelArgs;
use crate::api::memory::PinnedBuffer;
use crate::error::Result;
use crate::types::{Access, PinnedFlags};

/// One `u32` of mapped pinned memory that the host and running kernels read and write
/// atomically, at any time (HM7). Starts at 0.
///
/// ```no_run
/// # use cueflow::*;
/// # fn main() -> Result<()> {
/// let dev = Device::cuda(0)?;
/// let s = Stream::new(&dev)?;
/// let latch = HostFlag::new(&dev)?;
/// // A kernel that spins until the flag is set (`volatile unsigned*` in CUDA C) …
/// # let wait_for_latch = Kernel::new("wait").build();
/// s.launch(&wait_for_latch, LaunchConfig::new(1, 1), KernelArgs::new().flag(&latch))?;
/// // … holds the stream while the host enqueues more work behind it, then lets it go.
/// latch.store(1);
/// s.synchronize()?;
/// # Ok(()) }
/// ```
pub struct HostFlag {
    /// One mapped word, never handed out as a buffer: no copy, memset or host view can name
    /// it. Enqueued work that uses it keeps its allocation alive too (MM2).
    word: PinnedBuffer<u32>,
}

impl HostFlag {
    /// Allocate the flag on `device` (`cudaHostAlloc(.., cudaHostAllocMapped)`), set to 0.
    pub fn new(device: &Device) -> Result<HostFlag> {
        // Zeroed by the allocation.
        let word = PinnedBuffer::with_flags(device, 1, PinnedFlags::default().mapped())?;
        Ok(HostFlag { word })
    }

    /// The word, as the host sees it.
    fn word(&self) -> &AtomicU32 {
        let p = self.word.alloc().host_ptr() as *mut u32;
        // SAFETY: the allocation is 4 bytes of page-locked memory (page-aligned, so aligned
        // for `AtomicU32`) that lives as long as `self` (its buffer is a field). Every access to it
        // is atomic: the host's through this reference, a kernel's through an atomic argument
        // (`KernelArgs::flag`, the only way device work reaches it; no copy, memset or host
        // view can name it), so sharing it with running kernels is no data race.
        unsafe { AtomicU32::from_ptr(p) }
    }

    /// Store `value`, seen by kernels that poll the flag as soon as it crosses the bus. Never
    /// waits for device work (HM7).
    pub fn store(&self, value: u32) {
        self.word().store(value, Ordering::SeqCst);
    }

    /// The current value, as the latest store (host or kernel) left it. Never waits.
    pub fn load(&self) -> u32 {
        self.word().load(Ordering::SeqCst)
    }

    /// Add `delta` (wrapping), returning the value before: a counter the host and kernels both
    /// bump. Never waits.
    pub fn fetch_add(&self, delta: u32) -> u32 {
        self.word().fetch_add(delta, Ordering::SeqCst)
    }

    /// The device the flag was made on (its kernels, and every device's where memory is
    /// portable, HM2).
    pub fn device(&self) -> &Device {
        self.word.device()
    }

    /// The address kernels use (`cudaHostGetDevicePointer`).
    pub fn device_addr(&self) -> u64 {
        self.word.alloc().kernel_addr()
    }
}

impl std::fmt::Debug for HostFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostFlag({}) at {:#x}", self.load(), self.device_addr())
    }
}

impl KernelArgs {
    /// A [`HostFlag`] the kernel reads and writes atomically while the host does too (HM7):
    /// `volatile unsigned int*` (or `cuda::atomic_ref` at system scope) in CUDA C, and
    /// [`BlockArgs::atomics_u32`](crate::BlockArgs::atomics_u32) in a host kernel.
    pub fn flag(self, flag: &HostFlag) -> Self {
        self.mem_arg::<u32>(flag.word.whole_mem(), Access::Atomic)
    }
}

//! Declared reads verified after the fact (SPEC AC7): with the sanitizer on, a stream launch's
//! read-declared arguments are checksummed on the device just before and just after the
//! kernel, in stream order, and a host function compares the two sums and reports each
//! argument whose bytes changed ([`ReadCheck`]).
//!
//! Rules:
//! * **V1 What is checked.** Every buffer argument declared read (`KernelArgs::read`) with at
//!   least one byte, unless a written or atomic argument of the same launch overlaps it (KC4
//!   allows `in` and `out` over one buffer, and then its bytes change legitimately). Stream
//!   launches only: kernel nodes of graphs are not checked.
//! * **V2 Sound.** The before-sum runs right after everything earlier on the stream and the
//!   after-sum right after the kernel, so no declared write of this stream falls between them;
//!   another stream writing the bytes meanwhile is a race, which the sanitizer reports on its
//!   own (AC3) and which may then show here too. A checksum that does not change is not proof
//!   that nothing was written (a write of the same value, or a write undone before the kernel
//!   ended, leaves it), but a change is proof that something wrote.
//! * **V3 The sum.** Each aligned 8-byte word, and each byte before the first or after the last
//!   whole word, is mixed with its position (splitmix64's finalizer) and the results are added
//!   (order-free, so blocks add theirs with one atomic per warp): one changed byte changes the
//!   sum except with probability about 2^-64.
//! * **V4 Scratch.** Each checked launch takes a slab — 16 bytes of device memory and of pinned
//!   memory per checked argument (at most 64 arguments: 1 KiB each) — from a pool of its device
//!   and gives it back in the host function. A slab of a launch that faulted is not given back.
//! * **V5 Never in the way.** When the checksum kernel cannot be had (no NVRTC), the launch runs
//!   unchecked and that is said once on standard error.

use std::ffi::c_void;
use std::sync::{Arc, LazyLock};

use cudarc::driver::sys::CUdeviceptr;
use parking_lot::Mutex;

use super::driver::{memory as mem, module as modl, CuResult, St};
use super::module::LoadedKernel;
use super::queue::HostFnCall;
use super::shared::DeviceShared;
use crate::backend::contract::kernel::{KernelInner, Launch};
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{HostFn, ReadCheck};

/// The checksum kernel (V3): `out[0] += sum over p[0..n]`.
const SOURCE: &str = r#"
__device__ __forceinline__ unsigned long long cf_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
extern "C" __global__ void cf_read_checksum(const unsigned char* p, unsigned long long n,
                                            unsigned long long* out) {
    unsigned long long head = (8 - ((unsigned long long)p & 7)) & 7;
    if (head > n) head = n;
    unsigned long long words = (n - head) >> 3;
    unsigned long long tail = head + (words << 3);
    const unsigned long long* w = (const unsigned long long*)(p + head);
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long acc = 0;
    for (unsigned long long i = t; i < words; i += stride)
        acc += cf_mix(w[i] + 0x9e3779b97f4a7c15ull * (i + 1));
    if (t < head) acc += cf_mix(0xa5a5000000000000ull ^ (t << 8) ^ p[t]);
    if (t < n - tail) acc += cf_mix(0x5a5a000000000000ull ^ ((tail + t) << 8) ^ p[tail + t]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
"#;

/// Threads per block of the checksum kernel (whole warps: every lane reaches the shuffle).
const THREADS: u32 = 256;
/// Most blocks a checksum launches (a grid-stride loop covers the rest).
const MAX_BLOCKS: u64 = 1024;
/// Bytes of a slab's each side: two sums of 8 bytes for each of at most 64 arguments (V4).
const SLAB_BYTES: usize = 64 * 16;

static CHECKSUM: LazyLock<Arc<KernelInner>> = LazyLock::new(|| {
    Arc::new(KernelInner {
        name: "cf_read_checksum".into(),
        host: None,
        cuda: Some(crate::types::CudaCode::Source {
            code: SOURCE.into(),
            entry: "cf_read_checksum".into(),
            options: Default::default(),
        }),
        loaded: Default::default(),
    })
});

/// Device and pinned scratch of one checked launch (V4).
struct Slab {
    dev: CUdeviceptr,
    host: *mut u64,
}

// SAFETY: the slab's memory belongs to the device's context for the life of the process; a
// slab is used by one launch at a time (taken from and given back to the pool), so moving it
// between threads shares nothing.
unsafe impl Send for Slab {}

/// Idle slabs, by device id (V4).
static SLABS: Mutex<Vec<(u64, Slab)>> = Mutex::new(Vec::new());

/// A slab of `device`, from the pool or new (context current, D2).
fn take_slab(device: u64) -> CuResult<Slab> {
    let mut pool = SLABS.lock();
    if let Some(i) = pool.iter().position(|(d, _)| *d == device) {
        return Ok(pool.swap_remove(i).1);
    }
    drop(pool);
    // D2: the caller bound the device's context.
    let dev = mem::alloc(SLAB_BYTES)?;
    // Flags 0: plain page-locked memory.
    let host = match mem::host_alloc(SLAB_BYTES, 0) {
        Ok(host) => host,
        Err(e) => {
            // SAFETY: `dev` was allocated above in this context and is used by nothing.
            let _ = unsafe { mem::free(dev) };
            return Err(e);
        }
    };
    Ok(Slab {
        dev,
        host: host as *mut u64,
    })
}

/// The read-declared arguments of `l` to check (V1), at most 64 (the argument limit).
fn checked_args(l: &Launch) -> Vec<(usize, &MemRef)> {
    l.unaliased_reads().take(SLAB_BYTES / 16).collect()
}

/// Enqueue the checksum of `mem`'s bytes, added into the device word at `out` (V3).
fn checksum(s: St, k: &LoadedKernel, mem: &MemRef, out: CUdeviceptr) -> CuResult<()> {
    let mut p = mem.alloc.kernel_addr() + mem.offset as u64;
    let mut n = mem.len as u64;
    let mut o = out;
    let blocks = (n / 8).div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
    let mut params = [
        &mut p as *mut u64 as *mut c_void,
        &mut n as *mut u64 as *mut c_void,
        &mut o as *mut u64 as *mut c_void,
    ];
    // SAFETY: D1 (`k.func` is loaded in the device's module cache; `s` is live), D2. The three
    // parameters are 8-byte values that outlive the call (the driver copies them). The kernel
    // reads `mem`'s bytes, which the op holds until it completed (MM2, Q1–Q3), and adds into
    // the slab's word, which stays allocated (V4).
    unsafe {
        modl::launch(
            k.func,
            [blocks, 1, 1],
            [THREADS, 1, 1],
            0,
            s,
            params.as_mut_ptr(),
        )
    }
}

/// Enqueue launch `l` of `k` on `s` with its read-declared arguments checked (module docs);
/// the host function that compares the sums, for the stream's keepalive queue. `None`: no
/// argument to check, or no checksum kernel (V5): the launch was enqueued unchecked.
pub(super) fn launch_checked(
    s: St,
    l: &Launch,
    k: &LoadedKernel,
    shared: &DeviceShared,
    report: &ReadCheck,
) -> CuResult<Option<Box<HostFnCall>>> {
    let args = checked_args(l);
    let sum = if args.is_empty() {
        None
    } else {
        match super::launch::load(shared, &CHECKSUM) {
            Ok(sum) => Some(sum),
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "cueflow sanitizer: kernels' read arguments are not checked on CUDA \
                         (AC7): the checksum kernel is unavailable: {e}"
                    )
                });
                None
            }
        }
    };
    let Some(sum) = sum else {
        super::launch::launch(s, l, k)?;
        return Ok(None);
    };
    let slab = take_slab(shared.device_id)?;
    let word = |j: usize, after: bool| slab.dev + (16 * j + 8 * after as usize) as u64;
    let bytes = 16 * args.len();
    // SAFETY: D1, D2; the slab's device side has SLAB_BYTES >= `bytes` bytes (V4).
    unsafe { mem::memset_d8_async(slab.dev, 0, bytes, s) }?;
    for (j, (_, mem)) in args.iter().enumerate() {
        checksum(s, &sum, mem, word(j, false))?;
    }
    super::launch::launch(s, l, k)?;
    for (j, (_, mem)) in args.iter().enumerate() {
        checksum(s, &sum, mem, word(j, true))?;
    }
    // SAFETY: D1, D2; both sides of the slab have `bytes` bytes; the pinned side is written
    // only by this copy until the host function below reads it (stream order).
    unsafe { mem::copy_dtoh_async(slab.host as *mut c_void, slab.dev, bytes, s) }?;
    let indices: Vec<usize> = args.iter().map(|(i, _)| *i).collect();
    let (device, report) = (shared.device_id, report.clone());
    let slab = Mutex::new(Some(slab));
    let compare: HostFn = Arc::new(move || {
        let Some(slab) = slab.lock().take() else {
            return;
        };
        for (j, &arg) in indices.iter().enumerate() {
            // SAFETY: the copy above filled 2 words per checked argument and completed before
            // this host function ran (stream order); nothing else writes the slab meanwhile.
            let (before, after) = unsafe { (*slab.host.add(2 * j), *slab.host.add(2 * j + 1)) };
            if before != after {
                report(arg);
            }
        }
        SLABS.lock().push((device, slab));
    });
    super::launch::host_call(s, compare, "sanitizer read check".into(), shared).map(Some)
}

#[cfg(test)]
mod tests {
    use super::SOURCE;
    use crate::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, Stream};

    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    /// V3, written again in Rust: the sum of `b`, which starts at address `addr`.
    fn model(b: &[u8], addr: u64) -> u64 {
        let n = b.len() as u64;
        let head = ((8 - (addr & 7)) & 7).min(n);
        let words = (n - head) / 8;
        let tail = head + words * 8;
        let mut acc = 0u64;
        for i in 0..words {
            let at = (head + 8 * i) as usize;
            let w = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
            acc = acc.wrapping_add(mix(
                w.wrapping_add(0x9e3779b97f4a7c15u64.wrapping_mul(i + 1))
            ));
        }
        for t in 0..head {
            acc = acc.wrapping_add(mix(0xa5a5000000000000 ^ (t << 8) ^ b[t as usize] as u64));
        }
        for t in tail..n {
            acc = acc.wrapping_add(mix(0x5a5a000000000000 ^ (t << 8) ^ b[t as usize] as u64));
        }
        acc
    }

    /// The checksum kernel's source, run by the host backend's CUDA C path (the same source
    /// NVRTC compiles): its sums agree with the model over ranges of every alignment, and one
    /// changed byte anywhere changes them (V3).
    #[test]
    fn v3_checksums_match_the_model_and_see_every_byte() {
        let dev = Device::host().unwrap();
        let s = Stream::new(&dev).unwrap();
        let k = Kernel::new("cf_read_checksum")
            .cuda_source(SOURCE, "cf_read_checksum")
            .build();
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let buf = DeviceBuffer::<u8>::new(&dev, data.len()).unwrap();
        let out = DeviceBuffer::<u64>::new(&dev, 1).unwrap();
        let sum = |bytes: &[u8], range: std::ops::Range<usize>| {
            s.write_pageable(&buf, bytes).unwrap();
            s.write_pageable(&out, &[0u64]).unwrap();
            let view = buf.slice(range.clone()).unwrap();
            let blocks = ((range.len() / 8).div_ceil(256)).clamp(1, 4) as u32;
            s.launch(
                &k,
                LaunchConfig::new(blocks, 256),
                KernelArgs::new()
                    .read(&view)
                    .scalar(range.len() as u64)
                    .write_whole(&out),
            )
            .unwrap();
            let mut r = [0u64];
            s.read_pageable(&mut r, &out).unwrap();
            r[0]
        };
        let base = buf.device_addr();
        for range in [0..3000, 3..16, 1..8, 5..7, 8..72, 7..3000, 0..1, 2999..3000] {
            let want = model(&data[range.clone()], base + range.start as u64);
            assert_eq!(sum(&data, range.clone()), want, "range {range:?}");
            for i in [range.start, (range.start + range.end) / 2, range.end - 1] {
                let mut changed = data.clone();
                changed[i] ^= 0x10;
                assert_ne!(sum(&changed, range.clone()), want, "byte {i} of {range:?}");
            }
        }
    }
}

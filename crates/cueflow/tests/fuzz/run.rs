//! A program's objects on one device (the host backend, or CUDA in the differential mode)
//! and the work it enqueues on a stream. The steps of a whole program are in `exec.rs`,
//! graphs in `graphs.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cueflow::{
    kernels, Device, DeviceBuffer, Error, Event, KernelArgs, ManagedBuffer, MemPool, PinnedBuffer,
    PinnedFlags, RegisteredBuffer, SanitizeMode, Stream,
};
use proptest::prelude::*;

use crate::kernels::{launch_of, KLaunch, Scalar};
use crate::known::Known;
use crate::model::{host_task_value, Model};
use crate::program::{Loc, Program, Work, DEV_BUFS, EVENTS, LEGACY, N, POOLS, STREAMS};

/// How a program is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Device-wide automatic ordering (AC5): every call accepted, nothing reported, the
    /// sequential result.
    Auto,
    /// The harness orders every operation after the one enqueued before it with events.
    Ordered,
    /// Only the program's own events and synchronizations; the sanitizer (error mode) refuses
    /// each operation that would race, and the model skips exactly those.
    Random,
}

/// Host memory of a device, by kind.
pub enum HostBuf {
    Pinned(PinnedBuffer<f32>),
    Managed(ManagedBuffer<f32>),
    Registered(RegisteredBuffer<f32>),
}

impl HostBuf {
    pub fn get(&self) -> &PinnedBuffer<f32> {
        match self {
            HostBuf::Pinned(b) => b,
            HostBuf::Managed(b) => b,
            HostBuf::Registered(b) => b,
        }
    }

    pub fn get_mut(&mut self) -> &mut PinnedBuffer<f32> {
        match self {
            HostBuf::Pinned(b) => b,
            HostBuf::Managed(b) => b,
            HostBuf::Registered(b) => b,
        }
    }
}

/// One device's objects.
pub struct DevRun {
    pub dev: Device,
    pub streams: Vec<Stream>,
    pub events: Vec<Event>,
    pub bufs: Vec<DeviceBuffer<f32>>,
    /// Pinned, mapped, managed, registered (buffers `DEV_BUFS..`).
    pub host: Vec<HostBuf>,
    pub pools: Vec<MemPool>,
    pub host_fns: Arc<AtomicUsize>,
    /// Flags of registered memory (portable with two devices).
    pub reg_flags: PinnedFlags,
}

/// `Ok(true)`: enqueued; `Ok(false)`: the sanitizer refused it as a race (nothing enqueued).
pub fn accepted(r: cueflow::Result<()>) -> cueflow::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(Error::Race(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Two distinct elements of a slice, mutably.
pub fn two_mut<T>(v: &mut [T], i: usize, j: usize) -> (&mut T, &mut T) {
    assert_ne!(i, j);
    if i < j {
        let (a, b) = v.split_at_mut(j);
        (&mut a[i], &mut b[0])
    } else {
        let (a, b) = v.split_at_mut(i);
        (&mut b[0], &mut a[j])
    }
}

impl DevRun {
    pub fn new(
        dev: &Device,
        shared: Option<&[MemPool]>,
        p: &Program,
        mode: Mode,
        known: Known,
    ) -> cueflow::Result<DevRun> {
        let dev = dev.clone();
        dev.set_sanitize(SanitizeMode::Error);
        dev.set_auto_order(mode == Mode::Auto);
        let two = p.devices > 1;
        // With two devices host memory is portable (HM2), except pinned memory when known
        // issue 12 (portable by default) is exercised.
        let portable = |yes: bool| PinnedFlags {
            portable: yes,
            ..PinnedFlags::default()
        };
        let pinned = portable(two && !known.has("12"));
        let mapped = portable(two).mapped();
        let setup = Stream::new(&dev)?;
        let mut bufs = Vec::new();
        for _ in 0..DEV_BUFS {
            let b = DeviceBuffer::<f32>::new(&dev, N)?;
            kernels::fill(&setup, &b, 0.0)?;
            bufs.push(b);
        }
        setup.synchronize()?;
        let pools = match shared {
            Some(pools) => pools.to_vec(),
            None => (0..POOLS)
                .map(|_| dev.create_pool())
                .collect::<cueflow::Result<Vec<_>>>()?,
        };
        for (pool, &t) in pools.iter().zip(&p.thresholds) {
            pool.set_release_threshold(t)?;
        }
        Ok(DevRun {
            streams: (0..STREAMS)
                .map(|i| new_stream(&dev, i as u8))
                .collect::<cueflow::Result<_>>()?,
            events: (0..EVENTS)
                .map(|_| Event::new(&dev))
                .collect::<cueflow::Result<_>>()?,
            host: vec![
                HostBuf::Pinned(PinnedBuffer::with_flags(&dev, N, pinned)?),
                HostBuf::Pinned(PinnedBuffer::with_flags(&dev, N, mapped)?),
                HostBuf::Managed(ManagedBuffer::new(&dev, N)?),
                HostBuf::Registered(RegisteredBuffer::register(
                    &dev,
                    vec![0.0; N],
                    portable(two),
                )?),
            ],
            bufs,
            pools,
            host_fns: Arc::default(),
            reg_flags: portable(two),
            dev,
        })
    }

    pub fn host(&self, buf: u8) -> &PinnedBuffer<f32> {
        self.host[(buf - DEV_BUFS) as usize].get()
    }

    pub fn host_mut(&mut self, buf: u8) -> &mut PinnedBuffer<f32> {
        self.host[(buf - DEV_BUFS) as usize].get_mut()
    }

    /// Device memory `l` (a view of one of the device buffers).
    pub fn dbuf(&self, l: Loc) -> DeviceBuffer<f32> {
        assert!(l.is_device(), "{l:?} is not device memory");
        self.bufs[l.buf as usize].slice(l.range()).unwrap()
    }

    /// The arguments of `k`'s launch: device memory by region, mapped and managed memory whole.
    pub fn kargs(&mut self, k: &KLaunch) -> KernelArgs {
        let mut a = KernelArgs::new();
        for &(l, write) in &k.bufs {
            a = match (l.is_device(), write) {
                (true, true) => a.write(&self.dbuf(l)),
                (true, false) => a.read(&self.dbuf(l)),
                (false, true) => a.write_mapped(self.host_mut(l.buf)),
                (false, false) => a.read_mapped(self.host(l.buf)),
            };
        }
        for &s in &k.scalars {
            a = match s {
                Scalar::F32(v) => a.scalar(v),
                Scalar::U32(v) => a.scalar(v),
                Scalar::U64(v) => a.scalar(v),
            };
        }
        a
    }

    /// Copy `src` into `dst` on stream `s` (any two regions of this device).
    pub fn copy(&mut self, s: &Stream, dst: Loc, src: Loc) -> cueflow::Result<()> {
        match (dst.is_device(), src.is_device()) {
            (true, true) => s.copy_d2d(&self.dbuf(dst), &self.dbuf(src)),
            (true, false) => s.copy_h2d(&self.dbuf(dst), self.host(src.buf).range(src.range())?),
            (false, true) => {
                let from = self.dbuf(src);
                s.copy_d2h(self.host_mut(dst.buf).range_mut(dst.range())?, &from)
            }
            (false, false) => {
                let (i, j) = ((dst.buf - DEV_BUFS) as usize, (src.buf - DEV_BUFS) as usize);
                let (to, from) = two_mut(&mut self.host, i, j);
                let from = from.get().range(src.range())?;
                s.copy_h2h(to.get_mut().range_mut(dst.range())?, from)
            }
        }
    }

    /// Copy device memory `src` (a temporary) into `dst` on `s`.
    pub fn copy_from(
        &mut self,
        s: &Stream,
        dst: Loc,
        src: &DeviceBuffer<f32>,
    ) -> cueflow::Result<()> {
        if dst.is_device() {
            s.copy_d2d(&self.dbuf(dst), src)
        } else {
            s.copy_d2h(self.host_mut(dst.buf).range_mut(dst.range())?, src)
        }
    }

    /// Enqueue `w` on `s`: `Ok(false)` when refused as a race. A pageable read is checked
    /// against `model` here.
    pub fn enqueue(
        &mut self,
        d: u8,
        s: &Stream,
        w: &Work,
        model: &Model,
    ) -> Result<bool, TestCaseError> {
        if let Some(k) = launch_of(w) {
            let args = self.kargs(&k);
            return Ok(accepted(s.launch(k.kernel, k.cfg, args))?);
        }
        Ok(match *w {
            Work::Memset { dst, byte } => accepted(s.memset(&self.dbuf(dst), byte))?,
            Work::Copy { dst, src } => accepted(self.copy(s, dst, src))?,
            Work::HostFn => {
                let n = self.host_fns.clone();
                accepted(s.host_fn(move || {
                    n.fetch_add(1, Ordering::SeqCst);
                }))?
            }
            Work::HostTask { src, dst, k } => accepted(
                s.host_task("fuzz task")
                    .reads(self.host(src.buf).range(src.range())?)
                    .writes(self.host(dst.buf).range(dst.range())?)
                    .run(move |io| host_task(io, k)),
            )?,
            Work::Temp { pool, v, dst } => {
                let t = match pool {
                    None => s.alloc_async::<f32>(dst.len())?,
                    Some(p) => s.alloc_from_pool::<f32>(&self.pools[p as usize], dst.len())?,
                };
                kernels::fill(s, &t, v as f32)?;
                let copied = accepted(self.copy_from(s, dst, &t))?;
                s.free_async(t)?;
                copied
            }
            Work::PageableWrite { dst, v } => {
                accepted(s.write_pageable(&self.dbuf(dst), &vec![v as f32; dst.len()]))?
            }
            Work::PageableRead { src } => {
                let mut got = vec![0.0f32; src.len()];
                let ok = accepted(s.read_pageable(&mut got, &self.dbuf(src)))?;
                if ok {
                    same(
                        &format!("read_pageable of {src:?}"),
                        &got,
                        &model.get(d, src),
                    )?;
                }
                ok
            }
            _ => unreachable!("{w:?} is a kernel"),
        })
    }
}

/// The body of a host task (HF3): `dst[i] = src[i] * 0.5 + k`.
pub fn host_task(io: cueflow::HostIo<'_>, k: i8) {
    let src = io.read::<f32>(0);
    for (y, x) in io.write::<f32>(1).iter_mut().zip(src) {
        *y = host_task_value(*x, k);
    }
}

/// Stream `i` of a device (see [`STREAMS`]).
pub fn new_stream(dev: &Device, i: u8) -> cueflow::Result<Stream> {
    let b = Stream::builder(dev).name(format!("fuzz {i}"));
    match i {
        0 => b.build(),
        LEGACY => Ok(Stream::legacy(dev)),
        _ => b.non_blocking().build(),
    }
}

/// Set by the differential mode: any NaN equals any NaN (a GPU's NaNs carry other bits than
/// the CPU's; everything else must match bit for bit).
pub static ANY_NAN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Two values with the same bits (or two NaNs, under [`ANY_NAN`]).
pub fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan() && ANY_NAN.load(Ordering::Relaxed))
}

/// Fail unless `got` and `want` have the same bits.
pub fn same(what: &str, got: &[f32], want: &[f32]) -> Result<(), TestCaseError> {
    let eq = got.len() == want.len() && got.iter().zip(want).all(|(g, w)| same_bits(*g, *w));
    prop_assert!(eq, "{what}: got {got:?}, want {want:?}");
    Ok(())
}

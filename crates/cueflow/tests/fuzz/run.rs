//! Running a program on real devices (the host backend, or CUDA in the differential mode):
//! the objects of each device, the stream steps, and the final read-out. Graphs are in
//! `graphs.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cueflow::{
    kernels, AttachMode, Communicator, Device, DeviceBuffer, Error, Event, KernelArgs,
    ManagedBuffer, MemLocation, MemPool, PinnedBuffer, PinnedFlags, RegisteredBuffer, SanitizeMode,
    Stream,
};
use proptest::prelude::*;

use crate::kernels::{launch_of, KLaunch, Scalar};
use crate::known::Known;
use crate::model::{host_task_value, DevModel, Model};
use crate::program::{
    Coll, Loc, ManagedOp, PoolOp, Program, Reduce, Step, Work, BUFFERS, DEV_BUFS, EVENTS, LEGACY,
    MANAGED, N, POOLS, REGISTERED, STREAMS,
};

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
    reg_flags: PinnedFlags,
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

/// A program's objects on its devices, and how it is ordered.
pub struct Run {
    pub mode: Mode,
    pub known: Known,
    pub devs: Vec<DevRun>,
    comm: Option<Communicator>,
    /// Per device, the stream of its latest collective and an event after it: a rank's
    /// collectives run in the order they were made only if its streams are ordered so (NCCL
    /// asks the program to; the host backend faults on a different order).
    coll_last: Vec<Option<(u8, Event)>>,
    /// `Ordered`: the event recorded after the latest operation, with its device and stream
    /// (stream `u8::MAX` once that stream was replaced).
    last: Option<(u8, u8, Event)>,
}

impl DevRun {
    fn new(
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
        let pinned = portable(two && !known.has(12));
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

impl Run {
    /// The program's objects on `devices` (one per device of the program); the created pools
    /// are `pools` (per device) when given, else new ones.
    pub fn new(
        devices: &[Device],
        pools: Option<&[Vec<MemPool>]>,
        p: &Program,
        mode: Mode,
        known: Known,
    ) -> cueflow::Result<Run> {
        let devs = devices[..p.devices as usize]
            .iter()
            .enumerate()
            .map(|(i, d)| DevRun::new(d, pools.map(|p| &p[i][..]), p, mode, known))
            .collect::<cueflow::Result<Vec<_>>>()?;
        let comm = if p.devices > 1 {
            Some(Communicator::new(&devices[..p.devices as usize])?)
        } else {
            None
        };
        Ok(Run {
            mode,
            known,
            devs,
            comm,
            coll_last: vec![None; p.devices as usize],
            last: None,
        })
    }

    pub fn stream(&self, d: u8, s: u8) -> Stream {
        self.devs[d as usize].streams[s as usize].clone()
    }

    /// `Ordered`: order the next operation on `(d, s)` after the latest one.
    pub fn before(&self, d: u8, s: u8) -> cueflow::Result<()> {
        match &self.last {
            Some((ld, ls, e)) if self.mode == Mode::Ordered && (*ld, *ls) != (d, s) => {
                self.stream(d, s).wait_event(e)
            }
            _ => Ok(()),
        }
    }

    pub fn after(&mut self, d: u8, s: u8) -> cueflow::Result<()> {
        if self.mode == Mode::Ordered {
            self.last = Some((d, s, self.stream(d, s).record()?));
        }
        Ok(())
    }

    /// In the random ordering a refusal is allowed; elsewhere it is a failure.
    pub fn expect_accepted(
        &self,
        ok: bool,
        what: &dyn std::fmt::Debug,
    ) -> Result<(), TestCaseError> {
        let report = || {
            self.devs
                .iter()
                .filter_map(|d| d.dev.sanitizer_reports().last().map(|r| r.to_string()))
                .collect::<Vec<_>>()
                .join("\n")
        };
        prop_assert!(
            ok || self.mode == Mode::Random,
            "refused as a race: {what:?}: {}",
            report()
        );
        Ok(())
    }

    /// Step `step`, applied to `model` as far as the devices accepted it.
    pub fn step(&mut self, step: &Step, model: &mut Model) -> Result<(), TestCaseError> {
        match step {
            &Step::Do { d, s, ref w } => {
                self.before(d, s)?;
                let stream = self.stream(d, s);
                let ok = self.devs[d as usize].enqueue(d, &stream, w, model)?;
                self.after(d, s)?;
                self.expect_accepted(ok, step)?;
                if ok {
                    model.apply(d, w);
                }
            }
            &Step::Record { d, s, e } => self
                .stream(d, s)
                .record_event(&self.devs[d as usize].events[e as usize])?,
            &Step::Wait { d, s, ed, e } => self
                .stream(d, s)
                .wait_event(&self.devs[ed as usize].events[e as usize])?,
            &Step::SyncStream { d, s } => self.stream(d, s).synchronize()?,
            &Step::SyncEvent { d, e } => self.devs[d as usize].events[e as usize].synchronize()?,
            &Step::SyncDevice { d } => self.devs[d as usize].dev.synchronize()?,
            &Step::HostWrite { d, dst, v } => {
                let dev = &mut self.devs[d as usize];
                dev.host_mut(dst.buf)
                    .write_range(dst.range())?
                    .fill(v as f32);
                model.fill(d, dst, v as f32);
            }
            &Step::HostRead { d, src } => {
                let got = self.devs[d as usize]
                    .host(src.buf)
                    .read_range(src.range())?
                    .to_vec();
                same(&format!("host read of {src:?}"), &got, &model.get(d, src))?;
            }
            Step::Capture {
                d,
                s,
                body,
                launches,
            } => self.capture(*d, *s, body, *launches, model)?,
            Step::Build {
                d,
                s,
                graph,
                launches,
            } => self.build(*d, *s, graph, *launches, model)?,
            Step::HandOut { d, s, h } => self.hand_out(*d, *s, h, model)?,
            &Step::Replace { d, s } => {
                if s != LEGACY {
                    let dev = &mut self.devs[d as usize];
                    dev.streams[s as usize] = new_stream(&dev.dev, s)?;
                    // The replacement must still wait for what the dropped one ran.
                    if let Some((ld, ls, _)) = &mut self.last {
                        if (*ld, *ls) == (d, s) {
                            *ls = u8::MAX;
                        }
                    }
                    if let Some(Some((cs, _))) = self.coll_last.get_mut(d as usize) {
                        if *cs == s {
                            *cs = u8::MAX;
                        }
                    }
                }
            }
            &Step::Pool { d, p, op } => {
                let pool = &self.devs[d as usize].pools[p as usize];
                match op {
                    PoolOp::Threshold(t) => pool.set_release_threshold(t)?,
                    PoolOp::Trim(keep) => pool.trim_to(keep)?,
                }
            }
            &Step::Managed { d, s, op } => self.managed(d, s, op)?,
            &Step::Reregister { d } => self.reregister(d)?,
            &Step::Collective { s, c, send, recv } => self.collective(s, c, send, recv, model)?,
            &Step::Cross { d, s, dst, src } => {
                self.before(d, s)?;
                let ok = accepted(self.cross(d, s, dst, src))?;
                self.after(d, s)?;
                self.expect_accepted(ok, step)?;
                if ok {
                    let v = model.get(src.0, src.1);
                    model.set(dst.0, dst.1, &v);
                }
            }
        }
        Ok(())
    }

    fn managed(&mut self, d: u8, s: u8, op: ManagedOp) -> Result<(), TestCaseError> {
        self.before(d, s)?;
        let stream = self.stream(d, s);
        let dev = &self.devs[d as usize];
        let HostBuf::Managed(m) = &dev.host[(MANAGED - DEV_BUFS) as usize] else {
            unreachable!()
        };
        let r = match op {
            ManagedOp::PrefetchHost => stream.prefetch(m, .., MemLocation::Host),
            ManagedOp::PrefetchDevice => stream.prefetch(m, .., MemLocation::Device),
            ManagedOp::AttachGlobal => stream.attach_managed(m, AttachMode::Global),
            ManagedOp::AttachHost => stream.attach_managed(m, AttachMode::Host),
            ManagedOp::AttachSingle => stream.attach_managed(m, AttachMode::Single),
        };
        let ok = match r {
            // A device without concurrent managed access refuses prefetches, as CUDA does.
            Err(Error::Unsupported(_)) => true,
            r => accepted(r)?,
        };
        self.after(d, s)?;
        self.expect_accepted(ok, &op)
    }

    /// End the registration of the registered buffer (waiting for its work) and register a
    /// copy of its contents.
    fn reregister(&mut self, d: u8) -> Result<(), TestCaseError> {
        let dev = &mut self.devs[d as usize];
        let i = (REGISTERED - DEV_BUFS) as usize;
        let contents = dev.host[i].get().read()?.to_vec();
        let fresh = RegisteredBuffer::register(&dev.dev, contents, dev.reg_flags)?;
        let HostBuf::Registered(old) =
            std::mem::replace(&mut dev.host[i], HostBuf::Registered(fresh))
        else {
            unreachable!()
        };
        match old.unregister() {
            // A graph still holding it keeps the registration until it is dropped (HM1).
            Ok(()) | Err(Error::NotPermitted { rule: "HM1", .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn collective(
        &mut self,
        s: [u8; 2],
        c: Coll,
        send: Loc,
        recv: Loc,
        model: &mut Model,
    ) -> Result<(), TestCaseError> {
        for (d, &s) in s.iter().enumerate() {
            self.before(d as u8, s)?;
        }
        let streams = [self.stream(0, s[0]), self.stream(1, s[1])];
        for (d, stream) in streams.iter().enumerate() {
            if let Some((prev, e)) = &self.coll_last[d] {
                if *prev != s[d] {
                    stream.wait_event(e)?;
                }
            }
        }
        let sends = [self.devs[0].dbuf(send), self.devs[1].dbuf(send)];
        let recvs = [self.devs[0].dbuf(recv), self.devs[1].dbuf(recv)];
        let parts: Vec<_> = (0..2)
            .map(|r| (&streams[r], &sends[r], &recvs[r]))
            .collect();
        let comm = self.comm.as_ref().expect("two devices");
        let op = |r: Reduce| match r {
            Reduce::Sum => cueflow::ReduceOp::Sum,
            Reduce::Prod => cueflow::ReduceOp::Prod,
        };
        let ok = accepted(match c {
            Coll::AllReduce(r) => comm.all_reduce(&parts, op(r)),
            Coll::Broadcast(root) => comm.broadcast(&parts, root as usize),
            Coll::Reduce(r, root) => comm.reduce(&parts, op(r), root as usize),
            Coll::AllGather => comm.all_gather(&parts),
            Coll::ReduceScatter(r) => comm.reduce_scatter(&parts, op(r)),
        })?;
        if self.mode == Mode::Ordered {
            // Device 1's stream follows both parts.
            streams[1].wait_event(&streams[0].record()?)?;
        }
        self.after(1, s[1])?;
        self.expect_accepted(ok, &c)?;
        if ok {
            for (d, stream) in streams.iter().enumerate() {
                self.coll_last[d] = Some((s[d], stream.record()?));
            }
            model.collective(c, send, recv);
        }
        Ok(())
    }

    /// A copy between regions of any two devices on stream `s` of device `d`.
    fn cross(&mut self, d: u8, s: u8, dst: (u8, Loc), src: (u8, Loc)) -> cueflow::Result<()> {
        let stream = self.stream(d, s);
        let ((dd, dl), (sd, sl)) = (dst, src);
        match (dl.is_device(), sl.is_device()) {
            (true, true) => {
                let (to, from) = (
                    self.devs[dd as usize].dbuf(dl),
                    self.devs[sd as usize].dbuf(sl),
                );
                if dd == d && sd == d {
                    stream.copy_d2d(&to, &from)
                } else {
                    stream.copy_peer(&to, &from)
                }
            }
            (true, false) => {
                let to = self.devs[dd as usize].dbuf(dl);
                stream.copy_h2d(&to, self.devs[sd as usize].host(sl.buf).range(sl.range())?)
            }
            (false, true) => {
                let from = self.devs[sd as usize].dbuf(sl);
                let to = self.devs[dd as usize].host_mut(dl.buf);
                stream.copy_d2h(to.range_mut(dl.range())?, &from)
            }
            (false, false) if dd == sd => {
                let (i, j) = ((dl.buf - DEV_BUFS) as usize, (sl.buf - DEV_BUFS) as usize);
                let (to, from) = two_mut(&mut self.devs[dd as usize].host, i, j);
                stream.copy_h2h(
                    to.get_mut().range_mut(dl.range())?,
                    from.get().range(sl.range())?,
                )
            }
            (false, false) => {
                let (to, from) = two_mut(&mut self.devs, dd as usize, sd as usize);
                let from = from.host(sl.buf).range(sl.range())?;
                stream.copy_h2h(to.host_mut(dl.buf).range_mut(dl.range())?, from)
            }
        }
    }

    /// Synchronize, and read every buffer and counter of every device.
    pub fn read_out(&self) -> Result<Model, TestCaseError> {
        let mut out = Model { devs: Vec::new() };
        // Every device first: another device's stream may have written this one's memory.
        for dev in &self.devs {
            dev.dev.synchronize()?;
        }
        for dev in &self.devs {
            let reader = Stream::new(&dev.dev)?;
            let mut bufs = Vec::with_capacity(BUFFERS);
            for b in &dev.bufs {
                let mut v = vec![0.0f32; N];
                reader.read_pageable(&mut v, b)?;
                bufs.push(v);
            }
            for h in &dev.host {
                bufs.push(h.get().read()?.to_vec());
            }
            out.devs.push(DevModel {
                bufs,
                host_fns: dev.host_fns.load(Ordering::SeqCst),
            });
        }
        Ok(out)
    }

    /// What must hold at the end besides the bytes: no report in the orderings that order
    /// everything, and every created pool has nothing handed out.
    pub fn check_end(&self) -> Result<(), TestCaseError> {
        for dev in &self.devs {
            if self.mode != Mode::Random {
                let reports = dev.dev.sanitizer_reports();
                prop_assert!(reports.is_empty(), "{}", reports[0]);
            }
            for (p, pool) in dev.pools.iter().enumerate() {
                let st = pool.stats()?;
                prop_assert_eq!(
                    st.used,
                    0,
                    "created pool {} still hands out memory: {:?}",
                    p,
                    st
                );
                prop_assert!(st.reserved_high >= st.reserved && st.used_high <= st.reserved_high);
            }
        }
        Ok(())
    }
}

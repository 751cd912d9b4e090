//! A program's run: the steps of a program on its devices in one of the three orderings,
//! the final read-out, and what must hold at the end (`execute`). The per-device objects and
//! work are in `run.rs`, graphs in `graphs.rs`.

use std::sync::atomic::Ordering;

use cueflow::{
    AttachMode, Communicator, Device, Error, Event, MemLocation, MemPool, PinnedBuffer,
    RegisteredBuffer, Stream,
};
use proptest::prelude::*;

use crate::known::Known;
use crate::model::{DevModel, Model};
use crate::program::{
    Coll, Loc, ManagedOp, PoolOp, Program, Reduce, Step, BUFFERS, DEV_BUFS, LEGACY, MANAGED, N,
    POOLS, REGISTERED,
};
use crate::run::{accepted, new_stream, same, two_mut, DevRun, HostBuf, Mode};
use crate::stats;

/// Objects that a run of many programs on the same devices shares (the differential mode):
/// each device's created pools, and the communicator of the two devices.
#[derive(Default)]
pub struct Shared {
    pub pools: Option<Vec<Vec<MemPool>>>,
    pub comm: Option<Communicator>,
}

impl Shared {
    /// Pools (unless `fresh_pools`) and a communicator (for two or more) on `devices`.
    #[allow(dead_code)] // Used by the differential mode (tests/differential_fuzz.rs).
    pub fn on(devices: &[Device], fresh_pools: bool) -> cueflow::Result<Shared> {
        let pools = if fresh_pools {
            None
        } else {
            Some(
                devices
                    .iter()
                    .map(|d| (0..POOLS).map(|_| d.create_pool()).collect())
                    .collect::<cueflow::Result<Vec<Vec<_>>>>()?,
            )
        };
        let comm = if devices.len() > 1 {
            Some(Communicator::new(devices)?)
        } else {
            None
        };
        Ok(Shared { pools, comm })
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

impl Run {
    /// The program's objects on `devices` (one per device of the program), with the shared
    /// objects of `shared` where it has them.
    pub fn new(
        devices: &[Device],
        shared: &Shared,
        p: &Program,
        mode: Mode,
        known: Known,
    ) -> cueflow::Result<Run> {
        let devices = &devices[..p.devices as usize];
        for d in devices {
            // Devices that run many programs: each starts with nothing reported.
            d.take_sanitizer_reports();
            d.take_sanitizer_lints();
        }
        let devs = devices
            .iter()
            .enumerate()
            .map(|(i, d)| DevRun::new(d, shared.pools.as_ref().map(|p| &p[i][..]), p, mode, known))
            .collect::<cueflow::Result<Vec<_>>>()?;
        let comm = match (&shared.comm, p.devices) {
            (_, 1) => None,
            (Some(c), _) => Some(c.clone()),
            (None, _) => Some(Communicator::new(devices)?),
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
        if !ok {
            stats::count(|| format!("refused as a race: {}", stats::name(what)));
            if std::env::var_os("FUZZ_TRACE").is_some() {
                eprintln!("  refused as a race: {what:?}");
            }
        }
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
        stats::count(|| format!("step {}", stats::name(step)));
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
            &Step::Join { d, s, from } => self.stream(d, s).wait_stream(&self.stream(d, from))?,
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
        // The old registration ends first: a GPU registers whole pages, and two small
        // allocations may share one.
        let stand_in = HostBuf::Pinned(PinnedBuffer::new(&dev.dev, 1)?);
        let HostBuf::Registered(old) = std::mem::replace(&mut dev.host[i], stand_in) else {
            unreachable!()
        };
        match old.unregister() {
            // A graph still holding it keeps the registration until it is dropped (HM1).
            Ok(()) | Err(Error::NotPermitted { rule: "HM1", .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let fresh = RegisteredBuffer::register(&dev.dev, contents, dev.reg_flags)?;
        dev.host[i] = HostBuf::Registered(fresh);
        Ok(())
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
        let mut out = Model::of(Vec::new());
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

/// `p` with the built graphs' nodes of the kinds `FUZZ_EMPTY` names (`record`, `wait`,
/// `cond`, `while`, `child`, `mem`, `op`, comma-separated) turned into empty nodes, the edges
/// kept (and with `cond`, captured conditional nodes left out): to narrow a failure down to a kind of node by hand. `None` when it is unset.
fn emptied_nodes(p: &Program) -> Option<Program> {
    use crate::program::{CondKind, NodeKind};
    let kinds = std::env::var("FUZZ_EMPTY").ok()?;
    let names: Vec<&str> = kinds.split(',').collect();
    let mut p = p.clone();
    for step in &mut p.steps {
        if let Step::Capture { body, .. } = step {
            // A captured conditional node has no empty stand-in: it is left out.
            if names.contains(&"cond") {
                body.retain(|w| !matches!(w, crate::program::CapWork::Cond(_)));
            }
            continue;
        }
        let Step::Build { graph, .. } = step else {
            continue;
        };
        for node in &mut graph.nodes {
            let name = match &node.kind {
                NodeKind::Record(_) => "record",
                NodeKind::WaitEvent(_) => "wait",
                NodeKind::Cond(c) if c.kind == CondKind::While => "while",
                NodeKind::Cond(_) => "cond",
                NodeKind::Child { .. } => "child",
                NodeKind::Mem { .. } => "mem",
                NodeKind::Op(_) => "op",
                NodeKind::Empty => continue,
            };
            if names.contains(&name) || (name == "while" && names.contains(&"cond")) {
                node.kind = NodeKind::Empty;
            }
        }
    }
    Some(p)
}

/// Run program `p` ordered by `mode` on `devices` (with `shared`'s objects), check it
/// against the sequential model as it goes and at the end, and return what the devices hold
/// at the end. `FUZZ_TRACE` prints each step; `FUZZ_SKIP=3,5` leaves those steps out (to
/// narrow a failure down by hand).
pub fn execute(
    devices: &[Device],
    shared: &Shared,
    p: &Program,
    mode: Mode,
    known: Known,
) -> Result<Model, TestCaseError> {
    let emptied = emptied_nodes(p);
    let p = emptied.as_ref().unwrap_or(p);
    let mut r = Run::new(devices, shared, p, mode, known)?;
    let mut model = Model::new(p.devices as usize);
    let trace = std::env::var_os("FUZZ_TRACE").is_some();
    let skip: Vec<usize> = std::env::var("FUZZ_SKIP")
        .unwrap_or_default()
        .split(',')
        .filter_map(|x| x.parse().ok())
        .collect();
    for (i, s) in p.steps.iter().enumerate() {
        if skip.contains(&i) {
            continue;
        }
        if trace {
            eprintln!("step {i}: {s:?}");
        }
        r.step(s, &mut model)?;
    }
    let got = r.read_out()?;
    for (d, (g, w)) in got.devs.iter().zip(&model.devs).enumerate() {
        for (b, (gb, wb)) in g.bufs.iter().zip(&w.bufs).enumerate() {
            same(&format!("device {d} buffer {b}"), gb, wb)?;
        }
        prop_assert_eq!(g.host_fns, w.host_fns, "device {} host functions", d);
    }
    r.check_end()?;
    stats::program_done();
    Ok(got)
}

//! Graphs of the fuzzer's programs: captures (with host tasks, graph memory and conditional
//! nodes), graphs built node by node with every node kind (GR8, GR9), and graphs that hand
//! out memory (GR10).
//!
//! A built graph is race-free by construction: every node depends on each earlier node whose
//! accesses conflict with its own (besides random extra edges), so every order the graph
//! allows gives the model's bytes. A `racy` graph (random ordering only) leaves out one such
//! edge; if nothing else orders that pair, instantiation must be refused as a race (AC4).
//!
//! Event nodes are placed where CUDA's scope (a record node covers its ancestors, a wait node
//! orders its dependents) and a launch-wide one agree — record nodes after every other node,
//! wait nodes before — unless known issue 8 is exercised.

use std::collections::BTreeSet;

use cueflow::{
    kernels, CaptureMode, ConditionHandle, ConditionalKind, DeviceBuffer, Error, Graph,
    GraphNodeId, InstantiateFlags, KernelArgs, LaunchConfig, Stream,
};
use proptest::prelude::*;

use crate::exec::Run;
use crate::kernels::{launch_of, COND_CONST, COND_FROM, WHILE_STEP};
use crate::model::Model;
use crate::program::{
    Acc, BodyItem, CapWork, CondKind, CondSet, CondSpec, FreeBy, GraphSpec, HandOut, NodeKind,
    Work, LEGACY,
};
use crate::run::{accepted, host_task, same, DevRun, Mode};
use crate::stats;

fn one() -> LaunchConfig {
    LaunchConfig::new(1, 1)
}

/// While nodes in `c` (nested ones included): each needs an iteration counter.
fn whiles(c: &CondSpec) -> usize {
    let nested: usize = c
        .bodies
        .iter()
        .flatten()
        .map(|i| match i {
            BodyItem::Cond(inner) => whiles(inner),
            BodyItem::W(_) => 0,
        })
        .sum();
    nested + (c.kind == CondKind::While) as usize
}

fn cond_kind(k: CondKind) -> ConditionalKind {
    match k {
        CondKind::If => ConditionalKind::If,
        CondKind::IfElse => ConditionalKind::IfElse,
        CondKind::While => ConditionalKind::While,
        CondKind::Switch => ConditionalKind::Switch,
    }
}

impl DevRun {
    /// Iteration counters for `n` while nodes, made before any capture begins.
    fn counters(&self, n: usize) -> cueflow::Result<Vec<DeviceBuffer<u32>>> {
        (0..n).map(|_| DeviceBuffer::new(&self.dev, 1)).collect()
    }

    /// The arguments of the kernel that sets `h` from `set` (none for the default).
    fn set_args(
        &self,
        c: &CondSpec,
        h: &ConditionHandle,
    ) -> Option<(&'static cueflow::Kernel, KernelArgs)> {
        match c.set {
            CondSet::Default => None,
            CondSet::Const(v) => {
                Some((&COND_CONST, KernelArgs::new().condition(h).scalar(v as u32)))
            }
            CondSet::From(l) => Some((
                &COND_FROM,
                KernelArgs::new()
                    .read(&self.dbuf(l))
                    .condition(h)
                    .scalar((c.kind == CondKind::Switch) as u32),
            )),
        }
    }

    /// `w` as a node of `g` after `deps`.
    pub fn add_work(
        &mut self,
        g: &mut Graph,
        deps: &[GraphNodeId],
        w: &Work,
    ) -> cueflow::Result<GraphNodeId> {
        if let Some(k) = launch_of(w) {
            let args = self.kargs(&k);
            return g.add_kernel(deps, k.kernel, k.cfg, args);
        }
        match *w {
            Work::Memset { dst, byte } => g.add_memset(deps, &self.dbuf(dst), byte),
            Work::Copy { dst, src } => match (dst.is_device(), src.is_device()) {
                (true, true) => g.add_copy_d2d(deps, &self.dbuf(dst), &self.dbuf(src)),
                (true, false) => g.add_copy_h2d(
                    deps,
                    &self.dbuf(dst),
                    self.host(src.buf).range(src.range())?,
                ),
                (false, true) => {
                    let from = self.dbuf(src);
                    g.add_copy_d2h(deps, self.host_mut(dst.buf).range_mut(dst.range())?, &from)
                }
                (false, false) => {
                    let (i, j) = ((dst.buf - 3) as usize, (src.buf - 3) as usize);
                    let (to, from) = crate::run::two_mut(&mut self.host, i, j);
                    let from = from.get().range(src.range())?;
                    g.add_copy_h2h(deps, to.get_mut().range_mut(dst.range())?, from)
                }
            },
            Work::HostFn => {
                let n = self.host_fns.clone();
                g.add_host(deps, move || {
                    n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                })
            }
            Work::HostTask { src, dst, k } => g
                .add_host_task(deps, "fuzz graph task")
                .reads(self.host(src.buf).range(src.range())?)
                .writes(self.host(dst.buf).range(dst.range())?)
                .run(move |io| host_task(io, k)),
            _ => unreachable!("{w:?} is not a graph node"),
        }
    }

    /// A conditional node and the nodes that set its condition, after `deps`; returns the
    /// conditional node.
    fn add_cond(
        &mut self,
        g: &mut Graph,
        deps: &[GraphNodeId],
        c: &CondSpec,
        counters: &mut Vec<DeviceBuffer<u32>>,
    ) -> cueflow::Result<GraphNodeId> {
        let h = ConditionHandle::new(c.default as u32, c.reset);
        let mut pre = deps.to_vec();
        let counter = (c.kind == CondKind::While).then(|| counters.pop().expect("a counter"));
        if let Some(counter) = &counter {
            pre.push(g.add_memset(deps, counter, 0)?);
        }
        if let Some((k, args)) = self.set_args(c, &h) {
            pre.push(g.add_kernel(deps, k, one(), args)?);
        }
        let bodies = self.bodies(c, &h, counter.as_ref(), counters)?;
        let refs: Vec<&Graph> = bodies.iter().collect();
        match c.kind {
            CondKind::If => g.add_if(&pre, &h, refs[0]),
            CondKind::IfElse => g.add_if_else(&pre, &h, refs[0], refs[1]),
            CondKind::While => g.add_while(&pre, &h, refs[0]),
            CondKind::Switch => g.add_switch(&pre, &h, &refs),
        }
    }

    /// The body graphs of `c`: chains of their items, a while body led by its counting step.
    fn bodies(
        &mut self,
        c: &CondSpec,
        h: &ConditionHandle,
        counter: Option<&DeviceBuffer<u32>>,
        counters: &mut Vec<DeviceBuffer<u32>>,
    ) -> cueflow::Result<Vec<Graph>> {
        let mut out = Vec::new();
        for items in &c.bodies {
            let mut g = Graph::new(&self.dev);
            let mut prev = match counter {
                Some(count) => {
                    let args = KernelArgs::new()
                        .write(count)
                        .condition(h)
                        .scalar(c.limit as u32);
                    Some(g.add_kernel(&[], &WHILE_STEP, one(), args)?)
                }
                None => None,
            };
            for item in items {
                let deps: Vec<GraphNodeId> = prev.into_iter().collect();
                prev = Some(match item {
                    BodyItem::W(w) => self.add_work(&mut g, &deps, w)?,
                    BodyItem::Cond(inner) => self.add_cond(&mut g, &deps, inner, counters)?,
                });
            }
            out.push(g);
        }
        Ok(out)
    }

    /// Capture `w` on `s` (a host task runs at every launch: `run_fn`).
    fn capture_work(
        &mut self,
        d: u8,
        s: &Stream,
        w: &Work,
        model: &Model,
    ) -> Result<bool, TestCaseError> {
        match *w {
            Work::HostTask { src, dst, k } => Ok(accepted(
                s.host_task("fuzz captured task")
                    .reads(self.host(src.buf).range(src.range())?)
                    .writes(self.host(dst.buf).range(dst.range())?)
                    .run_fn(move |io| host_task(io, k)),
            )?),
            _ => self.enqueue(d, s, w, model),
        }
    }

    /// A conditional node added to the capture on `s`, after the kernels that set it.
    fn capture_cond(
        &mut self,
        s: &Stream,
        c: &CondSpec,
        counters: &mut Vec<DeviceBuffer<u32>>,
    ) -> cueflow::Result<()> {
        let h = ConditionHandle::new(c.default as u32, c.reset);
        let counter = (c.kind == CondKind::While).then(|| counters.pop().expect("a counter"));
        if let Some(counter) = &counter {
            s.memset(counter, 0)?;
        }
        if let Some((k, args)) = self.set_args(c, &h) {
            s.launch(k, one(), args)?;
        }
        let bodies = self.bodies(c, &h, counter.as_ref(), counters)?;
        let refs: Vec<&Graph> = bodies.iter().collect();
        s.capture_conditional(cond_kind(c.kind), &h, &refs)?;
        Ok(())
    }

    /// Capture `works` on a fresh side stream: a graph of one node per work, in a chain.
    fn captured(&mut self, d: u8, works: &[Work], model: &Model) -> Result<Graph, TestCaseError> {
        let side = Stream::builder(&self.dev)
            .non_blocking()
            .name("fuzz side capture")
            .build()?;
        side.begin_capture(CaptureMode::Global)?;
        for w in works {
            let ok = self.capture_work(d, &side, w, model)?;
            prop_assert!(ok, "a captured call raced: {w:?}");
        }
        Ok(side.end_capture()?)
    }
}

/// Whether spec item `i` (prefix works first, then nodes) is an event node.
fn is_event_node(spec: &GraphSpec, i: usize) -> bool {
    i >= spec.prefix.len()
        && matches!(
            spec.nodes[i - spec.prefix.len()].kind,
            NodeKind::Record(_) | NodeKind::WaitEvent(_)
        )
}

/// The dependencies of every spec item (prefix works first, then nodes): the captured prefix
/// is a chain; each node depends on its extra dependencies and on every earlier item whose
/// accesses conflict with its own — except one such pair when `drop_one` (returned). Event
/// nodes get none here unless `exact_events`: the builder places them.
fn plan(
    spec: &GraphSpec,
    drop_one: bool,
    exact_events: bool,
) -> (Vec<BTreeSet<usize>>, Option<(usize, usize)>) {
    let first = spec.prefix.len();
    let count = first + spec.nodes.len();
    let mut accs: Vec<Vec<Acc>> = spec.prefix.iter().map(Work::accesses).collect();
    accs.extend(spec.nodes.iter().map(|n| n.kind.accesses()));
    let mut deps: Vec<BTreeSet<usize>> = (0..count)
        .map(|i| (i > 0 && i < first).then(|| i - 1).into_iter().collect())
        .collect();
    let mut dropped = None;
    for k in first..count {
        if !exact_events && is_event_node(spec, k) {
            continue;
        }
        let extra: BTreeSet<usize> = spec.nodes[k - first]
            .deps
            .iter()
            .map(|&x| x as usize % k.max(1))
            .filter(|&j| j < k && (exact_events || !is_event_node(spec, j)))
            .collect();
        deps[k].extend(extra.iter().copied());
        for j in 0..k {
            if accs[j]
                .iter()
                .any(|a| accs[k].iter().any(|b| a.conflicts(*b)))
            {
                if drop_one && dropped.is_none() && !extra.contains(&j) {
                    dropped = Some((j, k));
                } else {
                    deps[k].insert(j);
                }
            }
        }
    }
    (deps, dropped)
}

/// Whether spec node `to` is reachable from `from` along `deps` (spec-level edges).
fn reaches(deps: &[BTreeSet<usize>], from: usize, to: usize) -> bool {
    let mut todo = vec![to];
    let mut seen = vec![false; deps.len()];
    while let Some(n) = todo.pop() {
        if n == from {
            return true;
        }
        for &p in &deps[n] {
            if !std::mem::replace(&mut seen[p], true) {
                todo.push(p);
            }
        }
    }
    false
}

impl Run {
    /// Capture `body` on stream `s`, instantiate, and launch `launches` times there.
    pub fn capture(
        &mut self,
        d: u8,
        s: u8,
        body: &[CapWork],
        launches: u8,
        model: &mut Model,
    ) -> Result<(), TestCaseError> {
        // The legacy stream cannot be captured (GR1).
        let s = if s == LEGACY { 0 } else { s };
        let n: usize = body
            .iter()
            .map(|c| {
                if let CapWork::Cond(c) = c {
                    whiles(c)
                } else {
                    0
                }
            })
            .sum();
        let dev = &mut self.devs[d as usize];
        let mut counters = dev.counters(n)?;
        self.before(d, s)?;
        let stream = self.stream(d, s);
        let dev = &mut self.devs[d as usize];
        stream.begin_capture(CaptureMode::Global)?;
        for c in body {
            match c {
                CapWork::W(w) => {
                    let ok = dev.capture_work(d, &stream, w, model)?;
                    prop_assert!(ok, "a captured call raced: {w:?}");
                }
                CapWork::Cond(c) => dev.capture_cond(&stream, c, &mut counters)?,
            }
        }
        let exec = stream.end_capture()?.instantiate()?;
        for _ in 0..launches {
            let ok = accepted(exec.launch(&stream))?;
            self.expect_accepted(ok, &"a captured graph's launch")?;
            if ok {
                model.apply_capture(d, body);
            }
        }
        self.after(d, s)?;
        Ok(())
    }

    /// Build `spec` node by node, instantiate, and launch `launches` times on stream `s`.
    pub fn build(
        &mut self,
        d: u8,
        s: u8,
        spec: &GraphSpec,
        launches: u8,
        model: &mut Model,
    ) -> Result<(), TestCaseError> {
        let random = self.mode == Mode::Random;
        let exact_events = self.known.has("8");
        let dev = &mut self.devs[d as usize];
        let n: usize = spec
            .nodes
            .iter()
            .map(|n| {
                if let NodeKind::Cond(c) = &n.kind {
                    whiles(c)
                } else {
                    0
                }
            })
            .sum();
        let mut counters = dev.counters(n)?;
        let mut g = if spec.prefix.is_empty() {
            Graph::new(&dev.dev)
        } else {
            dev.captured(d, &spec.prefix, model)?
        };
        let prefix = g.node_ids();
        prop_assert_eq!(
            prefix.len(),
            spec.prefix.len(),
            "one captured node per prefix work"
        );
        let count = spec.prefix.len() + spec.nodes.len();
        let is_event = |i: usize| is_event_node(spec, i);
        let (deps, dropped) = plan(spec, random && spec.racy, exact_events);
        // Node ids by spec item (the node later items depend on).
        let mut ids: Vec<Option<GraphNodeId>> = prefix.iter().copied().map(Some).collect();
        ids.resize(count, None);
        let mut waits = Vec::new();
        if !exact_events {
            // Wait nodes first, as roots that every other node follows.
            for (i, node) in spec.nodes.iter().enumerate() {
                if let NodeKind::WaitEvent(e) = node.kind {
                    let id = g.add_event_wait(&[], &dev.events[e as usize])?;
                    ids[prefix.len() + i] = Some(id);
                    waits.push(id);
                }
            }
            if let (Some(&root), false) = (prefix.first(), waits.is_empty()) {
                for &w in &waits {
                    g.add_dependency(w, root)?;
                }
            }
        }
        for k in prefix.len()..count {
            if ids[k].is_some() || (!exact_events && is_event(k)) {
                continue;
            }
            let mut on: Vec<GraphNodeId> = deps[k]
                .iter()
                .map(|&j| ids[j].expect("an earlier node"))
                .collect();
            on.extend(waits.iter().copied());
            ids[k] = Some(match &spec.nodes[k - prefix.len()].kind {
                NodeKind::Op(w) => dev.add_work(&mut g, &on, w)?,
                NodeKind::Empty => g.add_empty(&on)?,
                NodeKind::Record(e) => g.add_event_record(&on, &dev.events[*e as usize])?,
                NodeKind::WaitEvent(e) => g.add_event_wait(&on, &dev.events[*e as usize])?,
                NodeKind::Child { works, captured } => {
                    let child = if *captured {
                        dev.captured(d, works, model)?
                    } else {
                        let mut c = Graph::new(&dev.dev);
                        let mut prev: Option<GraphNodeId> = None;
                        for w in works {
                            let deps: Vec<GraphNodeId> = prev.into_iter().collect();
                            prev = Some(dev.add_work(&mut c, &deps, w)?);
                        }
                        c
                    };
                    g.add_child(&on, &child)?
                }
                NodeKind::Mem { v, f, dst } => {
                    let (a, t) = g.add_alloc::<f32>(&on, dst.len())?;
                    let cfg = LaunchConfig::for_elements(dst.len(), kernels::BLOCK);
                    let n = dst.len() as u64;
                    let f1 = g.add_kernel(
                        &[a],
                        &kernels::FILL_F32,
                        cfg,
                        KernelArgs::new().write(&t).scalar(*v as f32).scalar(n),
                    )?;
                    let f2 = g.add_kernel(
                        &[f1],
                        &kernels::SCALE_F32,
                        cfg,
                        KernelArgs::new().write(&t).scalar(*f).scalar(n),
                    )?;
                    let c = if dst.is_device() {
                        g.add_copy_d2d(&[f2], &dev.dbuf(*dst), &t)?
                    } else {
                        g.add_copy_d2h(&[f2], dev.host_mut(dst.buf).range_mut(dst.range())?, &t)?
                    };
                    g.add_free(&[c], &t)?
                }
                NodeKind::Cond(c) => dev.add_cond(&mut g, &on, c, &mut counters)?,
            });
        }
        if !exact_events {
            // Record nodes last, after every other node.
            let all: Vec<GraphNodeId> = ids.iter().flatten().copied().collect();
            for node in &spec.nodes {
                if let NodeKind::Record(e) = node.kind {
                    g.add_event_record(&all, &dev.events[e as usize])?;
                }
            }
        }
        let race = dropped.is_some_and(|(j, k)| !reaches(&deps, j, k));
        stats::count(|| match (dropped, race) {
            (None, _) => "graph: race-free".into(),
            (Some(_), true) => "graph: racy (must be refused)".into(),
            (Some(_), false) => "graph: racy pair ordered anyway".into(),
        });
        let exec = match (g.instantiate(), race) {
            (Err(Error::Race(_)), true) => return Ok(()),
            (Ok(_), true) => {
                prop_assert!(
                    false,
                    "nodes {:?} conflict and nothing orders them, yet the graph was instantiated",
                    dropped
                );
                unreachable!()
            }
            (r, false) => r?,
            (Err(e), true) => return Err(e.into()),
        };
        self.before(d, s)?;
        let stream = self.stream(d, s);
        for _ in 0..launches {
            let ok = accepted(exec.launch(&stream))?;
            self.expect_accepted(ok, &"a built graph's launch")?;
            if ok {
                model.apply_graph(d, spec);
            }
        }
        Ok(self.after(d, s)?)
    }

    /// A graph that allocates memory and does not free it (GR10), launched `h.launches`
    /// times on stream `s`; after each launch the stream copies the memory into `h.dst`, and
    /// `h.free` frees it.
    pub fn hand_out(
        &mut self,
        d: u8,
        s: u8,
        h: &HandOut,
        model: &mut Model,
    ) -> Result<(), TestCaseError> {
        let known = self.known;
        let dev = &mut self.devs[d as usize];
        let len = h.dst.len();
        let fill = |s: &Stream, t: &DeviceBuffer<f32>| kernels::fill(s, t, h.v as f32);
        let (graph, t) = if h.built {
            let mut g = Graph::new(&dev.dev);
            let (a, t) = g.add_alloc::<f32>(&[], len)?;
            let cfg = LaunchConfig::for_elements(len, kernels::BLOCK);
            g.add_kernel(
                &[a],
                &kernels::FILL_F32,
                cfg,
                KernelArgs::new()
                    .write(&t)
                    .scalar(h.v as f32)
                    .scalar(len as u64),
            )?;
            (g, t)
        } else {
            let side = Stream::builder(&dev.dev).non_blocking().build()?;
            side.begin_capture(CaptureMode::Global)?;
            let t = side.alloc_async::<f32>(len)?;
            fill(&side, &t)?;
            (side.end_capture()?, t)
        };
        let flags = InstantiateFlags {
            auto_free_on_launch: h.free == FreeBy::AutoFree,
        };
        let exec = graph.instantiate_with(flags)?;
        // Known issue 1: a second instantiation of a graph with memory nodes must be refused
        // (CUDA allows one at a time) or leave the first one's memory alone.
        let _second = if known.has("1") {
            graph.instantiate().ok()
        } else {
            None
        };
        let freer = match h.free {
            FreeBy::Graph => {
                let mut f = Graph::new(&dev.dev);
                f.add_free(&[], &t)?;
                Some(f.instantiate()?)
            }
            _ => None,
        };
        self.before(d, s)?;
        let stream = self.stream(d, s);
        let mut t = Some(t);
        let mut graph = Some(graph);
        let mut held = false;
        for _ in 0..h.launches {
            let ok = accepted(exec.launch(&stream))?;
            self.expect_accepted(ok, &"a launch that hands out memory")?;
            let Some(buf) = t.clone() else { continue };
            if !ok {
                continue;
            }
            held = true;
            let dev = &mut self.devs[d as usize];
            if known.has("6") {
                // Known issue 6: host reads of graph memory after its launch.
                let mut got = vec![0.0f32; len];
                stream.read_pageable(&mut got, &buf)?;
                same(
                    "read_pageable of graph memory",
                    &got,
                    &vec![h.v as f32; len],
                )?;
            }
            let copied = accepted(dev.copy_from(&stream, h.dst, &buf))?;
            self.expect_accepted(copied, &h)?;
            if copied {
                model.fill(d, h.dst, h.v as f32);
            }
            match h.free {
                FreeBy::Stream => {
                    stream.free_async(buf)?;
                    held = false;
                }
                FreeBy::Graph => {
                    freer.as_ref().expect("a freeing graph").launch(&stream)?;
                    held = false;
                }
                FreeBy::AutoFree => {}
                FreeBy::Drop => {
                    // Known issue 13: dropping every handle frees it; the next launch works.
                    drop(buf);
                    t = None;
                    graph = None;
                    held = false;
                }
            }
        }
        if let (true, Some(buf)) = (held, t) {
            stream.free_async(buf)?;
        }
        drop(graph);
        Ok(self.after(d, s)?)
    }
}

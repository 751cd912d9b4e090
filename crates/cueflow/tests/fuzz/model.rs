//! The sequential reference: a program's operations applied one after another, in the order
//! they were enqueued (a graph's nodes in index order: the generator makes every conflicting
//! pair of nodes ordered, so every order the graph allows gives these bytes).

use std::collections::HashMap;

use crate::kernels::cond_from;
use crate::program::{
    BodyItem, CapWork, Coll, CondKind, CondSet, CondSpec, GraphSpec, Loc, NodeKind, Reduce, Work,
    BUFFERS, N,
};
use crate::stats;

/// One device's buffers and the host functions it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct DevModel {
    pub bufs: Vec<Vec<f32>>,
    pub host_fns: usize,
}

/// Every device of a program.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub devs: Vec<DevModel>,
    /// During one launch, the value each condition that no kernel sets (it takes its default
    /// as the launch starts) holds now, by the address of its node: a while loop leaves 0,
    /// which a later run of its node in the same launch (nested in a loop) sees.
    launch_conds: HashMap<usize, u32>,
}

/// The `f32` whose four bytes are `byte` (a memset).
pub fn memset_value(byte: u8) -> f32 {
    f32::from_bits(u32::from_ne_bytes([byte; 4]))
}

/// A host task's result for one element (two roundings, as the task computes it).
pub fn host_task_value(x: f32, k: i8) -> f32 {
    x * 0.5 + k as f32
}

impl Model {
    pub fn new(devices: usize) -> Model {
        Model {
            devs: vec![
                DevModel {
                    bufs: vec![vec![0.0; N]; BUFFERS],
                    host_fns: 0,
                };
                devices
            ],
            launch_conds: HashMap::new(),
        }
    }

    /// The devices' state alone (a read-out).
    pub fn of(devs: Vec<DevModel>) -> Model {
        Model {
            devs,
            launch_conds: HashMap::new(),
        }
    }

    pub fn get(&self, d: u8, l: Loc) -> Vec<f32> {
        self.devs[d as usize].bufs[l.buf as usize][l.range()].to_vec()
    }

    pub fn set(&mut self, d: u8, l: Loc, v: &[f32]) {
        self.devs[d as usize].bufs[l.buf as usize][l.range()].copy_from_slice(v);
    }

    fn map(&mut self, d: u8, l: Loc, f: impl Fn(f32) -> f32) {
        for x in &mut self.devs[d as usize].bufs[l.buf as usize][l.range()] {
            *x = f(*x);
        }
    }

    pub fn fill(&mut self, d: u8, l: Loc, v: f32) {
        self.map(d, l, |_| v);
    }

    pub fn apply(&mut self, d: u8, w: &Work) {
        stats::count(|| format!("ran {}", stats::name(w)));
        match *w {
            Work::Fill { dst, v } | Work::Temp { v, dst, .. } | Work::PageableWrite { dst, v } => {
                self.fill(d, dst, v as f32)
            }
            Work::Scale { dst, f } => self.map(d, dst, |x| x * f),
            Work::Saxpy { a, x, y } => {
                let xs = self.get(d, x);
                let ys: Vec<f32> = self
                    .get(d, y)
                    .iter()
                    .zip(&xs)
                    .map(|(yv, xv)| a.mul_add(*xv, *yv))
                    .collect();
                self.set(d, y, &ys);
            }
            Work::Memset { dst, byte } => self.fill(d, dst, memset_value(byte)),
            Work::Copy { dst, src } => {
                let xs = self.get(d, src);
                self.set(d, dst, &xs);
            }
            Work::HostFn => self.devs[d as usize].host_fns += 1,
            Work::HostTask { src, dst, k } => {
                let ys: Vec<f32> = self
                    .get(d, src)
                    .iter()
                    .map(|x| host_task_value(*x, k))
                    .collect();
                self.set(d, dst, &ys);
            }
            Work::AddC { dst, src, c } => {
                let ys: Vec<f32> = self.get(d, src).iter().map(|x| x + c as f32).collect();
                self.set(d, dst, &ys);
            }
            Work::Reverse { dst, src } => {
                let mut ys = self.get(d, src);
                ys.reverse();
                self.set(d, dst, &ys);
            }
            Work::BlockReverse { dst, src } => {
                let mut ys = self.get(d, src);
                ys.chunks_mut(16).for_each(<[f32]>::reverse);
                self.set(d, dst, &ys);
            }
            Work::Prefix { dst } => {
                let mut ys = self.get(d, dst);
                for i in 1..ys.len() {
                    ys[i] += ys[i - 1];
                }
                self.set(d, dst, &ys);
            }
            Work::PageableRead { .. } => {}
        }
    }

    /// The value a conditional node sees when it starts.
    pub fn cond_value(&self, d: u8, c: &CondSpec) -> u32 {
        match c.set {
            CondSet::Default => *self
                .launch_conds
                .get(&(c as *const CondSpec as usize))
                .unwrap_or(&(c.default as u32)),
            CondSet::Const(v) => v as u32,
            CondSet::From(l) => cond_from(self.get(d, l)[0], c.kind == CondKind::Switch),
        }
    }

    /// The body a conditional node runs, and how many times.
    pub fn cond_runs(&self, d: u8, c: &CondSpec) -> Option<(usize, usize)> {
        let v = self.cond_value(d, c) as usize;
        match c.kind {
            CondKind::If => (v != 0).then_some((0, 1)),
            CondKind::IfElse => Some((if v != 0 { 0 } else { 1 }, 1)),
            CondKind::Switch => (v < c.bodies.len()).then_some((v, 1)),
            CondKind::While => (v != 0).then_some((0, c.limit.max(1) as usize)),
        }
    }

    pub fn apply_cond(&mut self, d: u8, c: &CondSpec) {
        let runs = self.cond_runs(d, c);
        stats::count(|| {
            format!(
                "conditional {:?}: body {:?} runs",
                c.kind,
                runs.map(|r| r.1)
            )
        });
        if let Some((body, times)) = runs {
            for _ in 0..times {
                for item in &c.bodies[body] {
                    match item {
                        BodyItem::W(w) => self.apply(d, w),
                        BodyItem::Cond(inner) => self.apply_cond(d, inner),
                    }
                }
            }
            if c.kind == CondKind::While {
                // The loop ended on a false condition.
                self.launch_conds.insert(c as *const CondSpec as usize, 0);
            }
        }
    }

    pub fn apply_node(&mut self, d: u8, n: &NodeKind) {
        match n {
            NodeKind::Op(w) => self.apply(d, w),
            NodeKind::Child { works, .. } => works.iter().for_each(|w| self.apply(d, w)),
            NodeKind::Mem { v, f, dst } => self.fill(d, *dst, *v as f32 * f),
            NodeKind::Cond(c) => self.apply_cond(d, c),
            NodeKind::Empty | NodeKind::Record(_) | NodeKind::WaitEvent(_) => {}
        }
    }

    /// One launch of a built graph.
    pub fn apply_graph(&mut self, d: u8, g: &GraphSpec) {
        self.launch_conds.clear();
        g.prefix.iter().for_each(|w| self.apply(d, w));
        g.nodes.iter().for_each(|n| self.apply_node(d, &n.kind));
    }

    /// One launch of a captured graph.
    pub fn apply_capture(&mut self, d: u8, body: &[CapWork]) {
        self.launch_conds.clear();
        for c in body {
            match c {
                CapWork::W(w) => self.apply(d, w),
                CapWork::Cond(c) => self.apply_cond(d, c),
            }
        }
    }

    /// A collective over both devices (rank `r` is device `r`), reducing as `a op b`.
    pub fn collective(&mut self, c: Coll, send: Loc, recv: Loc) {
        let (s0, s1) = (self.get(0, send), self.get(1, send));
        let op = |r: Reduce| -> Vec<f32> {
            s0.iter()
                .zip(&s1)
                .map(|(a, b)| match r {
                    Reduce::Sum => a + b,
                    Reduce::Prod => a * b,
                })
                .collect()
        };
        match c {
            Coll::AllReduce(r) => {
                let v = op(r);
                self.set(0, recv, &v);
                self.set(1, recv, &v);
            }
            Coll::Broadcast(root) => {
                let v = if root == 0 { s0.clone() } else { s1.clone() };
                self.set(0, recv, &v);
                self.set(1, recv, &v);
            }
            Coll::Reduce(r, root) => {
                let v = op(r);
                self.set(root, recv, &v);
            }
            Coll::AllGather => {
                let v: Vec<f32> = s0.iter().chain(&s1).copied().collect();
                self.set(0, recv, &v);
                self.set(1, recv, &v);
            }
            Coll::ReduceScatter(r) => {
                let v = op(r);
                let n = recv.len();
                self.set(0, recv, &v[..n]);
                self.set(1, recv, &v[n..]);
            }
        }
    }
}

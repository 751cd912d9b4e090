//! C++ from the block program: thread loops fused where adjacent, per-lane values kept across
//! thread loops in arrays (read into a scalar at the top of each loop, written back at the
//! bottom: R2), chunks of [`CHUNK`] threads for barrier-free runs (R5).

use std::collections::{BTreeSet, HashMap, HashSet};

use super::analysis::Var;
use super::ir::{Node, Seg, VarId};

/// Where each segment and variable is.
#[derive(Default)]
struct Layout {
    /// Segment (by visit order) → its fused thread loop.
    seg_loop: Vec<usize>,
    /// Segment → the chunk it runs in.
    seg_chunk: Vec<Option<usize>>,
    /// Variable → segments using it.
    var_segs: HashMap<VarId, BTreeSet<usize>>,
    /// Variable → the segment declaring it.
    var_decl: HashMap<VarId, usize>,
    /// Uniform variables declared inside each chunk.
    chunk_decls: HashMap<usize, HashSet<VarId>>,
}

fn same_range(a: &Seg, b: &Seg) -> bool {
    a.range == b.range
}

impl Layout {
    fn scan(
        &mut self,
        nodes: &[Node],
        chunk: Option<usize>,
        loops: &mut usize,
        chunks: &mut usize,
        lane: &[bool],
    ) {
        let mut prev: Option<&Seg> = None;
        for n in nodes {
            match n {
                Node::Seg(s) => {
                    if !prev.is_some_and(|p| same_range(p, s)) {
                        *loops += 1;
                    }
                    let id = self.seg_loop.len();
                    self.seg_loop.push(*loops);
                    self.seg_chunk.push(chunk);
                    for st in &s.stmts {
                        for &v in st
                            .uses
                            .iter()
                            .chain(&st.writes)
                            .chain(&st.decls)
                            .filter(|&&v| lane[v])
                        {
                            self.var_segs.entry(v).or_default().insert(id);
                        }
                        for &v in st.decls.iter().filter(|&&v| lane[v]) {
                            self.var_decl.insert(v, id);
                        }
                    }
                    for &m in &s.masks {
                        self.var_segs.entry(m).or_default().insert(id);
                    }
                    for (_, v) in &s.any {
                        self.var_segs.entry(*v).or_default().insert(id);
                    }
                    prev = Some(s);
                    continue;
                }
                Node::Uni { declares, .. } => {
                    if let Some(c) = chunk {
                        self.chunk_decls
                            .entry(c)
                            .or_default()
                            .extend(declares.iter().filter(|&&v| v != super::ir::SHARED_DECL));
                    }
                }
                Node::Scope(v) => self.scan(v, chunk, loops, chunks, lane),
                Node::Loop { body, .. } => self.scan(body, chunk, loops, chunks, lane),
                Node::If { then, els, .. } => {
                    self.scan(then, chunk, loops, chunks, lane);
                    self.scan(els, chunk, loops, chunks, lane);
                }
                Node::Chunk(v) => {
                    *chunks += 1;
                    let c = *chunks;
                    self.scan(v, Some(c), loops, chunks, lane);
                }
                _ => {}
            }
            prev = None;
        }
    }
}

/// Emits the lanes function's body.
pub(super) struct Emitter<'a> {
    vars: &'a [Var],
    lay: Layout,
    seg: usize,
    chunks: usize,
    /// Variables whose arrays are declared (block-sized or chunk-sized).
    declared: HashMap<VarId, bool>,
    pub out: String,
}

/// Why emission failed (a variable that needs a type the source does not spell).
pub(super) type EmitErr = String;

impl<'a> Emitter<'a> {
    pub(super) fn new(vars: &'a [Var], lane: &[bool], nodes: &[Node]) -> Self {
        let mut lay = Layout::default();
        let (mut loops, mut chunks) = (0, 0);
        lay.scan(nodes, None, &mut loops, &mut chunks, lane);
        Emitter {
            vars,
            lay,
            seg: 0,
            chunks: 0,
            declared: HashMap::new(),
            out: String::new(),
        }
    }

    fn loops_of(&self, v: VarId) -> BTreeSet<usize> {
        self.lay.var_segs.get(&v).map_or_else(BTreeSet::new, |s| {
            s.iter().map(|&i| self.lay.seg_loop[i]).collect()
        })
    }

    /// Kept in an array across thread loops.
    fn promoted(&self, v: VarId) -> bool {
        self.loops_of(v).len() > 1 && !self.vars[v].tid_alias
    }

    /// Kept at the top of a thread loop (used by more than one segment).
    fn hoisted(&self, v: VarId) -> bool {
        self.lay.var_segs.get(&v).is_some_and(|s| s.len() > 1)
    }

    fn arr(&self, v: VarId) -> String {
        format!("{}_a{v}", self.vars[v].name)
    }

    fn ty(&self, v: VarId) -> Result<&str, EmitErr> {
        self.vars[v].ty.as_deref().ok_or_else(|| {
            format!(
                "`{}` (declared `auto` or by reference) is used across thread loops",
                self.vars[v].name
            )
        })
    }

    fn declare_array(&mut self, v: VarId, block: bool) -> Result<(), EmitErr> {
        if self.declared.contains_key(&v) {
            return Ok(());
        }
        let size = if block { "CF_MAXT" } else { "CF_W" };
        let line = format!(
            "{} {}[{size}]{};\n",
            self.ty(v)?,
            self.arr(v),
            self.vars[v].dims
        );
        self.out.push_str(&line);
        self.declared.insert(v, block);
        Ok(())
    }

    pub(super) fn list(&mut self, nodes: &[Node], chunk: Option<usize>) -> Result<(), EmitErr> {
        let mut i = 0;
        while i < nodes.len() {
            match &nodes[i] {
                Node::Seg(_) => {
                    let mut j = i + 1;
                    while j < nodes.len() {
                        match (&nodes[j], &nodes[j - 1]) {
                            (Node::Seg(b), Node::Seg(a)) if same_range(a, b) => j += 1,
                            _ => break,
                        }
                    }
                    let segs: Vec<&Seg> = nodes[i..j]
                        .iter()
                        .filter_map(|n| if let Node::Seg(s) = n { Some(s) } else { None })
                        .collect();
                    self.thread_loop(&segs, chunk)?;
                    i = j;
                    continue;
                }
                Node::Uni { text, .. } => {
                    self.out.push_str(text);
                    self.out.push('\n');
                }
                Node::Barrier => self.out.push_str("/* __syncthreads() */\n"),
                Node::WarpSync => self.out.push_str("/* warp sync */\n"),
                Node::Snap { name, ty } => {
                    let size = if chunk.is_some() { "CF_W" } else { "CF_MAXT" };
                    self.out.push_str(&format!("{ty} {name}[{size} + 64];\n"));
                }
                Node::Scope(v) => {
                    self.out.push_str("{\n");
                    self.list(v, chunk)?;
                    self.out.push_str("}\n");
                }
                Node::Loop {
                    head, body, tail, ..
                } => {
                    self.out.push_str(&format!("{head} {{\n"));
                    self.list(body, chunk)?;
                    self.out.push_str(&format!("}} {tail}\n"));
                }
                Node::If {
                    cond, then, els, ..
                } => {
                    self.out.push_str(&format!("if {cond} {{\n"));
                    self.list(then, chunk)?;
                    self.out.push_str("}\n");
                    if !els.is_empty() {
                        self.out.push_str("else {\n");
                        self.list(els, chunk)?;
                        self.out.push_str("}\n");
                    }
                }
                Node::Chunk(body) => self.chunk(body)?,
            }
            i += 1;
        }
        Ok(())
    }

    fn chunk(&mut self, body: &[Node]) -> Result<(), EmitErr> {
        self.chunks += 1;
        let c = self.chunks;
        // Lane values declared in the chunk but used after it live in block-sized arrays.
        let first = self.seg;
        let mut count = 0;
        count_segs(body, &mut count);
        let inside = first..first + count;
        let mut outer: Vec<VarId> = Vec::new();
        for (&v, &d) in &self.lay.var_decl {
            if inside.contains(&d) && self.lay.var_segs[&v].iter().any(|s| !inside.contains(s)) {
                outer.push(v);
            }
        }
        outer.sort();
        for v in outer {
            self.declare_array(v, true)?;
        }
        // Uniform variables the chunk assigns are reset for each chunk.
        let mut assigned = BTreeSet::new();
        collect_assigns(body, &mut assigned);
        let local = self.lay.chunk_decls.get(&c).cloned().unwrap_or_default();
        let saved: Vec<VarId> = assigned
            .into_iter()
            .filter(|v| !local.contains(v) && self.vars[*v].for_init.is_none())
            .collect();
        self.out.push_str("{\n");
        for &v in &saved {
            let n = &self.vars[v].name;
            self.out.push_str(&format!("const auto cf_sv_{n} = {n};\n"));
        }
        // The chunk's body is instantiated twice: for full chunks with a constant trip count
        // (the compiler unrolls the thread loops and keeps the lanes in registers), and for
        // the last, partial one.
        self.out.push_str("auto cf_chunk = [&](const unsigned cf_t0, auto cf_w) {\nconst unsigned cf_t1 = cf_t0 + cf_w; (void)cf_t1;\n");
        for &v in &saved {
            let n = &self.vars[v].name;
            self.out.push_str(&format!("{n} = cf_sv_{n};\n"));
        }
        self.list(body, Some(c))?;
        self.out.push_str("};\nfor (unsigned cf_c = 0; cf_c < cf_n; cf_c += CF_W) {\nif (cf_n - cf_c >= CF_W) cf_chunk(cf_c, std::integral_constant<unsigned, CF_W>{});\nelse cf_chunk(cf_c, cf_n - cf_c);\n}\n}\n");
        Ok(())
    }

    fn thread_loop(&mut self, segs: &[&Seg], chunk: Option<usize>) -> Result<(), EmitErr> {
        let ids: Vec<usize> = (self.seg..self.seg + segs.len()).collect();
        self.seg += segs.len();
        let mut used = BTreeSet::new();
        for &id in &ids {
            for (&v, s) in &self.lay.var_segs {
                if s.contains(&id) {
                    used.insert(v);
                }
            }
        }
        // Arrays of values this loop declares and later loops read.
        for &v in &used {
            if self.promoted(v) && self.lay.var_decl.get(&v).is_some_and(|d| ids.contains(d)) {
                let block = chunk.is_none()
                    || self.lay.var_segs[&v]
                        .iter()
                        .any(|&s| self.lay.seg_chunk[s] != chunk);
                self.declare_array(v, block)?;
            }
        }
        let (lo, hi) = match &segs[0].range {
            Some((lo, hi)) => (
                format!("cueflow::lanes::umax(cf_t0, {lo})"),
                format!("cueflow::lanes::umin(cf_t1, {hi})"),
            ),
            None => ("cf_t0".to_string(), "cf_t1".to_string()),
        };
        let mut body = String::new();
        if segs[0].range.is_none() && chunk.is_some() {
            body.push_str("for (unsigned cf_i = 0; cf_i < cf_w; ++cf_i) {\nconst unsigned cf_t = cf_t0 + cf_i;\n");
        } else {
            body.push_str(&format!(
                "for (unsigned cf_t = {lo}; cf_t < {hi}; ++cf_t) {{\n"
            ));
        }
        body.push_str("const uint3 threadIdx = {cf_t, 0u, 0u}; (void)threadIdx;\nconst unsigned cf_ix = cf_t - cf_t0; (void)cf_ix;\n");
        let mut out_copy = String::new();
        for &v in &used {
            let var = &self.vars[v];
            let declared_here = self.lay.var_decl.get(&v).is_some_and(|d| ids.contains(d));
            if self.promoted(v) {
                // Block-sized arrays are read at the chunk's base plus the lane's index in the
                // chunk: an affine index the vectorizer sees through (`cf_t0 + i` in 32 bits
                // may wrap, which defeats its analysis).
                let a = if self.declared.get(&v) == Some(&true) {
                    format!("({} + cf_t0)[cf_ix]", self.arr(v))
                } else {
                    format!("{}[cf_ix]", self.arr(v))
                };
                if var.by_ref || !super::rules::rules().r2 {
                    body.push_str(&format!("auto& {} = {a};\n", var.name));
                    continue;
                }
                let ty = self.ty(v)?;
                if declared_here {
                    body.push_str(&format!("{ty} {}{{}};\n", var.name));
                } else {
                    body.push_str(&format!("{ty} {} = {a};\n", var.name));
                }
                let written = declared_here
                    || segs
                        .iter()
                        .any(|s| s.stmts.iter().any(|st| st.writes.contains(&v)));
                if written {
                    out_copy.push_str(&format!("{a} = {};\n", var.name));
                }
            } else if var.tid_alias && self.loops_of(v).len() > 1 {
                // A copy of the thread index: the lane's own index, so accesses through it
                // stay contiguous.
                let ty = self.ty(v)?;
                if declared_here {
                    body.push_str(&format!("{ty} {}{{}};\n", var.name));
                } else {
                    body.push_str(&format!("const {ty} {} = ({ty})cf_t;\n", var.name));
                }
            } else if self.hoisted(v) && !var.param && declared_here {
                body.push_str(&format!("{} {}{}{{}};\n", self.ty(v)?, var.name, var.dims));
            }
        }
        for s in segs {
            let guard: Vec<&str> = s
                .masks
                .iter()
                .map(|&m| self.vars[m].name.as_str())
                .collect();
            if !guard.is_empty() {
                body.push_str(&format!("if ({}) {{\n", guard.join(" && ")));
            }
            for st in &s.stmts {
                let keep = st
                    .decls
                    .iter()
                    .any(|&v| self.promoted(v) || self.hoisted(v));
                match (&st.assign, keep) {
                    (Some(a), true) => body.push_str(a),
                    _ => body.push_str(&st.text),
                }
                body.push('\n');
            }
            if !guard.is_empty() {
                body.push_str("}\n");
            }
            for (u, v) in &s.any {
                body.push_str(&format!("{u} |= {};\n", self.vars[*v].name));
            }
        }
        body.push_str(&out_copy);
        body.push_str("}\n");
        self.out.push_str(&body);
        Ok(())
    }
}

fn count_segs(nodes: &[Node], n: &mut usize) {
    for x in nodes {
        match x {
            Node::Seg(_) => *n += 1,
            Node::Scope(v) | Node::Chunk(v) => count_segs(v, n),
            Node::Loop { body, .. } => count_segs(body, n),
            Node::If { then, els, .. } => {
                count_segs(then, n);
                count_segs(els, n);
            }
            _ => {}
        }
    }
}

fn collect_assigns(nodes: &[Node], out: &mut BTreeSet<VarId>) {
    for x in nodes {
        match x {
            Node::Uni { assigns, .. } => out.extend(assigns),
            Node::Scope(v) | Node::Chunk(v) => collect_assigns(v, out),
            Node::Loop { body, assigns, .. } => {
                out.extend(assigns);
                collect_assigns(body, out);
            }
            Node::If { then, els, .. } => {
                collect_assigns(then, out);
                collect_assigns(els, out);
            }
            _ => {}
        }
    }
}

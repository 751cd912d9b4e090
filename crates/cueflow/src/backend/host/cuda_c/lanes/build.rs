//! Building the block program ([`ir`](super::ir)) from a kernel's body: uniform statements and
//! loops stay at block level, the thread loop goes inside them; varying statements become
//! per-lane statements of thread loops; barriers and warp operations cut them.

use std::collections::{BTreeSet, HashMap};

use tree_sitter::Node as TsNode;

use super::analysis::{is_barrier, is_sync, Var, Vars};
use super::ir::{LStmt, Node, Seg, VarId};
use super::rewrite::Rw;
use super::syntax::{self, all_kids, args, callee, kids, render, strip_parens, Source};
use super::variance::Facts;

/// Why a kernel cannot run as lanes, and where (byte offset).
pub(super) type Why = (String, usize);
type R<T> = Result<T, Why>;

#[path = "build_flow.rs"]
mod flow;

/// Where a statement runs.
#[derive(Clone, Default)]
struct Ctx {
    masks: Vec<VarId>,
    range: Option<(String, String)>,
    /// Only some threads run here.
    div: bool,
    /// Activity masks of the enclosing divergent loops (cleared by a `return`).
    acts: Vec<VarId>,
}

pub(super) struct Builder<'a, 't> {
    pub facts: Facts<'a>,
    pub v: Vars,
    /// Functions that read `threadIdx` and are called from lane code (cloned with it).
    pub clones: BTreeSet<String>,
    pub live: Option<VarId>,
    may_dead: bool,
    next: usize,
    _t: std::marker::PhantomData<&'t ()>,
}

impl<'a, 't> Builder<'a, 't> {
    pub(super) fn new(facts: Facts<'a>, v: Vars) -> Self {
        Builder {
            facts,
            v,
            clones: BTreeSet::new(),
            live: None,
            may_dead: false,
            next: 0,
            _t: std::marker::PhantomData,
        }
    }

    fn src(&self) -> &'a Source {
        self.facts.src
    }

    fn synth(&mut self, prefix: &str) -> VarId {
        self.next += 1;
        let name = format!("cf_{prefix}{}", self.next);
        self.v.vars.push(Var {
            name,
            ty: Some("int".into()),
            dims: String::new(),
            param: false,
            by_ref: false,
            for_init: None,
            tid_alias: false,
        });
        self.v.varying.push(true);
        self.v.vars.len() - 1
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("cf_{prefix}{}", self.next)
    }

    fn name(&self, v: VarId) -> &str {
        &self.v.vars[v].name
    }

    /// The kernel's body as a block program.
    pub(super) fn kernel(&mut self, body: TsNode<'t>) -> R<Vec<Node>> {
        let mut out = Vec::new();
        let mut has_return = false;
        syntax::walk(body, &mut |n| {
            has_return |= n.kind() == "return_statement";
            true
        });
        if has_return {
            let lv = self.synth("lv");
            self.live = Some(lv);
            out.push(Node::Seg(Seg {
                masks: vec![],
                range: None,
                stmts: vec![LStmt {
                    text: format!("int {} = 1;", self.name(lv)),
                    assign: Some(format!("{} = 1;", self.name(lv))),
                    decls: vec![lv],
                    uses: [lv].into(),
                    writes: [lv].into(),
                }],
                any: vec![],
            }));
        }
        for k in kids(body) {
            self.stmt(k, &Ctx::default(), &mut out)?;
        }
        Ok(out)
    }

    /// Calls in `n` that synchronize: (block barriers, warp operations).
    fn syncs(&self, n: TsNode) -> R<(bool, bool)> {
        let (mut b, mut w, mut bad) = (false, false, None);
        syntax::walk(n, &mut |x| {
            if x.kind() == "call_expression" {
                if let Some(c) = callee(self.src(), x) {
                    if let Some(s) = self.facts.sums.get(&c) {
                        if s.sync {
                            bad.get_or_insert((
                                format!("calls `{c}`, which synchronizes threads"),
                                x.start_byte(),
                            ));
                        }
                        if s.tid && s.opaque {
                            bad.get_or_insert((format!("calls `{c}` (a template or overloaded function that reads threadIdx)"), x.start_byte()));
                        }
                    } else if is_barrier(&c) {
                        b = true;
                    } else if is_sync(&c) {
                        w = true;
                    }
                }
            }
            true
        });
        match bad {
            Some(why) => Err(why),
            None => Ok((b, w)),
        }
    }

    /// Identifiers of `n` resolved to variables; and the ones it assigns.
    fn usage(&self, n: TsNode) -> (BTreeSet<VarId>, BTreeSet<VarId>) {
        let (mut uses, mut writes) = (BTreeSet::new(), BTreeSet::new());
        syntax::walk(n, &mut |x| {
            if let Some(&v) = self
                .v
                .uses
                .get(&x.id())
                .or_else(|| self.v.decls.get(&x.id()))
            {
                uses.insert(v);
            }
            let t = match x.kind() {
                "assignment_expression" => x.child_by_field_name("left"),
                "update_expression" => x.child_by_field_name("argument"),
                "pointer_expression" => x.child_by_field_name("argument"),
                "call_expression" => None,
                _ => None,
            };
            if let Some(&v) = t.map(strip_parens).and_then(|t| self.v.uses.get(&t.id())) {
                writes.insert(v);
            }
            if x.kind() == "call_expression" {
                for a in args(x) {
                    if let Some(&v) = self.v.uses.get(&strip_parens(a).id()) {
                        writes.insert(v); // may be a reference parameter
                    }
                }
            }
            if let Some(&v) = self.v.decls.get(&x.id()) {
                writes.insert(v);
            }
            true
        });
        (uses, writes)
    }

    /// Render lane code: clones for functions reading `threadIdx`, `return` as lane death,
    /// warp operations as `repl` says.
    fn lane_text(&mut self, n: TsNode, ctx: &Ctx, repl: &HashMap<usize, String>) -> String {
        let rw = Rw {
            src: self.facts.src,
            sums: self.facts.sums,
            root: n.id(),
            repl,
            ret: Some((
                self.live.map(|l| self.name(l).to_string()),
                ctx.acts.iter().map(|&a| self.name(a).to_string()).collect(),
            )),
            clones: Default::default(),
            label: Default::default(),
            next: std::cell::Cell::new(self.next),
        };
        let mut text = rw.text(n);
        self.next = rw.next.get();
        if let Some(l) = rw.label.into_inner() {
            text.push_str(&format!(" {l}:;"));
        }
        self.clones.extend(rw.clones.into_inner());
        text
    }

    /// Append a lane statement to the segment of `ctx` at the end of `out`.
    fn push_lane(&mut self, out: &mut Vec<Node>, ctx: &Ctx, st: LStmt) {
        if let Some(Node::Seg(s)) = out.last_mut() {
            if s.masks == ctx.masks && s.range == ctx.range && s.any.is_empty() {
                s.stmts.push(st);
                return;
            }
        }
        out.push(Node::Seg(Seg {
            masks: ctx.masks.clone(),
            range: ctx.range.clone(),
            stmts: vec![st],
            any: vec![],
        }));
    }

    /// Statement `n` as lane code (R1: masked by the live mask only when it touches memory).
    fn lane(
        &mut self,
        n: TsNode,
        ctx: &Ctx,
        out: &mut Vec<Node>,
        repl: &HashMap<usize, String>,
    ) -> R<()> {
        let (mut uses, mut writes) = self.usage(n);
        let has_ret = {
            let mut r = false;
            syntax::walk(n, &mut |x| {
                r |= x.kind() == "return_statement";
                true
            });
            r
        };
        let mem = !super::rules::rules().r1
            || self.facts.touches_memory(&self.v, n)
            || !matches!(n.kind(), "expression_statement" | "declaration");
        let mask = (self.may_dead && mem).then_some(self.live).flatten();
        if let Some(l) = self.live.filter(|_| has_ret || mask.is_some()) {
            uses.insert(l);
            if has_ret {
                writes.insert(l);
            }
        }
        if has_ret {
            uses.extend(ctx.acts.iter().copied());
            writes.extend(ctx.acts.iter().copied());
        }
        let st = if n.kind() == "declaration" {
            let mut decls = Vec::new();
            let mut assign = String::new();
            let mut vals = HashMap::new();
            for d in n.children_by_field_name("declarator", &mut n.walk()) {
                let Some(id) = syntax::declared_name(d) else {
                    return Err(("an unusual declaration".into(), d.start_byte()));
                };
                let Some(&var) = self.v.decls.get(&id.id()) else {
                    continue;
                };
                decls.push(var);
                if let Some(val) = d.child_by_field_name("value") {
                    let t = self.lane_text(val, ctx, repl);
                    let name = self.name(var).to_string();
                    if val.kind() == "initializer_list" {
                        if mask.is_some() {
                            return Err(("a masked brace initializer".into(), val.start_byte()));
                        }
                        assign.push_str(&format!("{{ decltype({name}) cf_tmp = {t}; std::memcpy(&{name}, &cf_tmp, sizeof cf_tmp); }} "));
                    } else {
                        match mask {
                            Some(l) => {
                                let l = self.name(l);
                                assign.push_str(&format!("if ({l}) {name} = ({t}); "));
                                vals.insert(
                                    val.id(),
                                    format!("{l} ? ({t}) : std::decay_t<decltype({t})>{{}}"),
                                );
                            }
                            None => {
                                assign.push_str(&format!("{name} = ({t}); "));
                                vals.insert(val.id(), t);
                            }
                        }
                    }
                }
            }
            let text = render(self.src(), n, &|x| vals.get(&x.id()).cloned());
            LStmt {
                text,
                assign: Some(assign),
                decls,
                uses,
                writes,
            }
        } else {
            let t = self.lane_text(n, ctx, repl);
            let text = match mask {
                Some(l) => format!("if ({}) {{ {t} }}", self.name(l)),
                None => t,
            };
            LStmt {
                text,
                assign: None,
                decls: vec![],
                uses,
                writes,
            }
        };
        self.push_lane(out, ctx, st);
        if has_ret {
            self.may_dead = true;
        }
        Ok(())
    }

    fn uni(&self, n: TsNode, declares: Vec<VarId>) -> Node {
        let (_, writes) = self.usage(n);
        Node::Uni {
            text: self.src().of(n).to_string(),
            declares,
            assigns: writes.into_iter().collect(),
            escapes: false,
        }
    }

    fn stmt(&mut self, n: TsNode<'t>, ctx: &Ctx, out: &mut Vec<Node>) -> R<()> {
        let src = self.src();
        match n.kind() {
            k if k.starts_with("preproc") || k == "comment" => Ok(()),
            "compound_statement" => {
                let mut v = Vec::new();
                for k in kids(n) {
                    self.stmt(k, ctx, &mut v)?;
                }
                out.push(Node::Scope(v));
                Ok(())
            }
            "declaration" => {
                let special = kids(n).iter().any(|k| {
                    matches!(
                        src.of(*k),
                        "static" | "extern" | "__shared__" | "thread_local"
                    )
                });
                if special {
                    // Never inside a chunk: the name is used after it (`SHARED_DECL`).
                    out.push(self.uni(n, vec![super::ir::SHARED_DECL]));
                    return Ok(());
                }
                let (b, w) = self.syncs(n)?;
                if b {
                    return Err(("a barrier inside an expression".into(), n.start_byte()));
                }
                if w {
                    return self.warp_stmt(n, ctx, out);
                }
                let vars: Vec<VarId> = n
                    .children_by_field_name("declarator", &mut n.walk())
                    .filter_map(|d| syntax::declared_name(d))
                    .filter_map(|id| self.v.decls.get(&id.id()).copied())
                    .collect();
                let counters = vars.iter().all(|&v| self.v.vars[v].for_init.is_some());
                if (!ctx.div || counters) && vars.iter().all(|&v| !self.v.varying[v]) {
                    out.push(self.uni(n, vars));
                    Ok(())
                } else {
                    self.lane(n, ctx, out, &HashMap::new())
                }
            }
            "expression_statement" => {
                let (b, w) = self.syncs(n)?;
                if b {
                    let call = n.named_child(0).map(strip_parens);
                    let alone = call.is_some_and(|c| {
                        c.kind() == "call_expression"
                            && callee(src, c).is_some_and(|c| is_barrier(&c))
                    });
                    if !alone {
                        return Err((
                            "a barrier inside an expression (__syncthreads_count and the like)"
                                .into(),
                            n.start_byte(),
                        ));
                    }
                    if ctx.div {
                        return Err(("a barrier inside divergent code".into(), n.start_byte()));
                    }
                    out.push(Node::Barrier);
                    return Ok(());
                }
                if w {
                    return self.warp_stmt(n, ctx, out);
                }
                if !ctx.div && n.named_child(0).is_some_and(|e| self.uniform_update(e)) {
                    out.push(self.uni(n, vec![]));
                    return Ok(());
                }
                if n.named_child_count() == 0 {
                    return Ok(());
                }
                self.lane(n, ctx, out, &HashMap::new())
            }
            "if_statement" => self.if_stmt(n, ctx, out),
            "for_statement" | "while_statement" | "do_statement" => self.loop_stmt(n, ctx, out),
            "return_statement" => {
                if ctx.div || !ctx.masks.is_empty() {
                    return self.lane(n, ctx, out, &HashMap::new());
                }
                out.push(Node::Uni {
                    text: "goto cf_end;".into(),
                    declares: vec![],
                    assigns: vec![],
                    escapes: true,
                });
                self.may_dead = true;
                Ok(())
            }
            "break_statement" | "continue_statement" => {
                if ctx.div {
                    return Err((
                        format!("a divergent `{}`", src.of(n).trim_end_matches(';')),
                        n.start_byte(),
                    ));
                }
                out.push(Node::Uni {
                    text: src.of(n).to_string(),
                    declares: vec![],
                    assigns: vec![],
                    escapes: true,
                });
                Ok(())
            }
            "goto_statement" | "labeled_statement" => Err(("`goto`".into(), n.start_byte())),
            _ => {
                let (b, w) = self.syncs(n)?;
                if b || w {
                    return Err((
                        format!(
                            "a barrier or warp operation inside a `{}`",
                            n.kind().replace('_', " ")
                        ),
                        n.start_byte(),
                    ));
                }
                self.lane(n, ctx, out, &HashMap::new())
            }
        }
    }

    /// An expression statement that only assigns uniform variables uniform values.
    fn uniform_update(&self, e: TsNode) -> bool {
        let e = strip_parens(e);
        match e.kind() {
            "assignment_expression" | "update_expression" => {
                let t = e
                    .child_by_field_name("left")
                    .or_else(|| e.child_by_field_name("argument"))
                    .map(strip_parens);
                let target_uniform = t
                    .and_then(|t| self.v.uses.get(&t.id()))
                    .is_some_and(|&v| !self.v.varying[v]);
                target_uniform
                    && e.child_by_field_name("right")
                        .is_none_or(|r| !self.facts.varying(&self.v, r))
            }
            "comma_expression" => all_kids(e)
                .into_iter()
                .filter(|k| k.is_named())
                .all(|k| self.uniform_update(k)),
            _ => false,
        }
    }

    fn body(&mut self, n: Option<TsNode<'t>>, ctx: &Ctx) -> R<Vec<Node>> {
        let mut v = Vec::new();
        if let Some(n) = n {
            let n = if n.kind() == "else_clause" {
                n.named_child(0).unwrap_or(n)
            } else {
                n
            };
            self.stmt(n, ctx, &mut v)?;
        }
        Ok(v)
    }
}

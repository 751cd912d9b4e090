//! Control flow and warp operations for the block program: uniform `if`s and loops stay at
//! block level; a divergent `if` narrows the thread range (R3) or becomes a mask; a loop with a
//! varying trip count runs while any lane is active; shuffles read snapshots (R4).

use std::collections::HashMap;

use tree_sitter::Node as TsNode;

use super::super::analysis::is_shuffle;
use super::super::ir::{LStmt, Node, Seg, VarId};
use super::super::syntax::{self, args, callee, kids, render, strip_parens};
use super::{Builder, Ctx, R};

impl<'t> Builder<'_, 't> {
    fn has_loop(n: TsNode) -> bool {
        let mut l = false;
        syntax::walk(n, &mut |x| {
            l |= matches!(
                x.kind(),
                "for_statement" | "while_statement" | "do_statement"
            );
            !l
        });
        l
    }

    fn has_return(n: TsNode) -> bool {
        let mut r = false;
        syntax::walk(n, &mut |x| {
            r |= x.kind() == "return_statement";
            !r
        });
        r
    }

    pub(super) fn if_stmt(&mut self, n: TsNode<'t>, ctx: &Ctx, out: &mut Vec<Node>) -> R<()> {
        let cond = n
            .child_by_field_name("condition")
            .ok_or(("an `if` without a condition".to_string(), n.start_byte()))?;
        let value = cond.child_by_field_name("value").unwrap_or(cond);
        if cond.child_by_field_name("initializer").is_some() || value.kind() == "declaration" {
            return Err(("a declaration in an `if` condition".into(), n.start_byte()));
        }
        let (then_n, else_n) = (
            n.child_by_field_name("consequence"),
            n.child_by_field_name("alternative"),
        );
        let (b, w) = self.syncs(n)?;
        if !self.facts.varying(&self.v, value) {
            let then = self.body(then_n, ctx)?;
            let els = self.body(else_n, ctx)?;
            out.push(Node::If {
                cond: format!("({})", self.src().of(value)),
                then,
                els,
                divergent: false,
            });
            return Ok(());
        }
        if b {
            return Err(("a barrier inside a divergent `if`".into(), n.start_byte()));
        }
        let mut inner = ctx.clone();
        inner.div = true;
        if let Some(atoms) = self.r3(value) {
            if else_n.is_none() || atoms.len() == 1 {
                let (lo0, hi0) = ctx
                    .range
                    .clone()
                    .unwrap_or(("cf_t0".into(), "cf_t1".into()));
                let (lo, hi) = (self.fresh("lo"), self.fresh("hi"));
                let mut text = format!("unsigned {lo} = {lo0}, {hi} = {hi0};");
                for (prefix, f) in &atoms {
                    text.push_str(&format!(
                        " cueflow::lanes::narrow({lo}, {hi}, {prefix}, [&](unsigned cf_t) {{ const uint3 threadIdx = {{cf_t, 0u, 0u}}; (void)threadIdx; return (bool)({f}); }});"
                    ));
                }
                out.push(Node::Uni {
                    text,
                    declares: vec![],
                    assigns: vec![],
                    escapes: false,
                });
                inner.range = Some((lo.clone(), hi.clone()));
                let then = self.body(then_n, &inner)?;
                out.push(Node::Scope(then));
                if else_n.is_some() {
                    let prefix = atoms[0].0;
                    inner.range = Some(if prefix { (hi, hi0) } else { (lo0, lo) });
                    let els = self.body(else_n, &inner)?;
                    out.push(Node::Scope(els));
                }
                return Ok(());
            }
        }
        if !(w || Self::has_loop(n)) {
            return self.lane(n, ctx, out, &HashMap::new());
        }
        // A mask per branch; each branch runs at block level when any lane takes it.
        let c = {
            let t = self.lane_text(value, ctx, &HashMap::new());
            let mut conj: Vec<String> = ctx
                .masks
                .iter()
                .map(|&m| self.name(m).to_string())
                .collect();
            if let Some(l) = self.live.filter(|_| self.may_dead) {
                conj.push(self.name(l).to_string());
            }
            conj.push(format!("({t})"));
            conj.join(" && ")
        };
        let (mut uses, _) = self.usage(value);
        uses.extend(ctx.masks.iter().copied());
        uses.extend(self.live.filter(|_| self.may_dead));
        let m = self.synth("m");
        let any_m = self.fresh("any");
        let mut text = format!("int {} = {c};", self.name(m));
        let mut assign = format!("{} = {c};", self.name(m));
        let mut decls = vec![m];
        let mut any = vec![(any_m.clone(), m)];
        let mut uni = format!("int {any_m} = 0;");
        let e = else_n.map(|_| {
            let e = self.synth("e");
            let any_e = self.fresh("any");
            let outer: Vec<String> = ctx
                .masks
                .iter()
                .map(|&m| self.name(m).to_string())
                .collect();
            let guard = if outer.is_empty() {
                String::new()
            } else {
                format!("{} && ", outer.join(" && "))
            };
            text.push_str(&format!(
                " int {} = {guard}!{};",
                self.name(e),
                self.name(m)
            ));
            assign.push_str(&format!(" {} = {guard}!{};", self.name(e), self.name(m)));
            decls.push(e);
            any.push((any_e.clone(), e));
            uni.push_str(&format!(" int {any_e} = 0;"));
            (e, any_e)
        });
        out.push(Node::Uni {
            text: uni,
            declares: vec![],
            assigns: vec![],
            escapes: false,
        });
        let mut writes = std::collections::BTreeSet::new();
        writes.extend(decls.iter().copied());
        uses.extend(decls.iter().copied());
        out.push(Node::Seg(Seg {
            masks: vec![],
            range: ctx.range.clone(),
            stmts: vec![LStmt {
                text,
                assign: Some(assign),
                decls,
                uses,
                writes,
            }],
            any,
        }));
        let mut t = inner.clone();
        t.masks = vec![m];
        if Self::has_return(n) {
            self.may_dead = true;
        }
        let then = self.body(then_n, &t)?;
        out.push(Node::If {
            cond: format!("({any_m})"),
            then,
            els: vec![],
            divergent: true,
        });
        if let Some((e, any_e)) = e {
            t.masks = vec![e];
            let els = self.body(else_n, &t)?;
            out.push(Node::If {
                cond: format!("({any_e})"),
                then: els,
                els: vec![],
                divergent: true,
            });
        }
        Ok(())
    }

    /// `threadIdx.x OP uniform` conditions (and `&&` of them) as (keeps a prefix of the
    /// lanes, the condition for one lane with aliases of threadIdx.x spelled out).
    fn r3(&self, c: TsNode) -> Option<Vec<(bool, String)>> {
        if !super::super::rules::rules().r3 {
            return None;
        }
        let c = strip_parens(c);
        if c.kind() != "binary_expression" {
            return None;
        }
        let op = c
            .child_by_field_name("operator")
            .map(|o| self.src().of(o))?;
        let (l, r) = (
            c.child_by_field_name("left")?,
            c.child_by_field_name("right")?,
        );
        if op == "&&" {
            let mut a = self.r3(l)?;
            a.extend(self.r3(r)?);
            return Some(a);
        }
        let is_tid = |x: TsNode| {
            let x = strip_parens(x);
            self.src().of(x).split_whitespace().collect::<String>() == "threadIdx.x"
                || self
                    .v
                    .uses
                    .get(&x.id())
                    .is_some_and(|&v| self.v.vars[v].tid_alias)
        };
        let left = if is_tid(l) && !self.facts.varying(&self.v, r) {
            true
        } else if is_tid(r) && !self.facts.varying(&self.v, l) {
            false
        } else {
            return None;
        };
        let side = |x: TsNode| {
            render(self.src(), x, &|y| {
                let v = *self.v.uses.get(&y.id())?;
                let var = &self.v.vars[v];
                var.tid_alias
                    .then(|| format!("(({})threadIdx.x)", var.ty.as_deref().unwrap_or("unsigned")))
            })
        };
        let (ls, rs) = (side(l), side(r));
        let atom = |o: &str| {
            let prefix = matches!(o, "<" | "<=") == left;
            (prefix, format!("({ls}) {o} ({rs})"))
        };
        match op {
            "<" | "<=" | ">" | ">=" => Some(vec![atom(op)]),
            "==" => Some(vec![atom("<="), atom(">=")]),
            _ => None,
        }
    }

    pub(super) fn loop_stmt(&mut self, n: TsNode<'t>, ctx: &Ctx, out: &mut Vec<Node>) -> R<()> {
        let src = self.src();
        let (b, w) = self.syncs(n)?;
        let varying = self.v.varying_loops.contains(&n.id());
        let dexit = self.v.divergent_exits.contains(&n.id());
        let body_n = n.child_by_field_name("body");
        let cond = n.child_by_field_name("condition");
        let cond_v = cond.map(|c| c.child_by_field_name("value").unwrap_or(c));
        let init = n.child_by_field_name("initializer");
        let update = n.child_by_field_name("update");
        if b && (varying || ctx.div) {
            return Err(("a barrier inside a divergent loop".into(), n.start_byte()));
        }
        if body_n.is_some_and(Self::has_return) {
            self.may_dead = true;
        }
        let init_uniform = init.is_none_or(|i| {
            !self.facts.varying(&self.v, i)
                && kids(i).iter().all(|d| {
                    syntax::declared_name(*d)
                        .and_then(|id| self.v.decls.get(&id.id()))
                        .is_none_or(|&v| !self.v.varying[v])
                })
        });
        if !varying && init_uniform {
            let c = cond_v.map_or(String::new(), |c| src.of(c).to_string());
            let (head, tail) = match n.kind() {
                "for_statement" => {
                    let i = init.map_or(";".to_string(), |i| {
                        let t = src.of(i).to_string();
                        if t.ends_with(';') {
                            t
                        } else {
                            format!("{t};")
                        }
                    });
                    let u = update.map_or(String::new(), |u| src.of(u).to_string());
                    (format!("for ({i} {c}; {u})"), String::new())
                }
                "while_statement" => (format!("while ({c})"), String::new()),
                _ => ("do".to_string(), format!("while ({c});")),
            };
            let mut assigns = Vec::new();
            for part in [init, update].into_iter().flatten() {
                assigns.extend(self.usage(part).1);
            }
            let body = self.body(body_n, ctx)?;
            out.push(Node::Loop {
                head,
                body,
                tail,
                assigns,
                divergent: false,
            });
            return Ok(());
        }
        if dexit {
            if b || w {
                return Err((
                    "a divergent `break` or `continue` in a loop with a warp operation".into(),
                    n.start_byte(),
                ));
            }
            return self.lane(n, ctx, out, &HashMap::new());
        }
        if !w && body_n.is_some_and(Self::has_loop) {
            return self.lane(n, ctx, out, &HashMap::new());
        }
        // A loop over the lanes still in it: `act` per lane, run while any lane is active.
        let mut scope = Vec::new();
        let mut inner = ctx.clone();
        inner.div = true;
        if let Some(i) = init {
            // The loop's own counter stays uniform (all lanes in the loop agree on it).
            if i.kind() == "declaration" {
                self.stmt(i, ctx, &mut scope)?;
            } else {
                self.lane(i, &inner, &mut scope, &HashMap::new())?;
            }
        }
        let act = self.synth("act");
        let any = self.fresh("any");
        let mut conj: Vec<String> = ctx
            .masks
            .iter()
            .map(|&m| self.name(m).to_string())
            .collect();
        let mut uses: std::collections::BTreeSet<VarId> = ctx.masks.iter().copied().collect();
        if let Some(l) = self.live {
            conj.push(self.name(l).to_string());
            uses.insert(l);
        }
        if conj.is_empty() {
            conj.push("1".into());
        }
        uses.insert(act);
        let a = self.name(act).to_string();
        scope.push(Node::Seg(Seg {
            masks: vec![],
            range: ctx.range.clone(),
            stmts: vec![LStmt {
                text: format!("int {a} = {};", conj.join(" && ")),
                assign: Some(format!("{a} = {};", conj.join(" && "))),
                decls: vec![act],
                uses,
                writes: [act].into(),
            }],
            any: vec![],
        }));
        inner.masks = vec![act];
        inner.acts.push(act);
        let mut body = vec![Node::Uni {
            text: format!("int {any} = 0;"),
            declares: vec![],
            assigns: vec![],
            escapes: false,
        }];
        let cond_seg = |me: &mut Self, body: &mut Vec<Node>| -> R<()> {
            let t = cond_v.map_or("1".to_string(), |c| {
                me.lane_text(c, &inner, &HashMap::new())
            });
            let (mut uses, _) = cond_v.map(|c| me.usage(c)).unwrap_or_default();
            uses.insert(act);
            body.push(Node::Seg(Seg {
                masks: vec![act],
                range: ctx.range.clone(),
                stmts: vec![LStmt {
                    text: format!("{a} = ({t});"),
                    assign: None,
                    decls: vec![],
                    uses,
                    writes: [act].into(),
                }],
                any: vec![(any.clone(), act)],
            }));
            Ok(())
        };
        if n.kind() != "do_statement" {
            cond_seg(self, &mut body)?;
        }
        if let Some(bn) = body_n {
            self.stmt(bn, &inner, &mut body)?;
        }
        let counters = |me: &Self, u: TsNode| {
            me.usage(u)
                .1
                .iter()
                .all(|&v| me.v.vars[v].for_init == Some(n.id()))
        };
        if let Some(u) =
            update.filter(|u| (!ctx.div || counters(self, *u)) && self.uniform_update(*u))
        {
            body.push(Node::Uni {
                text: format!("{};", src.of(u)),
                declares: vec![],
                assigns: self.usage(u).1.into_iter().collect(),
                escapes: false,
            });
        } else if let Some(u) = update {
            let t = self.lane_text(u, &inner, &HashMap::new());
            let (uses, writes) = self.usage(u);
            body.push(Node::Seg(Seg {
                masks: vec![act],
                range: ctx.range.clone(),
                stmts: vec![LStmt {
                    text: format!("{t};"),
                    assign: None,
                    decls: vec![],
                    uses,
                    writes,
                }],
                any: vec![],
            }));
        }
        if n.kind() == "do_statement" {
            cond_seg(self, &mut body)?;
        }
        body.push(Node::Uni {
            text: format!("if (!{any}) break;"),
            declares: vec![],
            assigns: vec![],
            escapes: false,
        });
        scope.push(Node::Loop {
            head: "for (;;)".into(),
            body,
            tail: String::new(),
            assigns: vec![],
            divergent: true,
        });
        out.push(Node::Scope(scope));
        Ok(())
    }

    /// A statement with shuffles: snapshot their operands (R4), then read them.
    pub(super) fn warp_stmt(&mut self, n: TsNode<'t>, ctx: &Ctx, out: &mut Vec<Node>) -> R<()> {
        let src = self.src();
        let e = n.named_child(0).map(strip_parens);
        if n.kind() == "expression_statement"
            && e.is_some_and(|e| {
                e.kind() == "call_expression" && callee(src, e).is_some_and(|c| c == "__syncwarp")
            })
        {
            out.push(Node::WarpSync);
            return Ok(());
        }
        let mut calls = Vec::new();
        let mut bad = None;
        syntax::walk(n, &mut |x| {
            if x.kind() == "call_expression" {
                if let Some(c) = callee(src, x) {
                    if is_shuffle(&c) {
                        calls.push((x, c));
                        return false;
                    }
                    if super::super::analysis::is_sync(&c) && bad.is_none() {
                        let what = match c.strip_prefix('.') {
                            Some(m) => format!("the cooperative-groups call `{m}()`"),
                            None => format!("the warp operation `{c}`"),
                        };
                        bad = Some((what, x.start_byte()));
                    }
                }
            }
            true
        });
        if let Some(b) = bad {
            return Err(b);
        }
        let mut repl = HashMap::new();
        let mut snaps = Vec::new();
        for (call, c) in &calls {
            let a = args(*call);
            if a.len() < 3 {
                return Err((
                    format!("`{c}` with {} arguments", a.len()),
                    call.start_byte(),
                ));
            }
            let mut inner_bad = false;
            syntax::walk(a[1], &mut |x| {
                inner_bad |= x.kind() == "call_expression"
                    && callee(src, x).is_some_and(|c| super::super::analysis::is_sync(&c));
                true
            });
            if inner_bad {
                return Err((
                    "a warp operation inside another's operand".into(),
                    call.start_byte(),
                ));
            }
            let missing = std::cell::RefCell::new(None);
            let ty_expr = render(src, a[1], &|x| {
                let v = *self.v.uses.get(&x.id())?;
                let var = &self.v.vars[v];
                if !self.v.varying[v] && !var.by_ref {
                    return None;
                }
                match &var.ty {
                    Some(t) => Some(format!("std::declval<{t}&>()")),
                    None => {
                        *missing.borrow_mut() = Some(var.name.clone());
                        None
                    }
                }
            });
            if let Some(m) = missing.into_inner() {
                return Err((
                    format!("a shuffle of `{m}`, whose type is `auto`"),
                    call.start_byte(),
                ));
            }
            let name = self.fresh("snap");
            out.push(Node::Snap {
                name: name.clone(),
                ty: format!("std::decay_t<decltype({ty_expr})>"),
            });
            let val = self.lane_text(a[1], ctx, &HashMap::new());
            let (mut uses, writes) = self.usage(a[1]);
            // A lane that returned reads no memory for its operand (R1).
            let val = match self
                .live
                .filter(|_| self.may_dead && self.facts.touches_memory(&self.v, a[1]))
            {
                Some(l) => {
                    uses.insert(l);
                    format!(
                        "{} ? ({val}) : std::decay_t<decltype({val})>{{}}",
                        self.name(l)
                    )
                }
                None => val,
            };
            snaps.push(LStmt {
                text: format!("{name}[cf_ix + 32] = ({val});"),
                assign: None,
                decls: vec![],
                uses,
                writes,
            });
            let f = match c.as_str() {
                "__shfl_sync" => "shfl_idx",
                "__shfl_up_sync" => "shfl_up",
                "__shfl_xor_sync" => "shfl_xor",
                _ if !super::super::rules::rules().r4 => "shfl_down_gather",
                _ => "shfl_down",
            };
            let rest: Vec<String> = a[2..]
                .iter()
                .map(|x| self.lane_text(*x, ctx, &HashMap::new()))
                .collect();
            repl.insert(
                call.id(),
                format!(
                    "cueflow::lanes::{f}({name} + 32 + cf_ix, cf_t & 31u, {})",
                    rest.join(", ")
                ),
            );
        }
        for s in snaps {
            self.push_lane(out, ctx, s);
        }
        out.push(Node::WarpSync);
        self.lane(n, ctx, out, &repl)
    }
}

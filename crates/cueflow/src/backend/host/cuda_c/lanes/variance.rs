//! Variance analysis: which of the kernel's variables and loops vary between the threads of a
//! block. A fixed point: a variable varies when a value assigned to it varies (reads the
//! thread index, memory, a varying variable, a call that may) or when it is assigned in code
//! that only some threads run (under a varying condition, in a loop with a varying trip count).

use std::collections::HashMap;

use tree_sitter::Node;

use super::analysis::{is_pure, is_sync, Summary, Vars};
use super::syntax::{all_kids, callee, kids, strip_parens, Source};

/// The facts the analysis reads.
pub(super) struct Facts<'a> {
    pub src: &'a Source,
    pub sums: &'a HashMap<String, Summary>,
}

impl Facts<'_> {
    /// Whether expression `n` may have a different value in different threads.
    pub(super) fn varying(&self, v: &Vars, n: Node) -> bool {
        match n.kind() {
            "identifier" => {
                v.uses
                    .get(&n.id())
                    .is_some_and(|&i| v.varying[i] || v.vars[i].by_ref)
                    || self.src.of(n) == "threadIdx"
            }
            "subscript_expression"
            | "assignment_expression"
            | "update_expression"
            | "lambda_expression"
            | "new_expression"
            | "delete_expression"
            | "gnu_asm_expression" => true,
            "pointer_expression" => {
                self.src.of(n).starts_with('*')
                    || n.child_by_field_name("argument").is_some_and(|a| {
                        let a = strip_parens(a);
                        a.kind() == "identifier" && v.uses.contains_key(&a.id())
                            || self.varying(v, a)
                    })
            }
            "field_expression" => {
                self.src.of(n).contains("->")
                    || n.child_by_field_name("argument")
                        .is_some_and(|a| self.varying(v, a))
            }
            "call_expression" => match callee(self.src, n) {
                Some(c) if is_sync(&c) => true,
                Some(c) => {
                    let ok = match self.sums.get(&c) {
                        Some(s) if !is_pure(&c) => !(s.tid || s.impure || s.sync || s.opaque),
                        _ => is_pure(&c),
                    };
                    !ok || super::syntax::args(n).iter().any(|a| self.varying(v, *a))
                }
                None => true,
            },
            _ => all_kids(n).into_iter().any(|k| self.varying(v, k)),
        }
    }

    /// Whether statement or expression `n` may touch memory or have an effect other than on
    /// the kernel's own local variables (what a lane that returned must not do).
    pub(super) fn touches_memory(&self, v: &Vars, n: Node) -> bool {
        let mut hit = false;
        super::syntax::walk(n, &mut |x| {
            if hit {
                return false;
            }
            hit = match x.kind() {
                "subscript_expression"
                | "new_expression"
                | "delete_expression"
                | "gnu_asm_expression"
                | "lambda_expression"
                | "throw_statement" => true,
                "pointer_expression" => self.src.of(x).starts_with('*'),
                "field_expression" => self.src.of(x).contains("->"),
                "assignment_expression" | "update_expression" => {
                    let t = x
                        .child_by_field_name("left")
                        .or_else(|| x.child_by_field_name("argument"))
                        .map(strip_parens);
                    !t.is_some_and(|t| t.kind() == "identifier" && v.uses.contains_key(&t.id()))
                }
                "call_expression" => match callee(self.src, x) {
                    Some(c) => match self.sums.get(&c) {
                        Some(s) if !is_pure(&c) => s.impure || s.sync || s.opaque,
                        _ => !is_pure(&c),
                    },
                    None => true,
                },
                _ => false,
            };
            !hit
        });
        hit
    }

    /// Run the fixed point over the kernel's body.
    pub(super) fn analyse(&self, v: &mut Vars, body: Node) {
        // A copy of threadIdx.x stays one only while nothing assigns it or takes its address.
        super::syntax::walk(body, &mut |x| {
            let t = match x.kind() {
                "assignment_expression" => x.child_by_field_name("left"),
                "update_expression" | "pointer_expression" => x.child_by_field_name("argument"),
                _ => None,
            };
            if let Some(&i) = t.map(strip_parens).and_then(|t| v.uses.get(&t.id())) {
                v.vars[i].tid_alias = false;
            }
            true
        });
        for i in 0..v.vars.len() {
            if v.vars[i].by_ref {
                v.varying[i] = true;
            }
        }
        loop {
            let mut changed = false;
            self.stmt(v, body, false, &mut Vec::new(), &mut changed);
            if !changed {
                return;
            }
        }
    }

    fn site(&self, v: &mut Vars, var: usize, rhs: Option<Node>, div: bool, changed: &mut bool) {
        if !v.varying[var] && (div || rhs.is_some_and(|r| self.varying(v, r))) {
            v.varying[var] = true;
            *changed = true;
        }
    }

    /// Assignments inside expression `n`, made in divergent code when `div`.
    fn assignments(&self, v: &mut Vars, n: Node, div: bool, changed: &mut bool) {
        for k in all_kids(n) {
            self.assignments(v, k, div, changed);
        }
        let target = match n.kind() {
            "assignment_expression" => n.child_by_field_name("left"),
            "update_expression" => n.child_by_field_name("argument"),
            "pointer_expression" if self.src.of(n).starts_with('&') => {
                n.child_by_field_name("argument")
            }
            _ => None,
        };
        if let Some(t) = target.map(strip_parens) {
            if let Some(&var) = v.uses.get(&t.id()) {
                let rhs = n.child_by_field_name("right");
                let addr = n.kind() == "pointer_expression";
                self.site(v, var, rhs, div || addr, changed);
            }
        }
    }

    /// `loops`: enclosing loops (node id, or `None` for a switch) and whether code was
    /// divergent where their body began.
    fn stmt(
        &self,
        v: &mut Vars,
        n: Node,
        div: bool,
        loops: &mut Vec<(Option<usize>, bool)>,
        changed: &mut bool,
    ) {
        match n.kind() {
            "declaration" => {
                // One declaration declares its variables together: varying if any one is.
                let ids: Vec<usize> = n
                    .children_by_field_name("declarator", &mut n.walk())
                    .filter_map(super::syntax::declared_name)
                    .filter_map(|id| v.decls.get(&id.id()).copied())
                    .collect();
                if ids.iter().any(|&i| v.varying[i]) {
                    for &i in &ids {
                        if !v.varying[i] {
                            v.varying[i] = true;
                            *changed = true;
                        }
                    }
                }
                for d in n.children_by_field_name("declarator", &mut n.walk()) {
                    if let Some(val) = d.child_by_field_name("value") {
                        self.assignments(v, val, div, changed);
                        if let Some(id) = super::syntax::declared_name(d) {
                            if let Some(&var) = v.decls.get(&id.id()) {
                                // A loop's own counter: every lane that enters the loop starts
                                // it at the same value (uniform among the lanes in the loop).
                                let d = div && v.vars[var].for_init.is_none();
                                self.site(v, var, Some(val), d, changed);
                            }
                        }
                    }
                }
            }
            "if_statement" => {
                let c = n.child_by_field_name("condition");
                if let Some(c) = c {
                    self.assignments(v, c, div, changed);
                }
                let d = div || c.is_some_and(|c| self.varying(v, c));
                for f in ["consequence", "alternative"] {
                    if let Some(b) = n.child_by_field_name(f) {
                        self.stmt(v, b, d, loops, changed);
                    }
                }
            }
            "for_statement" | "while_statement" | "do_statement" => {
                let cond = n.child_by_field_name("condition");
                let init = n.child_by_field_name("initializer");
                if let Some(i) = init {
                    self.stmt(v, i, div, loops, changed);
                    if i.kind() != "declaration" {
                        self.assignments(v, i, div, changed);
                    }
                }
                let vary =
                    cond.is_some_and(|c| self.varying(v, c)) || v.divergent_exits.contains(&n.id());
                if vary && v.varying_loops.insert(n.id()) {
                    *changed = true;
                }
                let d = div || vary;
                if let Some(c) = cond {
                    self.assignments(v, c, d, changed);
                }
                loops.push((Some(n.id()), d));
                if let Some(b) = n.child_by_field_name("body") {
                    self.stmt(v, b, d, loops, changed);
                }
                loops.pop();
                if let Some(u) = n.child_by_field_name("update") {
                    // The loop's own counter (declared in its initializer) keeps one value
                    // for all threads in the loop when it is updated uniformly.
                    let own = {
                        let mut own = true;
                        super::syntax::walk(u, &mut |x| {
                            if let Some(&var) = v.uses.get(&x.id()) {
                                if v.vars[var].for_init != Some(n.id()) {
                                    own = false;
                                }
                            }
                            true
                        });
                        own
                    };
                    self.assignments(v, u, if own { false } else { d }, changed);
                }
            }
            "switch_statement" => {
                let c = n.child_by_field_name("condition");
                let d = div || c.is_some_and(|c| self.varying(v, c));
                loops.push((None, d));
                if let Some(b) = n.child_by_field_name("body") {
                    self.stmt(v, b, d, loops, changed);
                }
                loops.pop();
            }
            "break_statement" | "continue_statement" => {
                let brk = n.kind() == "break_statement";
                let target = loops.iter().rev().find(|(l, _)| brk || l.is_some());
                if let Some(&(Some(l), entry_div)) = target {
                    if div && !entry_div && v.divergent_exits.insert(l) {
                        *changed = true;
                    }
                }
            }
            "expression_statement" | "return_statement" => self.assignments(v, n, div, changed),
            _ => {
                for k in kids(n) {
                    self.stmt(v, k, div, loops, changed);
                }
            }
        }
    }
}

//! Lane values recomputed instead of kept: a per-thread constant computed from the thread and
//! block indices and unchanged parameters (`const size_t i = blockIdx.x * blockDim.x +
//! threadIdx.x;`) is recomputed at the top of each thread loop that uses it, rather than kept
//! in an array across thread loops. Recomputed, it is an affine function of the loop's index
//! the vectorizer sees through, so `data[i]` is a contiguous (masked) vector access; read back
//! from an array, it is an index per lane (a gather, or a scalar loop for stores).

use std::collections::{HashMap, HashSet};

use tree_sitter::Node;

use super::analysis::{is_pure, Summary, Vars};
use super::syntax::{args, callee, declared_name, kids, render, strip_parens, walk, Func, Source};

/// The block's index variables a recomputed value may read (fields `x`, `y`, `z`).
const BUILTINS: [&str; 4] = ["threadIdx", "blockIdx", "blockDim", "gridDim"];

/// Give `remat` to each varying variable of the kernel body `body` that can be recomputed:
/// declared with an initializer, never assigned or addressed again, a scalar of a spelled
/// type, its initializer built only of literals, the block's index variables, parameters
/// nothing assigns (and no other variable's name hides), copies of `threadIdx.x` and other
/// such values, with arithmetic, casts and conditionals (no memory, no calls, no division by
/// anything but a literal; calls only of the math library's pure functions and of the unit's
/// functions that touch no memory and hold no loop, call or division, such as
/// `cf_global_index()`).
pub(super) fn mark(
    src: &Source,
    funcs: &HashMap<String, Vec<Func>>,
    sums: &HashMap<String, Summary>,
    v: &mut Vars,
    body: Node,
) {
    let mut assigned = HashSet::new();
    walk(body, &mut |x| {
        let t = match x.kind() {
            "assignment_expression" => x.child_by_field_name("left"),
            "update_expression" | "pointer_expression" => x.child_by_field_name("argument"),
            _ => None,
        };
        if let Some(&i) = t.map(strip_parens).and_then(|t| v.uses.get(&t.id())) {
            assigned.insert(i);
        }
        true
    });
    // Names declared more than once (a local hiding a parameter): not read by name.
    let mut seen = HashSet::new();
    let hidden: HashSet<String> = v
        .vars
        .iter()
        .filter(|x| !seen.insert(x.name.clone()))
        .map(|x| x.name.clone())
        .collect();
    // Declarations in source order: a value refers only to ones declared before it.
    let mut decls = Vec::new();
    walk(body, &mut |x| {
        if x.kind() == "declaration" {
            decls.push(x);
        }
        true
    });
    for decl in decls {
        for d in decl.children_by_field_name("declarator", &mut decl.walk()) {
            let (Some(id), Some(val)) = (declared_name(d), d.child_by_field_name("value")) else {
                continue;
            };
            let Some(&i) = v.decls.get(&id.id()) else {
                continue;
            };
            let var = &v.vars[i];
            let candidate = v.varying[i]
                && !var.by_ref
                && !var.param
                && var.dims.is_empty()
                && var.ty.is_some()
                && var.for_init.is_none()
                && !var.tid_alias
                && !assigned.contains(&i)
                && !hidden.contains(&var.name)
                && val.kind() != "initializer_list";
            let cx = Cx {
                src,
                funcs,
                sums,
                v,
                assigned: &assigned,
                hidden: &hidden,
            };
            if candidate && cx.pure(val) {
                let text = render(src, val, &|x| cx.inline(x));
                v.vars[i].remat = Some(text);
            }
        }
    }
}

struct Cx<'a, 't> {
    src: &'a Source,
    funcs: &'a HashMap<String, Vec<Func<'t>>>,
    sums: &'a HashMap<String, Summary>,
    v: &'a Vars,
    assigned: &'a HashSet<usize>,
    hidden: &'a HashSet<String>,
}

impl Cx<'_, '_> {
    /// The text to put in place of node `x`: a copy of the thread index or another recomputed
    /// value by its definition (so the text needs no other lane variable in scope), a call of
    /// a function that reads `threadIdx` by its lane clone (as the lane code calls it).
    fn inline(&self, x: Node) -> Option<String> {
        let v = self.v;
        match x.kind() {
            "identifier" => {
                let var = &v.vars[*v.uses.get(&x.id())?];
                let ty = var.ty.as_deref()?;
                if var.tid_alias {
                    return Some(format!("(({ty})threadIdx.x)"));
                }
                var.remat.as_ref().map(|r| format!("(({ty})({r}))"))
            }
            "call_expression" => {
                let c = callee(self.src, x)?;
                if !self.sums.get(&c).is_some_and(|s| s.tid) {
                    return None;
                }
                let mut all = vec!["threadIdx".to_string()];
                all.extend(
                    args(x)
                        .iter()
                        .map(|a| render(self.src, *a, &|y| self.inline(y))),
                );
                Some(format!("{c}__cfl({})", all.join(", ")))
            }
            _ => None,
        }
    }

    /// Whether expression `n` computes the same value wherever a lane evaluates it, without
    /// touching memory or faulting.
    fn pure(&self, n: Node) -> bool {
        let (src, v) = (self.src, self.v);
        match n.kind() {
            "number_literal" | "true" | "false" | "char_literal" => true,
            "identifier" => match v.uses.get(&n.id()) {
                Some(&i) => {
                    let var = &v.vars[i];
                    if var.param {
                        !self.assigned.contains(&i)
                            && !var.by_ref
                            && !self.hidden.contains(&var.name)
                            && var.ty.is_some()
                    } else {
                        var.tid_alias || var.remat.is_some()
                    }
                }
                None => false,
            },
            "field_expression" => {
                let arg = n.child_by_field_name("argument").map(strip_parens);
                let field = n.child_by_field_name("field").map(|f| src.of(f));
                !src.of(n).contains("->")
                    && arg
                        .is_some_and(|a| a.kind() == "identifier" && BUILTINS.contains(&src.of(a)))
                    && matches!(field, Some("x" | "y" | "z"))
            }
            "parenthesized_expression" | "conditional_expression" => {
                kids(n).into_iter().all(|k| self.pure(k))
            }
            "cast_expression" => n.child_by_field_name("value").is_some_and(|x| self.pure(x)),
            "unary_expression" => n
                .child_by_field_name("argument")
                .is_some_and(|x| self.pure(x)),
            "binary_expression" => {
                let (Some(l), Some(r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) else {
                    return false;
                };
                // A division recomputed for a lane that returned could divide by zero where
                // the kernel did not: only by a nonzero literal.
                let r_ok = if divides(src, n) {
                    nonzero_literal(src, r)
                } else {
                    self.pure(r)
                };
                r_ok && self.pure(l)
            }
            "call_expression" => {
                let Some(c) = callee(src, n) else {
                    return false;
                };
                let args_pure = args(n).iter().all(|a| self.pure(*a));
                if is_pure(&c) && !self.sums.contains_key(&c) {
                    return args_pure;
                }
                let simple = match (self.funcs.get(&c).map(Vec::as_slice), self.sums.get(&c)) {
                    (Some([f]), Some(s)) => {
                        !f.template && !s.impure && !s.sync && !s.opaque && simple_body(src, f.body)
                    }
                    _ => false,
                };
                simple && args_pure
            }
            _ => false,
        }
    }
}

/// A `/` or `%` (which fault on an integer zero).
fn divides(src: &Source, n: Node) -> bool {
    let op = n.child_by_field_name("operator").map(|o| src.of(o));
    matches!(op, Some("/" | "%" | "/=" | "%="))
}

fn nonzero_literal(src: &Source, r: Node) -> bool {
    let r = strip_parens(r);
    r.kind() == "number_literal"
        && src
            .of(r)
            .trim_start_matches("0x")
            .trim_start_matches("0X")
            .chars()
            .any(|c| c.is_ascii_hexdigit() && c != '0')
}

/// A function body that ends wherever it is called and cannot fault: no loop, no call, no
/// division but by a nonzero literal, no `goto`.
fn simple_body(src: &Source, body: Node) -> bool {
    let mut ok = true;
    walk(body, &mut |x| {
        ok &= match x.kind() {
            "for_statement" | "while_statement" | "do_statement" | "goto_statement"
            | "call_expression" => false,
            "binary_expression" | "assignment_expression" if divides(src, x) => x
                .child_by_field_name("right")
                .is_some_and(|r| nonzero_literal(src, r)),
            _ => true,
        };
        ok
    });
    ok
}

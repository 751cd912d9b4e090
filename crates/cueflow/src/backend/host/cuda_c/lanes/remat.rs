//! Lane values recomputed instead of kept: a per-thread constant computed from the thread and
//! block indices and unchanged parameters (`const size_t i = blockIdx.x * blockDim.x +
//! threadIdx.x;`) is recomputed at the top of each thread loop that uses it, rather than kept
//! in an array across thread loops. Recomputed, it is an affine function of the loop's index
//! the vectorizer sees through, so `data[i]` is a contiguous (masked) vector access; read back
//! from an array, it is an index per lane (a gather, or a scalar loop for stores).

use std::collections::HashSet;

use tree_sitter::Node;

use super::analysis::Vars;
use super::syntax::{declared_name, kids, render, strip_parens, walk, Source};

/// The block's index variables a recomputed value may read (fields `x`, `y`, `z`).
const BUILTINS: [&str; 4] = ["threadIdx", "blockIdx", "blockDim", "gridDim"];

/// Give `remat` to each varying variable of the kernel body `body` that can be recomputed:
/// declared with an initializer, never assigned or addressed again, a scalar of a spelled
/// type, its initializer built only of literals, the block's index variables, parameters
/// nothing assigns (and no other variable's name hides), copies of `threadIdx.x` and other
/// such values, with arithmetic, casts and conditionals (no memory, no calls, no division by
/// anything but a literal).
pub(super) fn mark(src: &Source, v: &mut Vars, body: Node) {
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
            if candidate && pure(src, v, &assigned, &hidden, val) {
                let text = render(src, val, &|x| inline(src, v, x));
                v.vars[i].remat = Some(text);
            }
        }
    }
}

/// The definition to put in place of identifier `x` when it names a copy of the thread index
/// or another recomputed value (so the text needs no other lane variable in scope).
fn inline(src: &Source, v: &Vars, x: Node) -> Option<String> {
    if x.kind() != "identifier" {
        return None;
    }
    let var = &v.vars[*v.uses.get(&x.id())?];
    let ty = var.ty.as_deref()?;
    if var.tid_alias {
        return Some(format!("(({ty})threadIdx.x)"));
    }
    let _ = src;
    var.remat.as_ref().map(|r| format!("(({ty})({r}))"))
}

/// Whether expression `n` computes the same value wherever a lane evaluates it, without
/// touching memory or faulting.
fn pure(
    src: &Source,
    v: &Vars,
    assigned: &HashSet<usize>,
    hidden: &HashSet<String>,
    n: Node,
) -> bool {
    match n.kind() {
        "number_literal" | "true" | "false" | "char_literal" => true,
        "identifier" => match v.uses.get(&n.id()) {
            Some(&i) => {
                let var = &v.vars[i];
                if var.param {
                    !assigned.contains(&i)
                        && !var.by_ref
                        && !hidden.contains(&var.name)
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
                && arg.is_some_and(|a| a.kind() == "identifier" && BUILTINS.contains(&src.of(a)))
                && matches!(field, Some("x" | "y" | "z"))
        }
        "parenthesized_expression" | "conditional_expression" => kids(n)
            .into_iter()
            .all(|k| pure(src, v, assigned, hidden, k)),
        "cast_expression" => n
            .child_by_field_name("value")
            .is_some_and(|x| pure(src, v, assigned, hidden, x)),
        "unary_expression" => n
            .child_by_field_name("argument")
            .is_some_and(|x| pure(src, v, assigned, hidden, x)),
        "binary_expression" => {
            let op = n.child_by_field_name("operator").map(|o| src.of(o));
            let (Some(l), Some(r)) = (
                n.child_by_field_name("left"),
                n.child_by_field_name("right"),
            ) else {
                return false;
            };
            // A division recomputed for a lane that returned could divide by zero where the
            // kernel did not: only by a nonzero literal.
            let divides = matches!(op, Some("/" | "%"));
            let r_ok = if divides {
                let r = strip_parens(r);
                r.kind() == "number_literal"
                    && src
                        .of(r)
                        .trim_start_matches("0x")
                        .trim_start_matches("0X")
                        .chars()
                        .any(|c| c.is_ascii_hexdigit() && c != '0')
            } else {
                pure(src, v, assigned, hidden, r)
            };
            r_ok && pure(src, v, assigned, hidden, l)
        }
        _ => false,
    }
}

//! The work-item-loop compiler: CUDA C kernels on the host backend with a block's threads as
//! the lanes of loops the C++ compiler vectorizes, instead of one fiber per thread.
//!
//! The kernel (after the preprocessor) and the functions it calls are parsed with
//! tree-sitter's CUDA grammar ([`syntax`]); a fixed point finds which values vary between the
//! threads of a block ([`variance`]); the body becomes a block program ([`build`], [`ir`]):
//! uniform statements, loops and `if`s run once per block with the loop over the block's
//! threads pushed inside them, the kernel is cut at barriers and warp operations, divergent
//! `return`s become a live mask, loops with varying trip counts run while any lane is active,
//! conditions on the thread index narrow the loop's range. [`emit`] writes it as C++ (the
//! research note's rules R1–R5: masks only on memory and calls, values kept across thread
//! loops in arrays read into scalars, uniform bounds into the loop bound, shuffle operands
//! snapshotted, chunks of 64 threads for barrier-free runs).
//!
//! What it does not cover runs as fibers (the prelude's scheduler), chosen per kernel with a
//! reason ([`Plan::path`]).

mod analysis;
mod build;
mod emit;
mod ir;
mod rewrite;
mod rules;
mod syntax;
mod variance;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};

use syntax::{Func, Source};

pub(super) use rules::{rules, tag};

/// What to append to the kernel's translation unit for its entry (the path it takes is
/// recorded in it: `cueflow_path_<sym>`).
pub(crate) struct Plan {
    pub code: String,
}

fn c_string(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' | '\\' => {
                o.push('\\');
                o.push(ch);
            }
            '\n' => o.push_str("\\n"),
            c if c.is_ascii() && !c.is_ascii_control() => o.push(c),
            _ => o.push('?'),
        }
    }
    o.push('"');
    o
}

/// The entry for fibers, saying why.
pub(super) fn fibers(sym: &str, expr: &str, reason: &str) -> Plan {
    Plan {
        code: format!(
            "CUEFLOW_ENTRY({sym}, {expr})\nCUEFLOW_PATH({sym}, {})\n",
            c_string(&format!("fibers: {reason}"))
        ),
    }
}

/// Plan the entry `entry` (symbol `sym`, address expression `expr`) of the unit whose
/// preprocessed text is `pre`.
pub(super) fn plan(pre: &str, entry: &str, sym: &str, expr: &str) -> Plan {
    match lanes(pre, entry, sym, expr) {
        Ok(code) => Plan { code },
        Err(why) => fibers(sym, expr, &why),
    }
}

fn namespaced(ns: &[String], text: &str) -> String {
    let mut s = String::new();
    for n in ns {
        s.push_str(&format!("namespace {n} {{\n"));
    }
    s.push_str(text);
    for _ in ns {
        s.push_str("}\n");
    }
    s
}

fn lanes(pre: &str, entry: &str, sym: &str, expr: &str) -> Result<String, String> {
    if !entry.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "the entry `{entry}` is a template or name expression"
        ));
    }
    let src = Source::new(pre);
    let tree = syntax::parse(&src.text).ok_or("the source could not be parsed")?;
    let funcs = syntax::functions(&src, tree.root_node());
    let kernel = match funcs.get(entry).map(Vec::as_slice) {
        Some([f]) if !f.template => *f,
        Some([_]) => return Err("the kernel is a template".into()),
        Some(_) => return Err(format!("`{entry}` is overloaded")),
        None => return Err(format!("the definition of `{entry}` was not found")),
    };
    let at = |(why, byte): (String, usize)| format!("{why} at line {}", src.line(byte));
    let mut err = None;
    syntax::walk(kernel.body, &mut |n| {
        if n.is_error() || n.is_missing() {
            err.get_or_insert((
                "a construct the parser does not know".to_string(),
                n.start_byte(),
            ));
        }
        true
    });
    if let Some(e) = err {
        return Err(at(e));
    }
    let sums = analysis::summarize(&src, &funcs);
    let mut vars = analysis::resolve(&src, kernel.def);
    if let Some(u) = vars.unsupported.take() {
        return Err(at(u));
    }
    let facts = variance::Facts {
        src: &src,
        sums: &sums,
    };
    facts.analyse(&mut vars, kernel.body);
    let mut b = build::Builder::new(
        variance::Facts {
            src: &src,
            sums: &sums,
        },
        vars,
    );
    let nodes = b.kernel(kernel.body).map_err(at)?;
    let nodes = if rules().r5 {
        ir::chunkify(nodes)
    } else {
        nodes
    };
    let lane: Vec<bool> = b.v.varying.clone();
    let mut e = emit::Emitter::new(&b.v.vars, &lane, &nodes);
    e.list(&nodes, None)?;
    let body = e.out;
    let clones = clone_functions(&src, &funcs, &sums, b.clones.clone())?;
    let fd = syntax::fn_declarator(kernel.def).ok_or("no declarator")?;
    let params = fd
        .child_by_field_name("parameters")
        .map_or("()", |p| src.of(p));
    let params = params[1..params.len() - 1].trim();
    let params = if params.is_empty() || params == "void" {
        String::new()
    } else {
        format!(", {params}")
    };
    let ns = syntax::namespaces(&src, kernel.def);
    let func = format!(
        "static void cf_lanes_{sym}(const unsigned cf_n{params}) {{\n\
         const dim3 blockDim = ::blockDim; const uint3 blockIdx = ::blockIdx; const dim3 gridDim = ::gridDim;\n\
         (void)blockDim; (void)blockIdx; (void)gridDim;\n\
         const unsigned cf_t0 = 0u, cf_t1 = cf_n; (void)cf_t0; (void)cf_t1;\n\
         {{\n{body}}}\ncf_end:;\n}}\n"
    );
    let qual: String = ns
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| format!("{n}::"))
        .collect();
    Ok(format!(
        "#line 1 \"<cueflow lanes>\"\n{clones}{}CUEFLOW_LANES_ENTRY({sym}, {expr}, &::{qual}cf_lanes_{sym})\n",
        namespaced(&ns, &func)
    ))
}

/// Clones of the functions in `names` (and those they call) that take `threadIdx` as their
/// first parameter: prototypes first, then definitions.
fn clone_functions(
    src: &Source,
    funcs: &HashMap<String, Vec<Func>>,
    sums: &HashMap<String, analysis::Summary>,
    mut todo: BTreeSet<String>,
) -> Result<String, String> {
    let mut done = BTreeSet::new();
    let (mut protos, mut defs) = (String::new(), String::new());
    let empty = HashMap::new();
    while let Some(name) = todo.pop_first() {
        if !done.insert(name.clone()) {
            continue;
        }
        let f = match funcs.get(&name).map(Vec::as_slice) {
            Some([f]) if !f.template => *f,
            _ => {
                return Err(format!(
                    "`{name}` reads threadIdx and cannot be cloned (a template or overloads)"
                ))
            }
        };
        let fd = syntax::fn_declarator(f.def).ok_or("no declarator")?;
        let (id, params) = (
            fd.child_by_field_name("declarator"),
            fd.child_by_field_name("parameters"),
        );
        let rw = rewrite::Rw {
            src,
            sums,
            root: f.def.id(),
            repl: &empty,
            ret: None,
            clones: RefCell::new(Vec::new()),
            label: RefCell::new(None),
            next: Cell::new(0),
        };
        let piece = |proto: bool| {
            syntax::render(src, f.def, &|x| {
                if id.is_some_and(|i| i.id() == x.id()) {
                    return Some(format!("{name}__cfl"));
                }
                if let Some(p) = params.filter(|p| p.id() == x.id()) {
                    let inner = src.of(p)[1..src.of(p).len() - 1].trim();
                    return Some(if inner.is_empty() || inner == "void" {
                        "(const uint3 threadIdx)".to_string()
                    } else {
                        format!("(const uint3 threadIdx, {inner})")
                    });
                }
                if proto && x.id() == f.body.id() {
                    return Some(";".into());
                }
                rw.hook(x)
            })
        };
        let ns = syntax::namespaces(src, f.def);
        protos.push_str(&namespaced(&ns, &format!("{}\n", piece(true))));
        defs.push_str(&namespaced(&ns, &format!("{}\n", piece(false))));
        todo.extend(
            rw.clones
                .into_inner()
                .into_iter()
                .filter(|c| !done.contains(c)),
        );
    }
    Ok(format!("{protos}{defs}"))
}

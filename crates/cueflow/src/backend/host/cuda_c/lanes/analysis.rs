//! What the lane compiler knows about a kernel before it rewrites it: which calls synchronize,
//! which functions read the thread index or touch memory, the kernel's local variables (each
//! use resolved to its declaration) and which of them vary between the threads of a block
//! (variance analysis: a fixed point over the tree).

use std::collections::{HashMap, HashSet};

use tree_sitter::Node;

use super::syntax::{self, callee, declared_name, kids, strip_parens, walk, Func, Source};

/// Calls that are block barriers.
pub(super) fn is_barrier(name: &str) -> bool {
    matches!(
        name,
        "__syncthreads" | "cg::sync" | "cooperative_groups::sync" | ".sync"
    )
}

/// Warp operations the lane compiler rewrites (shuffles).
pub(super) fn is_shuffle(name: &str) -> bool {
    matches!(
        name,
        "__shfl_sync" | "__shfl_up_sync" | "__shfl_down_sync" | "__shfl_xor_sync"
    )
}

/// Every call that synchronizes threads (barriers, warp operations, votes, cooperative groups).
pub(super) fn is_sync(name: &str) -> bool {
    if is_pure(name) {
        return false;
    }
    is_barrier(name)
        || is_shuffle(name)
        || name.starts_with("__syncthreads")
        || name.starts_with("__syncwarp")
        || name.starts_with("__ballot")
        || name.starts_with("__any")
        || name.starts_with("__all")
        || name.starts_with("__activemask")
        || name.starts_with("__reduce_")
        || name.starts_with("__match_")
        || name.starts_with("__shfl")
        || name.starts_with("cg::")
        || name.starts_with("cooperative_groups::")
        || name.starts_with('.') && name != ".x"
}

/// Calls with no side effect and no memory access, whose result depends only on the arguments.
pub(super) fn is_pure(name: &str) -> bool {
    const PURE: &[&str] = &[
        "min",
        "max",
        "abs",
        "fabs",
        "fabsf",
        "sqrt",
        "sqrtf",
        "fma",
        "fmaf",
        "fmin",
        "fminf",
        "fmax",
        "fmaxf",
        "floor",
        "floorf",
        "ceil",
        "ceilf",
        "trunc",
        "truncf",
        "round",
        "roundf",
        "rint",
        "rintf",
        "nearbyintf",
        "exp",
        "expf",
        "exp2f",
        "log",
        "logf",
        "log2f",
        "log10f",
        "sin",
        "sinf",
        "cos",
        "cosf",
        "tan",
        "tanf",
        "pow",
        "powf",
        "tanh",
        "tanhf",
        "erff",
        "rsqrtf",
        "rsqrt",
        "copysignf",
        "fmodf",
        "fmod",
        "hypotf",
        "cbrtf",
        "atan2f",
        "isnan",
        "isinf",
        "isfinite",
        "signbit",
        "static_cast",
        "reinterpret_cast",
        "const_cast",
        "__saturatef",
        "__popc",
        "__popcll",
        "__clz",
        "__clzll",
        "__ffs",
        "__ffsll",
        "__brev",
        "__mul24",
        "__umul24",
        "__mulhi",
        "__umulhi",
        "__fdividef",
        "__expf",
        "__logf",
        "__sinf",
        "__cosf",
        "__powf",
        "cg::this_thread_block",
        "cooperative_groups::this_thread_block",
        "dim3",
    ];
    PURE.contains(&name)
        || name.starts_with("make_")
        || (name.starts_with("__")
            && (name.ends_with("_rn") || name.ends_with("_rz") || name.contains("_as_")))
        || name.starts_with("__float2")
        || name.starts_with("__int2")
        || name.starts_with("__uint2")
        || name.starts_with("__double2")
}

/// What a function of the unit does, transitively through the functions it calls.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Summary {
    /// Reads `threadIdx` (needs a lane clone that takes it).
    pub tid: bool,
    /// Synchronizes (a barrier, warp operation or cooperative group).
    pub sync: bool,
    /// Touches memory or calls something that may.
    pub impure: bool,
    /// Cannot be analysed (a template, overloads, recursion through them).
    pub opaque: bool,
}

/// Summaries of the unit's functions, by name.
pub(super) fn summarize(
    src: &Source,
    funcs: &HashMap<String, Vec<Func>>,
) -> HashMap<String, Summary> {
    let mut out: HashMap<String, Summary> = HashMap::new();
    let mut calls: HashMap<String, Vec<String>> = HashMap::new();
    for (name, defs) in funcs {
        let mut s = Summary {
            opaque: defs.len() != 1 || defs[0].template,
            ..Summary::default()
        };
        let mut called = Vec::new();
        for f in defs {
            let locals = declared_locals(src, f.def);
            walk(f.body, &mut |n| {
                match n.kind() {
                    "identifier" if src.of(n) == "threadIdx" => s.tid = true,
                    "subscript_expression"
                    | "new_expression"
                    | "delete_expression"
                    | "gnu_asm_expression"
                    | "lambda_expression" => s.impure = true,
                    "pointer_expression" if src.of(n).starts_with('*') => s.impure = true,
                    "field_expression" if src.of(n).contains("->") => s.impure = true,
                    "assignment_expression" | "update_expression" => {
                        let t = n
                            .child_by_field_name("left")
                            .or_else(|| n.child_by_field_name("argument"));
                        let local = t.map(strip_parens).is_some_and(|t| {
                            t.kind() == "identifier" && locals.contains(src.of(t))
                        });
                        if !local {
                            s.impure = true;
                        }
                    }
                    "call_expression" => {
                        if let Some(c) = callee(src, n) {
                            if is_sync(&c) {
                                s.sync = true;
                            } else if funcs.contains_key(&c) {
                                called.push(c);
                            } else if !is_pure(&c) {
                                s.impure = true;
                            }
                        } else {
                            s.impure = true;
                        }
                    }
                    _ => {}
                }
                true
            });
        }
        out.insert(name.clone(), s);
        calls.insert(name.clone(), called);
    }
    loop {
        let mut changed = false;
        for (name, called) in &calls {
            let mut s = out[name];
            for c in called {
                let t = out[c];
                let merged = Summary {
                    tid: s.tid || t.tid,
                    sync: s.sync || t.sync,
                    impure: s.impure || t.impure,
                    opaque: s.opaque || t.opaque,
                };
                if format!("{merged:?}") != format!("{s:?}") {
                    s = merged;
                    changed = true;
                }
            }
            out.insert(name.clone(), s);
        }
        if !changed {
            return out;
        }
    }
}

/// Names declared in a function (parameters and local declarations).
fn declared_locals(src: &Source, def: Node) -> HashSet<String> {
    let mut set = HashSet::new();
    walk(def, &mut |n| {
        if matches!(n.kind(), "declaration" | "parameter_declaration") {
            for d in n.children_by_field_name("declarator", &mut n.walk()) {
                if let Some(id) = declared_name(d) {
                    set.insert(src.of(id).to_string());
                }
            }
        }
        true
    });
    set
}

/// A local variable (or parameter) of the kernel.
#[derive(Clone, Debug)]
pub(super) struct Var {
    pub name: String,
    /// The element type to keep it in an array (`None`: `auto` or unknown).
    pub ty: Option<String>,
    /// Array dimensions (`[4]`), empty for scalars.
    pub dims: String,
    pub param: bool,
    /// Its address is taken or it is an array: always varying, kept by reference.
    pub by_ref: bool,
    /// Declared in the initializer of this `for` statement (node id).
    pub for_init: Option<usize>,
    /// Declared `T v = threadIdx.x` and never assigned again, with an integer type of 32 bits
    /// or more.
    pub tid_alias: bool,
}

/// The kernel's variables and the resolution of every identifier use to one of them.
pub(super) struct Vars {
    pub vars: Vec<Var>,
    /// Identifier node id → variable.
    pub uses: HashMap<usize, usize>,
    /// Declarator name node id → variable.
    pub decls: HashMap<usize, usize>,
    pub varying: Vec<bool>,
    /// Loops (node id) that must run as divergent loops.
    pub varying_loops: HashSet<usize>,
    /// Loops with a break or continue in divergent code.
    pub divergent_exits: HashSet<usize>,
    /// Why the kernel cannot be analysed, with the node.
    pub unsupported: Option<(String, usize)>,
}

/// The element type text of declaration `decl` for declarator `d`; `None` for `auto`.
fn type_of(src: &Source, decl: Node, d: Node) -> (Option<String>, String, bool) {
    let mut spec = Vec::new();
    for k in kids(decl) {
        match k.kind() {
            "type_qualifier" if src.of(k) != "__shared__" => spec.push(src.of(k).to_string()),
            "primitive_type"
            | "sized_type_specifier"
            | "type_identifier"
            | "qualified_identifier"
            | "template_type"
            | "struct_specifier" => spec.push(src.of(k).to_string()),
            "placeholder_type_specifier" | "auto" => return (None, String::new(), true),
            _ => {}
        }
    }
    if spec.is_empty() || spec.iter().any(|s| s.contains("auto")) {
        return (None, String::new(), true);
    }
    let (mut stars, mut dims, mut is_ref) = (String::new(), String::new(), false);
    let mut x = d;
    loop {
        match x.kind() {
            "identifier" => break,
            "pointer_declarator" => {
                stars.push('*');
                for q in kids(x) {
                    if q.kind() == "type_qualifier" {
                        stars.push_str(&format!(" {} ", src.of(q)));
                    }
                }
            }
            "array_declarator" => {
                let size = x.child_by_field_name("size").map_or("", |s| src.of(s));
                dims = format!("{dims}[{size}]");
            }
            "reference_declarator" => is_ref = true,
            _ => {}
        }
        match x
            .child_by_field_name("declarator")
            .or_else(|| x.named_child(0))
        {
            Some(n) if n.id() != x.id() => x = n,
            _ => break,
        }
    }
    if is_ref {
        return (None, dims, true);
    }
    (
        Some(format!("std::remove_cv_t<{} {stars}>", spec.join(" "))),
        dims,
        false,
    )
}

/// Resolve the kernel's variables (`def`: the kernel's definition).
pub(super) fn resolve(src: &Source, def: Node) -> Vars {
    let mut v = Vars {
        vars: Vec::new(),
        uses: HashMap::new(),
        decls: HashMap::new(),
        varying: Vec::new(),
        varying_loops: HashSet::new(),
        divergent_exits: HashSet::new(),
        unsupported: None,
    };
    let mut scopes: Vec<HashMap<String, usize>> = vec![HashMap::new()];
    if let Some(params) =
        syntax::fn_declarator(def).and_then(|d| d.child_by_field_name("parameters"))
    {
        for p in kids(params) {
            if let Some(d) = p.child_by_field_name("declarator") {
                if let Some(id) = declared_name(d) {
                    let (ty, dims, _) = type_of(src, p, d);
                    let i = v.vars.len();
                    v.vars.push(Var {
                        name: src.of(id).to_string(),
                        ty,
                        dims,
                        param: true,
                        by_ref: false,
                        for_init: None,
                        tid_alias: false,
                    });
                    v.decls.insert(id.id(), i);
                    scopes[0].insert(src.of(id).to_string(), i);
                }
            }
        }
    }
    if let Some(body) = def.child_by_field_name("body") {
        resolve_node(src, body, &mut v, &mut scopes, None);
    }
    v.varying = vec![false; v.vars.len()];
    v
}

fn resolve_node(
    src: &Source,
    n: Node,
    v: &mut Vars,
    scopes: &mut Vec<HashMap<String, usize>>,
    for_init: Option<usize>,
) {
    match n.kind() {
        "compound_statement" | "for_statement" | "while_statement" | "if_statement"
        | "switch_statement" | "do_statement" => {
            scopes.push(HashMap::new());
            for k in syntax::all_kids(n) {
                let fi = (n.kind() == "for_statement"
                    && n.child_by_field_name("initializer")
                        .is_some_and(|i| i.id() == k.id()))
                .then_some(n.id());
                resolve_node(src, k, v, scopes, fi);
            }
            scopes.pop();
        }
        "declaration" => {
            let shared = kids(n).iter().any(|k| {
                matches!(k.kind(), "storage_class_specifier" | "type_qualifier")
                    && matches!(
                        src.of(*k),
                        "static" | "extern" | "__shared__" | "thread_local"
                    )
            });
            for d in n.children_by_field_name("declarator", &mut n.walk()) {
                if let Some(val) = d.child_by_field_name("value") {
                    resolve_node(src, val, v, scopes, None);
                }
                if let Some(size) = d
                    .child_by_field_name("declarator")
                    .and_then(|x| x.child_by_field_name("size"))
                {
                    resolve_node(src, size, v, scopes, None);
                }
                let Some(id) = declared_name(d) else { continue };
                if shared {
                    // Shared and static variables are memory, as globals are.
                    scopes.last_mut().unwrap().remove(src.of(id));
                    continue;
                }
                let (ty, dims, is_ref) = type_of(src, n, d);
                let init = d
                    .child_by_field_name("value")
                    .map(|x| src.of(x).split_whitespace().collect::<String>());
                let tid_alias = init.as_deref() == Some("threadIdx.x")
                    && ty.as_deref().is_some_and(is_wide_int);
                let i = v.vars.len();
                v.vars.push(Var {
                    name: src.of(id).to_string(),
                    by_ref: !dims.is_empty() || is_ref,
                    ty,
                    dims,
                    param: false,
                    for_init,
                    tid_alias,
                });
                v.decls.insert(id.id(), i);
                scopes.last_mut().unwrap().insert(src.of(id).to_string(), i);
            }
        }
        "identifier" => {
            let name = src.of(n);
            if let Some(&i) = scopes.iter().rev().find_map(|s| s.get(name)) {
                v.uses.insert(n.id(), i);
            }
        }
        "qualified_identifier" | "field_identifier" | "lambda_expression" => {
            if n.kind() == "lambda_expression" && v.unsupported.is_none() {
                v.unsupported = Some(("a lambda".into(), n.start_byte()));
            }
        }
        _ => {
            for k in syntax::all_kids(n) {
                resolve_node(src, k, v, scopes, for_init);
            }
        }
    }
}

/// An integer type of 32 bits or more (`std::remove_cv_t<T >` as [`type_of`] writes it).
fn is_wide_int(t: &str) -> bool {
    let t = t
        .trim_start_matches("std::remove_cv_t<")
        .trim_end_matches('>');
    let words: Vec<&str> = t.split_whitespace().filter(|w| *w != "const").collect();
    matches!(
        words.join(" ").as_str(),
        "int"
            | "unsigned"
            | "unsigned int"
            | "long"
            | "long long"
            | "unsigned long"
            | "unsigned long long"
            | "size_t"
            | "uint32_t"
            | "int32_t"
            | "uint64_t"
            | "int64_t"
            | "signed"
            | "signed int"
    )
}

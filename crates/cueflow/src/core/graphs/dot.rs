//! A graph as a Graphviz diagram (GR8), as `cudaGraphDebugDotPrint` writes one: one vertex per
//! node, labelled with its index, type and what it does; one arrow per dependency; a child
//! graph as a cluster of its own nodes, entered from the child node.

use std::fmt::Write;

use crate::core::graphs::def::{label, node_type, BuildWork, GraphDef};

/// The DOT text of `def`.
pub(crate) fn to_dot(def: &GraphDef) -> String {
    let mut out = String::from(
        "digraph cueflow_graph {\n  compound=true;\n  node [fontname=\"monospace\"];\n",
    );
    write_graph(&mut out, def, "n", 1);
    out.push_str("}\n");
    out
}

fn shape(w: &BuildWork) -> &'static str {
    node_type(w).1.dot_shape()
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn write_graph(out: &mut String, def: &GraphDef, prefix: &str, depth: usize) {
    let pad = "  ".repeat(depth);
    for (i, n) in def.nodes.iter().enumerate() {
        let id = format!("{prefix}{i}");
        let _ = writeln!(
            out,
            "{pad}{id} [shape={}, label=\"{i}: {}\"];",
            shape(&n.work),
            escape(&label(&n.work))
        );
        if let BuildWork::Child(c) = &n.work {
            let inner = format!("{id}_");
            let _ = writeln!(out, "{pad}subgraph cluster_{id} {{");
            let _ = writeln!(out, "{pad}  label=\"child graph of node {i}\";");
            write_graph(out, c, &inner, depth + 1);
            let _ = writeln!(out, "{pad}}}");
            for (j, cn) in c.nodes.iter().enumerate() {
                if cn.deps.is_empty() {
                    let _ = writeln!(out, "{pad}{id} -> {inner}{j} [style=dashed];");
                }
            }
        }
        for d in &n.deps {
            let _ = writeln!(out, "{pad}{prefix}{d} -> {id};");
        }
    }
}

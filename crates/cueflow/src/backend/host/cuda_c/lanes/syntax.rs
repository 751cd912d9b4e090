//! The syntax tree of preprocessed CUDA C (tree-sitter's CUDA grammar) and the small helpers
//! the lane compiler needs over it: text, rendering with replacements, line numbers, the
//! functions of the unit, calls.

use std::collections::HashMap;

use tree_sitter::{Node, Parser, Tree};

/// Preprocessed source with its line markers blanked out (same byte offsets) and a map from
/// byte offset back to the line of the user's source.
pub(super) struct Source {
    pub text: String,
    /// (offset where a marked line starts, its line number, whether it is the kernel's file).
    marks: Vec<(usize, u32)>,
}

impl Source {
    /// `pre` is the preprocessor's output with `# N "file"` markers.
    pub(super) fn new(pre: &str) -> Source {
        let mut text = String::with_capacity(pre.len());
        let mut marks = Vec::new();
        for line in pre.split_inclusive('\n') {
            let t = line.trim_start();
            let marker = t.strip_prefix("# ").and_then(|r| {
                let n: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
                n.parse::<u32>()
                    .ok()
                    .filter(|_| r[n.len()..].starts_with(" \""))
            });
            if let Some(n) = marker {
                marks.push((text.len() + line.len(), n));
                text.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
            } else {
                text.push_str(line);
            }
        }
        Source { text, marks }
    }

    /// The source line of byte `at`.
    pub(super) fn line(&self, at: usize) -> u32 {
        let i = self.marks.partition_point(|&(o, _)| o <= at);
        if i == 0 {
            return 1 + self.text[..at].matches('\n').count() as u32;
        }
        let (o, n) = self.marks[i - 1];
        n + self.text[o..at].matches('\n').count() as u32
    }

    pub(super) fn of<'a>(&'a self, n: Node) -> &'a str {
        &self.text[n.byte_range()]
    }
}

/// Parse `text` with the CUDA grammar.
pub(super) fn parse(text: &str) -> Option<Tree> {
    let mut p = Parser::new();
    p.set_language(&tree_sitter_cuda::LANGUAGE.into()).ok()?;
    p.parse(text, None)
}

/// Named children of `n`.
pub(super) fn kids(n: Node) -> Vec<Node> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// All children of `n`, named or not.
pub(super) fn all_kids(n: Node) -> Vec<Node> {
    let mut c = n.walk();
    n.children(&mut c).collect()
}

/// Every node of the subtree of `n`, `n` first.
pub(super) fn walk<'t>(n: Node<'t>, f: &mut dyn FnMut(Node<'t>) -> bool) {
    if !f(n) {
        return;
    }
    for k in all_kids(n) {
        walk(k, f);
    }
}

/// `n` without enclosing parentheses.
pub(super) fn strip_parens(mut n: Node) -> Node {
    while matches!(n.kind(), "parenthesized_expression" | "condition_clause") {
        match n.named_child(0) {
            Some(k) if n.named_child_count() == 1 => n = k,
            _ => break,
        }
    }
    n
}

/// The text of `n` with the replacements `hook` gives for nodes of its subtree.
pub(super) fn render(src: &Source, n: Node, hook: &dyn Fn(Node) -> Option<String>) -> String {
    if let Some(s) = hook(n) {
        return s;
    }
    let mut out = String::new();
    let mut pos = n.start_byte();
    for k in all_kids(n) {
        out.push_str(&src.text[pos..k.start_byte()]);
        out.push_str(&render(src, k, hook));
        pos = k.end_byte();
    }
    out.push_str(&src.text[pos..n.end_byte()]);
    out
}

/// The called name of a call expression: `f`, `ns::f`, `x.f` (as `.f`).
pub(super) fn callee(src: &Source, call: Node) -> Option<String> {
    let f = call.child_by_field_name("function")?;
    Some(match f.kind() {
        "identifier" => src.of(f).to_string(),
        "qualified_identifier" => src.of(f).split_whitespace().collect(),
        "field_expression" => format!(".{}", src.of(f.child_by_field_name("field")?)),
        "template_function" => src.of(f.child_by_field_name("name")?).to_string(),
        _ => return None,
    })
}

/// Arguments of a call expression.
pub(super) fn args(call: Node) -> Vec<Node> {
    call.child_by_field_name("arguments")
        .map(kids)
        .unwrap_or_default()
}

/// A function defined in the unit.
#[derive(Clone, Copy)]
pub(super) struct Func<'t> {
    pub def: Node<'t>,
    pub body: Node<'t>,
    /// Inside `template <...>`.
    pub template: bool,
}

/// Functions defined in the unit by simple name (several: overloads).
pub(super) fn functions<'t>(src: &Source, root: Node<'t>) -> HashMap<String, Vec<Func<'t>>> {
    let mut m: HashMap<String, Vec<Func>> = HashMap::new();
    walk(root, &mut |n| {
        if n.kind() == "function_definition" {
            let system = namespaces(src, n).first().is_some_and(|ns| {
                ns == "std" || ns.starts_with("__") || ns == "cooperative_groups" || ns == "cueflow"
            });
            if let (Some(name), Some(body), false) =
                (fn_name(src, n), n.child_by_field_name("body"), system)
            {
                let template = n
                    .parent()
                    .is_some_and(|p| p.kind() == "template_declaration");
                m.entry(name).or_default().push(Func {
                    def: n,
                    body,
                    template,
                });
            }
            return false;
        }
        true
    });
    m
}

/// The function declarator of a definition.
pub(super) fn fn_declarator(def: Node) -> Option<Node> {
    let mut d = def.child_by_field_name("declarator")?;
    while d.kind() != "function_declarator" {
        d = d.child_by_field_name("declarator")?;
    }
    Some(d)
}

/// The simple name a function definition defines.
pub(super) fn fn_name(src: &Source, def: Node) -> Option<String> {
    let d = fn_declarator(def)?.child_by_field_name("declarator")?;
    match d.kind() {
        "identifier" => Some(src.of(d).to_string()),
        _ => None,
    }
}

/// The namespaces enclosing `n`, outermost first (`""` for an anonymous one).
pub(super) fn namespaces(src: &Source, n: Node) -> Vec<String> {
    let mut v = Vec::new();
    let mut p = n.parent();
    while let Some(x) = p {
        if x.kind() == "namespace_definition" {
            v.push(
                x.child_by_field_name("name")
                    .map_or(String::new(), |m| src.of(m).to_string()),
            );
        }
        p = x.parent();
    }
    v.reverse();
    v
}

/// The declared name node of a declarator (through pointers, arrays, references, inits).
pub(super) fn declared_name(mut d: Node) -> Option<Node> {
    loop {
        match d.kind() {
            "identifier" => return Some(d),
            "init_declarator"
            | "pointer_declarator"
            | "array_declarator"
            | "reference_declarator"
            | "parenthesized_declarator"
            | "attributed_declarator" => {
                d = d
                    .child_by_field_name("declarator")
                    .or_else(|| d.named_child(0))?;
            }
            _ => return None,
        }
    }
}

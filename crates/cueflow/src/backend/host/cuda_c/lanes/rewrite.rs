//! Rewriting lane code's text: calls of functions that read `threadIdx` go to clones that take
//! it as a parameter, `assert`/`__trap` report the lane, a divergent `return` kills the lane.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use tree_sitter::Node;

use super::analysis::Summary;
use super::syntax::{args, callee, render, Source};

pub(super) struct Rw<'s> {
    pub src: &'s Source,
    pub sums: &'s HashMap<String, Summary>,
    /// The statement being rewritten (node id): a `return` inside a loop of it jumps past it.
    pub root: usize,
    /// Replacements by node id (warp operations).
    pub repl: &'s HashMap<usize, String>,
    /// `return` rewriting: the live mask and the activity masks to clear (`None`: keep it).
    pub ret: Option<(Option<String>, Vec<String>)>,
    pub clones: RefCell<Vec<String>>,
    pub label: RefCell<Option<String>>,
    pub next: Cell<usize>,
}

impl Rw<'_> {
    pub(super) fn text(&self, n: Node) -> String {
        render(self.src, n, &|x| self.hook(x))
    }

    pub(super) fn hook(&self, x: Node) -> Option<String> {
        if let Some(r) = self.repl.get(&x.id()) {
            return Some(r.clone());
        }
        match x.kind() {
            "call_expression" => {
                let c = callee(self.src, x)?;
                let tid = self.sums.get(&c).is_some_and(|s| s.tid);
                let new = match c.as_str() {
                    "__assert_fail" => "cueflow::lanes::assert_fail".to_string(),
                    "__trap" => "cueflow::lanes::trap".to_string(),
                    _ if tid => {
                        self.clones.borrow_mut().push(c.clone());
                        format!("{c}__cfl")
                    }
                    _ => return None,
                };
                let mut all = vec!["threadIdx".to_string()];
                all.extend(args(x).iter().map(|a| self.text(*a)));
                Some(format!("{new}({})", all.join(", ")))
            }
            "return_statement" => {
                let (live, acts) = self.ret.as_ref()?;
                let mut s = String::from("{ ");
                if let Some(l) = live {
                    s.push_str(&format!("{l} = 0; "));
                }
                for a in acts {
                    s.push_str(&format!("{a} = 0; "));
                }
                // Inside a loop or switch of this statement: jump past the statement.
                let mut p = x.parent();
                let mut nested = false;
                while let Some(q) = p {
                    if q.id() == self.root {
                        break;
                    }
                    nested |= matches!(
                        q.kind(),
                        "for_statement" | "while_statement" | "do_statement" | "switch_statement"
                    );
                    p = q.parent();
                }
                if nested {
                    let mut l = self.label.borrow_mut();
                    let name = l.get_or_insert_with(|| {
                        self.next.set(self.next.get() + 1);
                        format!("cf_skip{}", self.next.get())
                    });
                    s.push_str(&format!("goto {name}; "));
                }
                s.push('}');
                Some(s)
            }
            _ => None,
        }
    }
}

//! Declared reads checked after the fact (SPEC AC7), core's side: where a backend cannot stop a
//! kernel from writing an argument it declared read-only (CUDA, with the sanitizer on), it
//! checks the argument's bytes around the kernel and calls back; the call becomes a lint of
//! the launch ([`LintKind::ReadArgumentWritten`]).

use std::panic::Location;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::backend::contract::op::ReadCheck;
use crate::core::tracking::sanitizer::{Lint, LintKind};

/// Lints that arrive after their call, from a backend's callback (AC7 on CUDA): kept apart
/// from the tracking state, whose lock a host thread may hold while it waits for the very work
/// whose callback reports here.
#[derive(Default)]
pub(crate) struct LateLints(Mutex<Vec<Lint>>);

impl LateLints {
    /// The lints so far.
    pub fn get(&self) -> Vec<Lint> {
        self.0.lock().clone()
    }

    /// Take the lints so far.
    pub fn take(&self) -> Vec<Lint> {
        std::mem::take(&mut self.0.lock())
    }
}

/// The check that reports, as a [`LintKind::ReadArgumentWritten`] lint of the launch at
/// `site`, each read-declared argument of `l` whose bytes changed across the kernel (AC7).
pub(crate) fn read_check(
    late: &Arc<LateLints>,
    l: &Launch,
    site: &'static Location<'static>,
) -> ReadCheck {
    let late = late.clone();
    // Cheap to keep (shared): the text is made only when a write is seen.
    let (kernel, args) = (l.kernel.clone(), l.args.clone());
    Arc::new(move |i: usize| {
        let Some(KernelArg::Buffer { mem, .. }) = args.get(i) else {
            return;
        };
        let message = format!(
            "kernel `{}` wrote argument {i} (bytes {}..{} of {:?}), which the launch declares \
             read-only (KernelArgs::read): its bytes changed while the kernel ran (AC7). Other \
             streams are ordered against declared writes only; declare it with write() if the \
             kernel writes it",
            kernel.name,
            mem.offset,
            mem.offset + mem.len,
            mem.alloc
        );
        let mut v = late.0.lock();
        if v.iter().any(|l| l.site == site && l.message == message) {
            return;
        }
        let lint = Lint {
            kind: LintKind::ReadArgumentWritten,
            message,
            site,
        };
        eprintln!("{lint}");
        v.push(lint);
    })
}

//! Panics that cueflow catches and returns as errors (a kernel or host function that panicked,
//! a collective that timed out: KN2, HF3, MD4) are not printed.
//!
//! Rust prints every panic through the process's panic hook before unwinding starts, even one
//! that a `catch_unwind` turns into a returned `Error` a moment later; engine threads then
//! wrote `thread 'cueflow-sm0' panicked at …` and a backtrace for an error the caller gets
//! anyway. [`catch`] runs its closure with a per-thread flag set; the hook cueflow installs
//! (once, wrapping whatever hook was installed before it) keeps quiet while the flag is set on
//! the panicking thread, remembering where the panic happened for the error, and passes every
//! other panic to the previous hook unchanged. So a program's own panics, on its own threads
//! or anywhere outside cueflow's catch regions, are printed (or handled) exactly as before.
//!
//! A hook the program installs *after* cueflow's replaces it (Rust has one hook per process);
//! caught panics are then printed by the program's hook, which is what it asked for.
//! `CUEFLOW_PANIC_OUTPUT=1` prints caught panics too, through the previous hook.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Depth of [`catch`] regions on this thread.
    static QUIET: Cell<u32> = const { Cell::new(0) };
    /// Where the last quiet panic on this thread happened.
    static WHERE: RefCell<Option<String>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

fn install() {
    INSTALL.call_once(|| {
        let verbose = crate::config::panic_output();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // `try_with`: a panic while the thread's locals are being destroyed is printed.
            let quiet = QUIET.try_with(|q| q.get() > 0).unwrap_or(false);
            if quiet {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()));
                let _ = WHERE.try_with(|w| *w.borrow_mut() = at);
                if !verbose {
                    return;
                }
            }
            previous(info)
        }));
    });
}

/// A caught panic: its message and where it happened.
pub(crate) struct Caught {
    payload: Box<dyn Any + Send>,
    at: Option<String>,
}

impl Caught {
    /// The panic message (`fallback` for a payload that is not a string).
    pub fn message(&self, fallback: &str) -> String {
        if let Some(s) = self.payload.downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = self.payload.downcast_ref::<String>() {
            s.clone()
        } else {
            fallback.to_string()
        }
    }

    /// The payload, when it is a `T` (a typed fault a backend raised with `resume_unwind`).
    pub fn payload<T: 'static>(&self) -> Option<&T> {
        self.payload.downcast_ref::<T>()
    }

    /// The message with the panic's location, for an error's detail.
    pub fn detail(&self, fallback: &str) -> String {
        match &self.at {
            Some(at) => format!("{} (panicked at {at})", self.message(fallback)),
            None => self.message(fallback),
        }
    }
}

/// Run `f`, catching a panic quietly: the caller turns it into a returned error.
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, Caught> {
    install();
    QUIET.with(|q| q.set(q.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get() - 1));
    r.map_err(|payload| Caught {
        payload,
        at: WHERE.with(|w| w.borrow_mut().take()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_panics_keep_message_and_place() {
        let Err(c) = catch(|| panic!("boom {}", 7)) else {
            panic!("it panicked")
        };
        assert_eq!(c.message("?"), "boom 7");
        assert!(c.detail("?").contains("panics.rs"), "{}", c.detail("?"));
        assert_eq!(catch(|| 5).ok(), Some(5));
        // Outside a catch region the flag is clear again.
        assert_eq!(QUIET.with(|q| q.get()), 0);
    }
}

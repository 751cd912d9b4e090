//! A CUDA device's sticky fault (KN2, ER2), which kernel a fault is blamed on (RL5), and what
//! the objects below the device need of it ([`Faults`]) without knowing the device itself.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::driver::CuError;
use crate::error::{Error, Result};

/// The sticky error of a device (ER2), shareable with host-function callbacks (which may set
/// it without a driver call).
pub(crate) struct Sticky {
    /// The device's name, for errors.
    pub device: String,
    poisoned: AtomicBool,
    error: Mutex<Option<Error>>,
}

impl Sticky {
    pub(super) fn new(device: String) -> Self {
        Sticky {
            device,
            poisoned: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    /// The sticky error, if any.
    #[inline]
    pub fn get(&self) -> Option<Error> {
        if self.poisoned.load(Ordering::Acquire) {
            self.stuck()
        } else {
            None
        }
    }

    /// [`get`](Self::get) once poisoned.
    #[inline(never)]
    fn stuck(&self) -> Option<Error> {
        self.error.lock().clone()
    }

    /// Keep the first error; return the one that sticks.
    pub fn set(&self, e: Error) -> Error {
        let mut g = self.error.lock();
        let e = g.get_or_insert(e).clone();
        self.poisoned.store(true, Ordering::Release);
        e
    }
}

/// The `kernel` and `detail` of a fault (RL5): `exact` when known; else the one candidate;
/// else every candidate, oldest launch first, and a note that the GPU cannot say which.
pub(super) fn blame(exact: Option<&str>, names: &[String], what: String) -> (String, String) {
    if let Some(k) = exact {
        return (
            k.to_string(),
            format!("{what} (CUEFLOW_LAUNCH_BLOCKING=1: the launch was synchronized, so this kernel faulted)"),
        );
    }
    match names {
        [] => ("<unknown kernel>".to_string(), what),
        [one] => (
            one.clone(),
            format!("{what} (the only kernel not known to be complete)"),
        ),
        many => {
            const SHOWN: usize = 8;
            let mut list = many[..many.len().min(SHOWN)].join(", ");
            if many.len() > SHOWN {
                list.push_str(&format!(" and {} more", many.len() - SHOWN));
            }
            (
                format!("one of: {list}"),
                format!(
                    "{what}; the GPU reports a fault for the whole context, and {} kernels were \
                     not known to be complete, so any of them may have faulted (set \
                     CUEFLOW_LAUNCH_BLOCKING=1 to synchronize after each launch and name the \
                     one)",
                    many.len()
                ),
            )
        }
    }
}

/// What an object of a device (an event) needs of its device: the sticky check with the
/// context made current, and a failed driver call turned into an error (poisoning the device
/// when the code is sticky).
pub(super) trait Faults: Send + Sync {
    /// `Err` with the sticky error, else make the device's context current (D2).
    fn enter(&self) -> Result<()>;
    /// The error for a failed driver call (sticky codes poison the device, RL5's blame).
    fn fail(&self, e: CuError) -> Error;
}

#[cfg(test)]
mod tests {
    use super::blame;

    #[test]
    fn rl5_one_candidate_is_named_several_are_all_named_and_said_so() {
        let what = || "CUDA_ERROR_ILLEGAL_ADDRESS".to_string();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(blame(None, &[], what()).0, "<unknown kernel>");
        let (k, d) = blame(None, &names(&["cf_fault"]), what());
        assert_eq!(k, "cf_fault");
        assert!(d.contains("only kernel"), "{d}");
        let (k, d) = blame(None, &names(&["cf_fill_f32", "cf_fault"]), what());
        assert_eq!(k, "one of: cf_fill_f32, cf_fault");
        assert!(
            d.contains("any of them") && d.contains("CUEFLOW_LAUNCH_BLOCKING=1"),
            "{d}"
        );
        let many: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        assert!(blame(None, &many, what()).0.ends_with("and 2 more"));
        let (k, d) = blame(Some("cf_fault"), &names(&["cf_fill_f32"]), what());
        assert_eq!(k, "cf_fault");
        assert!(d.contains("synchronized"), "{d}");
    }
}

//! What ends a launch in the kernel worker without its result (HK3, W4–W6), as the CUDA-C
//! launch path receives it.

/// Why a launch in the worker did not complete (HK3). The caller turns it into the device's
/// sticky [`KernelFault`](crate::error::Error::KernelFault) naming the kernel (KN2, ER2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WorkerFault {
    /// The entry returned nonzero with this message (a failed `assert`, a trap the prelude
    /// caught). The worker goes on.
    Kernel {
        /// The entry that reported it.
        symbol: String,
        /// Its message.
        message: String,
    },
    /// The worker process died (a wild access, `abort`, any fatal signal or exit). Every later
    /// launch on this worker returns the same fault.
    Crashed {
        /// The entry whose thread took the fatal signal, when known; when not known (the
        /// process exited or was killed from outside), every entry that was running (RL5).
        culprits: Vec<String>,
        /// True when this call's entry is the one that crashed (or one of the candidates).
        this_call: bool,
        /// What happened (signal and address, exit status).
        detail: String,
    },
    /// No worker could be started (no arena, no compiler, spawn failure), or the worker could
    /// not load the entry.
    Unavailable(String),
}

impl std::fmt::Display for WorkerFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerFault::Kernel { message, .. } => write!(f, "{message}"),
            WorkerFault::Crashed {
                culprits,
                this_call: true,
                detail,
            } if culprits.len() <= 1 => write!(f, "{detail}"),
            WorkerFault::Crashed {
                culprits, detail, ..
            } => write!(
                f,
                "{detail} (the kernel worker process died while running {})",
                if culprits.is_empty() {
                    "no kernel".to_string()
                } else {
                    culprits.join(", ")
                }
            ),
            WorkerFault::Unavailable(why) => write!(f, "kernel worker unavailable: {why}"),
        }
    }
}

impl WorkerFault {
    /// True when this call's own entry caused the fault; false when another launch crashed
    /// the worker under it (name the culprits then, RL5, not this call's kernel).
    pub(crate) fn is_own(&self) -> bool {
        !matches!(
            self,
            WorkerFault::Crashed {
                this_call: false,
                ..
            }
        )
    }

    /// The fault as a call in flight when the worker died sees it, having found it recorded
    /// already: its own when its launch is among the culprits (another waiter read the crash's
    /// report first), as [`Worker::lost`](super::worker) names them.
    pub(super) fn seen_by(&self, name: &str) -> WorkerFault {
        match self {
            WorkerFault::Crashed {
                culprits, detail, ..
            } => WorkerFault::Crashed {
                culprits: culprits.clone(),
                this_call: culprits.iter().any(|c| c == name),
                detail: detail.clone(),
            },
            f => f.clone(),
        }
    }

    /// The same fault as seen by a later call (`this_call` false).
    pub(super) fn for_later(&self) -> WorkerFault {
        match self {
            WorkerFault::Crashed {
                culprits, detail, ..
            } => WorkerFault::Crashed {
                culprits: culprits.clone(),
                this_call: false,
                detail: detail.clone(),
            },
            f => f.clone(),
        }
    }
}

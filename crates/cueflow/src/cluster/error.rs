//! [`LaunchError`]: every way meeting the other ranks of a launched job can fail.

use std::fmt;
use std::time::Duration;

use super::env::Launcher;

/// Why a process started by a launcher (torchrun, `srun`, `mpirun`) could not meet the other
/// ranks of its job: what [`Communicator::from_env`](crate::Communicator::from_env) and
/// [`LaunchEnv::from_env`](crate::LaunchEnv::from_env) return inside
/// [`Error::Launch`](crate::Error::Launch).
///
/// Errors found at the store (world sizes, duplicate ranks, ranks that never came, ranks on
/// other machines) are sent by rank 0 to every rank connected to it, so that every rank of a
/// broken job fails with the same error, not only the one that saw it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// No launcher's variables are in the environment.
    #[error(
        "no launcher's variables are set: expected torchrun's RANK and WORLD_SIZE, Slurm's \
         SLURM_PROCID and SLURM_NTASKS, or Open MPI's OMPI_COMM_WORLD_RANK and \
         OMPI_COMM_WORLD_SIZE"
    )]
    NoLauncher,

    /// A variable the launcher should have set (or the user must set) is missing.
    #[error("{launcher}: {name} is not set{hint}")]
    MissingVariable {
        /// The launcher whose variables were found.
        launcher: Launcher,
        /// The missing variable.
        name: &'static str,
        /// What to do about it (empty, or starting with `; `).
        hint: String,
    },

    /// A variable whose value cannot be used.
    #[error("{name}={value:?} is not {expected}")]
    BadVariable {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: String,
    },

    /// Variables that contradict each other (a local rank beyond the local world size, two
    /// launchers that give this process different ranks).
    #[error("inconsistent launcher variables: {0}")]
    Inconsistent(String),

    /// A rank outside `0..ranks`.
    #[error("rank {rank} is out of range for a world of {ranks} ranks (ranks are 0..{ranks})")]
    RankOutOfRange {
        /// The rank this process (or a process that reached rank 0) claimed.
        rank: usize,
        /// The world size.
        ranks: usize,
    },

    /// Rank 0 could not listen at the store's port.
    #[error("rank 0 could not listen at {addr} for the other ranks: {why}")]
    StoreBind {
        /// The address it tried.
        addr: String,
        /// The system's reason.
        why: String,
    },

    /// A rank other than 0 could not connect to rank 0's store before the timeout.
    #[error("the store at {addr} (rank 0) could not be reached within {waited:?}: {why}")]
    StoreUnreachable {
        /// `MASTER_ADDR:MASTER_PORT` (or what stood for them).
        addr: String,
        /// How long it tried.
        waited: Duration,
        /// The last failure.
        why: String,
    },

    /// Ranks that did not arrive at the store before the timeout (`missing` empty: this rank
    /// reached the store but rank 0 gave no answer in time).
    #[error("{}", timeout_text(.ranks, .missing, .waited))]
    Timeout {
        /// The world size.
        ranks: usize,
        /// The ranks rank 0 never heard from.
        missing: Vec<usize>,
        /// How long the store waited.
        waited: Duration,
    },

    /// A rank's world size differs from rank 0's.
    #[error("world sizes disagree: rank {rank} has {theirs} ranks, rank 0 has {ours}")]
    WorldSizeMismatch {
        /// The rank that disagrees.
        rank: usize,
        /// Its world size.
        theirs: usize,
        /// Rank 0's.
        ours: usize,
    },

    /// Two processes claim one rank.
    #[error("two processes claim rank {rank} (one on {first}, one on {second})")]
    DuplicateRank {
        /// The rank claimed twice.
        rank: usize,
        /// Host of the first claim.
        first: String,
        /// Host of the second claim.
        second: String,
    },

    /// Ranks opened devices of different backends.
    #[error("backends disagree: rank {rank} runs on {theirs} devices, rank 0 on {ours}")]
    BackendMismatch {
        /// The rank that disagrees.
        rank: usize,
        /// Its backend.
        theirs: String,
        /// Rank 0's.
        ours: String,
    },

    /// The host backend's ranks meet in this machine's shared memory: ranks on other machines
    /// cannot join them.
    #[error(
        "the host backend runs the ranks of a communicator on one machine only (they meet in \
         its shared memory): {0}; use CUDA devices (NCCL) for ranks on several machines"
    )]
    NotLocal(String),

    /// A peer that does not speak this store's protocol, or a connection that broke.
    #[error("store protocol: {0}")]
    Protocol(String),

    /// Rank 0 gave up for a reason of its own (it could not make the communicator's id).
    #[error("rank 0 gave up: {0}")]
    Aborted(String),
}

fn timeout_text(ranks: &usize, missing: &[usize], waited: &Duration) -> String {
    if missing.is_empty() {
        format!(
            "timed out after {waited:?}: rank 0's store took this rank's hello but gave no \
             answer (it is waiting for the other ranks, or hung)"
        )
    } else {
        format!(
            "timed out after {waited:?}: rank(s) {} of {ranks} never reached rank 0's store",
            list(missing)
        )
    }
}

/// `1, 2, 5` (at most 16 shown).
fn list(ranks: &[usize]) -> String {
    let mut s = ranks
        .iter()
        .take(16)
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if ranks.len() > 16 {
        s += &format!(" and {} more", ranks.len() - 16);
    }
    s
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "Slurm",
            Launcher::OpenMpi => "Open MPI",
        })
    }
}

//! [`LaunchEnv`]: what a launcher told this process — its rank, the world size, its rank on
//! this machine, and where rank 0's store listens — read from the variables of torchrun,
//! Slurm's `srun` or Open MPI's `mpirun`.
//!
//! A module that interprets other programs' conventions: it reads their variables itself
//! (`crate::config` says so). cueflow's own two here, `CUEFLOW_LAUNCH_TIMEOUT` and
//! `CUEFLOW_STORE_PORT`, are named and parsed by `crate::config` and read through the same
//! `vars` as the launcher's, so that [`LaunchEnv::from_vars`] sees exactly what a test gives.

use std::time::Duration;

use super::error::LaunchError;
use super::nodelist;
use crate::config;

/// The tool that started this process, as its variables tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Launcher {
    /// `torchrun` (also `torch.distributed.launch`, and any launcher that sets `RANK`,
    /// `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT`).
    Torchrun,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, the node list).
    Slurm,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`).
    OpenMpi,
}

/// How long ranks wait for each other by default: at the store, and (host backend) at each
/// collective call. Launchers start the processes of a job within seconds of each other, but
/// a busy cluster can take minutes to start containers.
pub(crate) const DEFAULT_LAUNCH_TIMEOUT: Duration = Duration::from_secs(300);

/// Port of rank 0's store when no variable names one (torchrun's default).
const DEFAULT_PORT: u16 = 29500;

/// Where this process stands in a job a launcher started (SPEC MD5), read from the
/// environment by [`from_env`](Self::from_env):
///
/// | | torchrun | Slurm `srun` | Open MPI `mpirun` |
/// |---|---|---|---|
/// | rank | `RANK` | `SLURM_PROCID` | `OMPI_COMM_WORLD_RANK` |
/// | world size | `WORLD_SIZE` | `SLURM_NTASKS` (`SLURM_NPROCS`) | `OMPI_COMM_WORLD_SIZE` |
/// | local rank | `LOCAL_RANK` | `SLURM_LOCALID` | `OMPI_COMM_WORLD_LOCAL_RANK` |
/// | local world size | `LOCAL_WORLD_SIZE` | — | `OMPI_COMM_WORLD_LOCAL_SIZE` |
/// | store host | `MASTER_ADDR` | `MASTER_ADDR`, else the first host of `SLURM_STEP_NODELIST`, `SLURM_JOB_NODELIST` or `SLURM_NODELIST` | `MASTER_ADDR`, else `127.0.0.1` when every rank is on this machine |
/// | store port | `MASTER_PORT` (+ 1 when `TORCHELASTIC_USE_AGENT_STORE=True`) | `MASTER_PORT`, else 20000 + `SLURM_JOB_ID` mod 10000 | `MASTER_PORT`, else 29500 |
///
/// `CUEFLOW_STORE_PORT`, when set, is the store's port under every launcher. torchrun's agent
/// usually serves PyTorch's own store at `MASTER_PORT` already (it then sets
/// `TORCHELASTIC_USE_AGENT_STORE=True`), so cueflow's store takes the port after it.
///
/// torchrun's variables win over Open MPI's, which win over Slurm's (torchrun and `mpirun`
/// are often started under Slurm, whose variables then describe the nodes, not the ranks).
/// `CUEFLOW_LAUNCH_TIMEOUT` (seconds) sets the [`timeout`](Self::timeout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchEnv {
    launcher: Launcher,
    rank: usize,
    ranks: usize,
    local_rank: Option<usize>,
    local_ranks: Option<usize>,
    store_host: String,
    store_port: u16,
    timeout: Duration,
}

impl LaunchEnv {
    /// Read the variables of this process's launcher.
    pub fn from_env() -> Result<LaunchEnv, LaunchError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Read the launcher variables `var` gives (`None` or empty: not set), as
    /// [`from_env`](Self::from_env) reads the environment.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<LaunchEnv, LaunchError> {
        let vars = Vars(&|n| var(n).filter(|v| !v.trim().is_empty()));
        let launcher = if vars.any(&["RANK", "WORLD_SIZE"]) {
            Launcher::Torchrun
        } else if vars.any(&["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"]) {
            Launcher::OpenMpi
        } else if vars.any(&["SLURM_PROCID"]) {
            Launcher::Slurm
        } else {
            return Err(LaunchError::NoLauncher);
        };
        let need = |name: &'static str, hint: &str| {
            let missing = || LaunchError::MissingVariable {
                launcher,
                name,
                hint: hint.to_string(),
            };
            vars.number(name)?.ok_or_else(missing)
        };
        let timeout = match vars.get(config::LAUNCH_TIMEOUT.name) {
            None => DEFAULT_LAUNCH_TIMEOUT,
            Some(v) => {
                config::launch_timeout_setting(&v).ok_or_else(|| LaunchError::BadVariable {
                    name: config::LAUNCH_TIMEOUT.name,
                    value: v,
                    expected: config::LAUNCH_TIMEOUT.accepted.into(),
                })?
            }
        };
        let port_var = |name: &'static str| match vars.get(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .map(Some)
                .ok_or(LaunchError::BadVariable {
                    name,
                    value: v,
                    expected: "a port number (1-65535)".into(),
                }),
        };
        // torchrun's agent may already serve its own store (PyTorch's TCPStore) at
        // MASTER_PORT, and says so: then ours takes the next port.
        let agent_store = vars
            .get("TORCHELASTIC_USE_AGENT_STORE")
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1"));
        let port = |default: u16| -> Result<u16, LaunchError> {
            if let Some(p) = port_var(config::STORE_PORT.name)? {
                return Ok(p);
            }
            Ok(match port_var("MASTER_PORT")? {
                None => default,
                Some(p) if agent_store => p.checked_add(1).unwrap_or(p - 1),
                Some(p) => p,
            })
        };
        let mut env = match launcher {
            Launcher::Torchrun => {
                let rank = need("RANK", "")?;
                let ranks = need("WORLD_SIZE", "")?;
                let hint = "; torchrun sets it (run the program with `torchrun --no-python`)";
                let store_host =
                    vars.get("MASTER_ADDR")
                        .ok_or_else(|| LaunchError::MissingVariable {
                            launcher,
                            name: "MASTER_ADDR",
                            hint: hint.into(),
                        })?;
                if vars.get("MASTER_PORT").is_none() {
                    return Err(LaunchError::MissingVariable {
                        launcher,
                        name: "MASTER_PORT",
                        hint: hint.into(),
                    });
                }
                LaunchEnv {
                    launcher,
                    rank,
                    ranks,
                    local_rank: vars.number("LOCAL_RANK")?,
                    local_ranks: vars.number("LOCAL_WORLD_SIZE")?,
                    store_host,
                    store_port: port(DEFAULT_PORT)?,
                    timeout,
                }
            }
            Launcher::OpenMpi => {
                let rank = need("OMPI_COMM_WORLD_RANK", "")?;
                let ranks = need("OMPI_COMM_WORLD_SIZE", "")?;
                let local_ranks = vars.number("OMPI_COMM_WORLD_LOCAL_SIZE")?;
                let store_host = match vars.get("MASTER_ADDR") {
                    Some(h) => h,
                    None if local_ranks == Some(ranks) => "127.0.0.1".into(),
                    None => {
                        return Err(LaunchError::MissingVariable {
                            launcher,
                            name: "MASTER_ADDR",
                            hint: "; the ranks are on several machines: pass rank 0's host \
                                   with `mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port>`"
                                .into(),
                        })
                    }
                };
                LaunchEnv {
                    launcher,
                    rank,
                    ranks,
                    local_rank: vars.number("OMPI_COMM_WORLD_LOCAL_RANK")?,
                    local_ranks,
                    store_host,
                    store_port: port(DEFAULT_PORT)?,
                    timeout,
                }
            }
            Launcher::Slurm => {
                let rank = need("SLURM_PROCID", "")?;
                let ranks = match vars.number("SLURM_NTASKS")? {
                    Some(n) => n,
                    None => need(
                        "SLURM_NPROCS",
                        " (nor SLURM_NTASKS): start the program with `srun`",
                    )?,
                };
                let store_host = match vars.get("MASTER_ADDR") {
                    Some(h) => h,
                    None => slurm_first_host(&vars, launcher)?,
                };
                let job_port = match vars.number::<u64>("SLURM_JOB_ID")? {
                    Some(job) => 20000 + (job % 10000) as u16,
                    None => DEFAULT_PORT,
                };
                LaunchEnv {
                    launcher,
                    rank,
                    ranks,
                    local_rank: vars.number("SLURM_LOCALID")?,
                    local_ranks: None,
                    store_host,
                    store_port: port(job_port)?,
                    timeout,
                }
            }
        };
        env.store_host = env.store_host.trim().to_string();
        env.check(&vars)?;
        Ok(env)
    }

    /// What the numbers must satisfy, whichever launcher gave them.
    fn check(&self, vars: &Vars<'_>) -> Result<(), LaunchError> {
        if self.ranks == 0 {
            return Err(LaunchError::BadVariable {
                name: self.names().1,
                value: "0".into(),
                expected: "a world size of at least 1".into(),
            });
        }
        if self.rank >= self.ranks {
            return Err(LaunchError::RankOutOfRange {
                rank: self.rank,
                ranks: self.ranks,
            });
        }
        if let Some(lr) = self.local_rank {
            let of = self.local_ranks.unwrap_or(self.ranks);
            if lr >= of {
                return Err(LaunchError::Inconsistent(format!(
                    "local rank {lr} of {} local ranks ({} ranks in all)",
                    of, self.ranks
                )));
            }
        }
        if let Some(lw) = self.local_ranks {
            if lw == 0 || lw > self.ranks {
                return Err(LaunchError::Inconsistent(format!(
                    "{lw} ranks on this machine, {} in all",
                    self.ranks
                )));
            }
        }
        // torchrun's RANK and Open MPI's rank describe the same processes when their world
        // sizes agree (a job under both); then the ranks must agree too.
        if self.launcher == Launcher::Torchrun {
            let ompi = (
                vars.number::<usize>("OMPI_COMM_WORLD_RANK")?,
                vars.number::<usize>("OMPI_COMM_WORLD_SIZE")?,
            );
            if let (Some(r), Some(n)) = ompi {
                if n == self.ranks && r != self.rank {
                    return Err(LaunchError::Inconsistent(format!(
                        "RANK={} but OMPI_COMM_WORLD_RANK={r}, in worlds of {n} ranks each",
                        self.rank
                    )));
                }
            }
        }
        Ok(())
    }

    /// The variables that gave the rank and the world size.
    fn names(&self) -> (&'static str, &'static str) {
        match self.launcher {
            Launcher::Torchrun => ("RANK", "WORLD_SIZE"),
            Launcher::Slurm => ("SLURM_PROCID", "SLURM_NTASKS"),
            Launcher::OpenMpi => ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        }
    }

    /// The launcher whose variables were read.
    pub fn launcher(&self) -> Launcher {
        self.launcher
    }

    /// This process's rank, `0..ranks()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The world size: ranks in the whole job.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// This process's rank among the ranks of its machine, when the launcher says it.
    pub fn local_rank(&self) -> Option<usize> {
        self.local_rank
    }

    /// Ranks on this machine, when the launcher says it.
    pub fn local_ranks(&self) -> Option<usize> {
        self.local_ranks
    }

    /// Host of rank 0's store.
    pub fn store_host(&self) -> &str {
        &self.store_host
    }

    /// Port of rank 0's store.
    pub fn store_port(&self) -> u16 {
        self.store_port
    }

    /// How long ranks wait for each other: at the store, and (host backend) at each
    /// collective call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same, waiting at most `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> LaunchEnv {
        self.timeout = timeout;
        self
    }
}

/// The first host of the Slurm step's (else the job's) node list: where task 0 runs.
fn slurm_first_host(vars: &Vars<'_>, launcher: Launcher) -> Result<String, LaunchError> {
    for name in [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ] {
        if let Some(list) = vars.get(name) {
            return nodelist::first_host(&list).map_err(|why| LaunchError::BadVariable {
                name,
                value: list.clone(),
                expected: format!("a Slurm host list ({why})"),
            });
        }
    }
    Err(LaunchError::MissingVariable {
        launcher,
        name: "SLURM_JOB_NODELIST",
        hint: "; set MASTER_ADDR to rank 0's host instead".into(),
    })
}

/// The variables, each either set (not empty) or not.
struct Vars<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }

    fn any(&self, names: &[&str]) -> bool {
        names.iter().any(|n| self.get(n).is_some())
    }

    /// A number, if set; a value that is not one is an error.
    fn number<T: std::str::FromStr>(&self, name: &'static str) -> Result<Option<T>, LaunchError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| LaunchError::BadVariable {
                    name,
                    value: v,
                    expected: "a whole number".into(),
                }),
        }
    }
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;

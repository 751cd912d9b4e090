//! A job started by a launcher (SPEC MD5): the device of this process's local rank, and the
//! communicator of every rank, met through rank 0's store.

use crate::api::collective::{Communicator, UniqueId};
use crate::api::device::{Device, DeviceSpec};
use crate::cluster::{self, LaunchEnv, LaunchError, Launcher};
use crate::error::{Error, Result};

impl Communicator {
    /// The communicator of every rank of the job this process belongs to, as torchrun, Slurm's
    /// `srun` or Open MPI's `mpirun` started it ([`LaunchEnv::from_env`] reads which rank it
    /// is, of how many, and where rank 0 listens). Rank 0 makes the id
    /// ([`unique_id`](Self::unique_id)) and publishes it through a small TCP store at
    /// `MASTER_ADDR:MASTER_PORT`; every other rank connects (retrying while rank 0 starts),
    /// fetches it and [`join`](Self::join)s. Returns once every rank has arrived, or fails
    /// with [`Error::Launch`] within the timeout (`CUEFLOW_LAUNCH_TIMEOUT`, 300 s by default):
    /// variables missing or inconsistent, the store unreachable, ranks that never came, a
    /// world size that disagrees, a rank out of range or claimed twice.
    ///
    /// On CUDA the ranks may be on several machines (NCCL connects them). The host backend
    /// runs the ranks of a job as processes of one machine, meeting in its shared memory: a
    /// `MASTER_ADDR` that is not this machine, or ranks on other hosts, give
    /// [`LaunchError::NotLocal`].
    ///
    /// ```no_run
    /// use cueflow::{Communicator, Device, DeviceBuffer, ReduceOp, Stream};
    ///
    /// // torchrun --nproc-per-node 2 --no-python ./my_program
    /// let dev = Device::from_local_rank()?; // cuda:LOCAL_RANK with CUEFLOW_DEVICE=cuda
    /// let comm = Communicator::from_env(&dev)?;
    /// let s = Stream::new(&dev)?;
    /// let x = DeviceBuffer::<f32>::new(&dev, 1024)?;
    /// s.write_pageable(&x, &[1.0; 1024])?;
    /// comm.all_reduce(&[(&s, &x, &x)], ReduceOp::Sum)?; // every element: the world size
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn from_env(device: &Device) -> Result<Communicator> {
        Self::from_launch(device, &LaunchEnv::from_env()?)
    }

    /// As [`from_env`](Self::from_env), with the launcher's view given.
    pub fn from_launch(device: &Device, env: &LaunchEnv) -> Result<Communicator> {
        let backend = device.properties().backend;
        if backend == "host" && env.ranks() > 1 {
            let host = env.store_host();
            match cluster::names_this_machine(host) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(LaunchError::NotLocal(format!(
                        "the store's host {host} (MASTER_ADDR) is not this machine ({})",
                        cluster::hostname()
                    ))
                    .into())
                }
                Err(why) => {
                    return Err(LaunchError::StoreUnreachable {
                        addr: format!("{host}:{}", env.store_port()),
                        waited: std::time::Duration::ZERO,
                        why,
                    }
                    .into())
                }
            }
        }
        let id = cluster::exchange_id(env, backend, || {
            Ok(Communicator::unique_id(device)?.to_string())
        })?;
        let id: UniqueId = id.parse()?;
        Communicator::join_with_timeout(device, &id, env.ranks(), env.rank(), env.timeout())
    }
}

impl Device {
    /// The device of this process's local rank (its rank on this machine, as the launcher
    /// says: `LOCAL_RANK`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`), of the backend
    /// `CUEFLOW_DEVICE` names (default: host). See [`for_local_rank`](Self::for_local_rank).
    pub fn from_local_rank() -> Result<Device> {
        let devices = crate::config::device().unwrap_or_else(|| "host".into());
        Self::for_local_rank(&devices)
    }

    /// The device of this process's local rank among `devices`:
    /// - `cuda` or `cuda:all`: GPU `LOCAL_RANK`; when the launcher left each rank one GPU
    ///   (`CUDA_VISIBLE_DEVICES` of one, as `srun --gpus-per-task=1` does), that one;
    /// - a list (`cuda:2,cuda:3`, or one name `cuda:N`): its entry `LOCAL_RANK`;
    /// - `host` (or any host name): a host device, `host:LOCAL_RANK` by name.
    pub fn for_local_rank(devices: &str) -> Result<Device> {
        LaunchEnv::from_env()?.device(devices)
    }
}

impl LaunchEnv {
    /// The device of this rank among `devices`, as [`Device::for_local_rank`] says.
    pub fn device(&self, devices: &str) -> Result<Device> {
        let local = self
            .local_rank()
            .ok_or_else(|| LaunchError::MissingVariable {
                launcher: self.launcher(),
                name: match self.launcher() {
                    Launcher::Torchrun => "LOCAL_RANK",
                    Launcher::Slurm => "SLURM_LOCALID",
                    Launcher::OpenMpi => "OMPI_COMM_WORLD_LOCAL_RANK",
                },
                hint: "; it picks this rank's device".into(),
            })?;
        let name = devices.trim().to_ascii_lowercase();
        let specs = if name == "cuda" || name == "cuda:all" {
            let visible = DeviceSpec::parse_list("cuda:all")?.len();
            return match (local < visible, visible) {
                (true, _) => Device::cuda(local),
                (false, 1) => Device::cuda(0),
                (false, _) => Err(LaunchError::Inconsistent(format!(
                    "local rank {local}, but {visible} GPUs are visible to this process"
                ))
                .into()),
            };
        } else {
            DeviceSpec::parse_list(&name)?
        };
        if let Some(DeviceSpec::Host(_)) = specs.first() {
            return Device::host_n(local, 0);
        }
        match specs.get(local) {
            Some(&spec) => Device::open(spec),
            None => Err(Error::Launch(LaunchError::Inconsistent(format!(
                "local rank {local}, but `{devices}` names {} device(s)",
                specs.len()
            )))),
        }
    }
}

use std::collections::HashMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> Result<LaunchEnv, LaunchError> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    LaunchEnv::from_vars(|n| m.get(n).cloned())
}

const TORCHRUN: &[(&str, &str)] = &[
    ("RANK", "5"),
    ("WORLD_SIZE", "8"),
    ("LOCAL_RANK", "1"),
    ("LOCAL_WORLD_SIZE", "4"),
    ("MASTER_ADDR", "node01"),
    ("MASTER_PORT", "29400"),
];

#[test]
fn torchrun_variables() {
    let e = env(TORCHRUN).unwrap();
    assert_eq!(e.launcher(), Launcher::Torchrun);
    assert_eq!((e.rank(), e.ranks()), (5, 8));
    assert_eq!((e.local_rank(), e.local_ranks()), (Some(1), Some(4)));
    assert_eq!((e.store_host(), e.store_port()), ("node01", 29400));
    assert_eq!(e.timeout(), DEFAULT_LAUNCH_TIMEOUT);
}

#[test]
fn the_store_port_steps_past_torchruns_own_store() {
    let mut v = TORCHRUN.to_vec();
    v.push(("TORCHELASTIC_USE_AGENT_STORE", "True"));
    assert_eq!(env(&v).unwrap().store_port(), 29401);
    v.push(("CUEFLOW_STORE_PORT", "31000"));
    assert_eq!(env(&v).unwrap().store_port(), 31000);
    let mut v = TORCHRUN.to_vec();
    v.push(("TORCHELASTIC_USE_AGENT_STORE", "False"));
    assert_eq!(env(&v).unwrap().store_port(), 29400);
    v.push(("CUEFLOW_STORE_PORT", "0"));
    assert!(matches!(
        env(&v),
        Err(LaunchError::BadVariable {
            name: "CUEFLOW_STORE_PORT",
            ..
        })
    ));
}

#[test]
fn slurm_variables_and_the_first_host_of_the_node_list() {
    let base = [
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "2"),
        ("SLURM_JOB_NODELIST", "gpu[07-08,11],login"),
        ("SLURM_JOB_ID", "123456"),
    ];
    let e = env(&base).unwrap();
    assert_eq!(e.launcher(), Launcher::Slurm);
    assert_eq!((e.rank(), e.ranks(), e.local_rank()), (6, 8, Some(2)));
    // The port comes from the job id: two jobs on one node listen on different ports.
    assert_eq!((e.store_host(), e.store_port()), ("gpu07", 23456));
    // The step's node list wins over the job's; MASTER_ADDR / MASTER_PORT win over both.
    let mut v = base.to_vec();
    v.push(("SLURM_STEP_NODELIST", "gpu[11-12]"));
    assert_eq!(env(&v).unwrap().store_host(), "gpu11");
    v.extend([("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "4000")]);
    let e = env(&v).unwrap();
    assert_eq!((e.store_host(), e.store_port()), ("10.0.0.1", 4000));
    // SLURM_NPROCS stands in for SLURM_NTASKS; without a job id the port is torchrun's.
    let e = env(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NPROCS", "2"),
        ("SLURM_NODELIST", "n1"),
    ])
    .unwrap();
    assert_eq!((e.ranks(), e.store_port()), (2, 29500));
}

#[test]
fn open_mpi_variables() {
    let e = env(&[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ])
    .unwrap();
    assert_eq!(e.launcher(), Launcher::OpenMpi);
    assert_eq!((e.rank(), e.ranks(), e.local_rank()), (3, 4, Some(3)));
    // Every rank on this machine: the store is here.
    assert_eq!((e.store_host(), e.store_port()), ("127.0.0.1", 29500));
    // Ranks on several machines need MASTER_ADDR.
    let e = env(&[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ]);
    assert!(
        matches!(
            e,
            Err(LaunchError::MissingVariable {
                launcher: Launcher::OpenMpi,
                name: "MASTER_ADDR",
                ..
            })
        ),
        "{e:?}"
    );
}

#[test]
fn torchrun_wins_over_slurm_under_srun() {
    let mut v = TORCHRUN.to_vec();
    v.extend([("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]);
    let e = env(&v).unwrap();
    assert_eq!(
        (e.launcher(), e.rank(), e.ranks()),
        (Launcher::Torchrun, 5, 8)
    );
}

#[test]
fn missing_bad_and_inconsistent_variables() {
    assert_eq!(env(&[]), Err(LaunchError::NoLauncher));
    let without = |name: &str| {
        let v: Vec<_> = TORCHRUN
            .iter()
            .copied()
            .filter(|(k, _)| *k != name)
            .collect();
        env(&v)
    };
    for name in ["WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"] {
        assert!(
            matches!(without(name), Err(LaunchError::MissingVariable { name: n, .. }) if n == name),
            "{name}: {:?}",
            without(name)
        );
    }
    let with = |name: &str, value: &str| {
        let mut v: Vec<_> = TORCHRUN
            .iter()
            .copied()
            .filter(|(k, _)| *k != name)
            .collect();
        v.push((name, value));
        env(&v)
    };
    assert!(matches!(
        with("RANK", "x"),
        Err(LaunchError::BadVariable { name: "RANK", .. })
    ));
    assert!(matches!(
        with("MASTER_PORT", "70000"),
        Err(LaunchError::BadVariable {
            name: "MASTER_PORT",
            ..
        })
    ));
    assert!(matches!(
        with("CUEFLOW_LAUNCH_TIMEOUT", "-1"),
        Err(LaunchError::BadVariable { .. })
    ));
    assert_eq!(
        with("CUEFLOW_LAUNCH_TIMEOUT", "1.5").unwrap().timeout(),
        Duration::from_millis(1500)
    );
    assert_eq!(
        with("RANK", "8"),
        Err(LaunchError::RankOutOfRange { rank: 8, ranks: 8 })
    );
    assert!(matches!(
        with("WORLD_SIZE", "0"),
        Err(LaunchError::BadVariable { .. })
    ));
    assert!(matches!(
        with("LOCAL_RANK", "4"),
        Err(LaunchError::Inconsistent(_))
    ));
    assert!(matches!(
        with("LOCAL_WORLD_SIZE", "9"),
        Err(LaunchError::Inconsistent(_))
    ));
    // Open MPI's rank of the same world contradicts RANK.
    let mut v = TORCHRUN.to_vec();
    v.extend([("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "8")]);
    assert!(matches!(env(&v), Err(LaunchError::Inconsistent(_))));
    // A Slurm job without a node list or MASTER_ADDR has no store host; a bad list is named.
    let slurm = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")];
    assert!(matches!(
        env(&slurm),
        Err(LaunchError::MissingVariable {
            launcher: Launcher::Slurm,
            ..
        })
    ));
    let mut v = slurm.to_vec();
    v.push(("SLURM_JOB_NODELIST", "node[01-"));
    assert!(matches!(
        env(&v),
        Err(LaunchError::BadVariable {
            name: "SLURM_JOB_NODELIST",
            ..
        })
    ));
    // Empty values count as unset.
    let mut v = TORCHRUN.to_vec();
    v.retain(|(k, _)| *k != "WORLD_SIZE");
    v.push(("WORLD_SIZE", " "));
    assert!(matches!(
        env(&v),
        Err(LaunchError::MissingVariable {
            name: "WORLD_SIZE",
            ..
        })
    ));
}

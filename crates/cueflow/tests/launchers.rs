//! Jobs started by launchers (MD5): this test binary starts copies of itself, one per rank,
//! with the variables torchrun, Slurm's `srun` or Open MPI's `mpirun` would set, and each
//! copy runs `rank_process`: `Device::from_local_rank`, `Communicator::from_env`, an
//! all-reduce verified. Misconfigured jobs must fail every rank with the typed error that
//! names the misconfiguration, within the timeout (1.5 s here).
//!
//! The host backend runs these; `cuda_torchrun_two_ranks` runs the same on two GPUs (NCCL)
//! and prints SKIP without them (`CUEFLOW_REQUIRE_NCCL=1` makes that a failure).

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cueflow::{Communicator, Device, DeviceBuffer, LaunchEnv, ReduceOp, Stream};

/// Set in rank processes, so that `rank_process` runs there (and nowhere else).
const ENV_CHILD: &str = "CUEFLOW_LAUNCHERS_CHILD";
const TIMEOUT_S: f64 = 1.5;

type Vars = Vec<(&'static str, String)>;

/// Start one process per entry of `ranks` with those variables (and nothing of a launcher
/// this test itself may run under), and collect their output.
fn start(ranks: Vec<Vars>, device: &str, timeout_s: f64) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ranks
        .into_iter()
        .map(|vars| {
            let mut c = Command::new(&exe);
            c.args(["rank_process", "--exact", "--nocapture", "--test-threads=1"]);
            for (k, _) in std::env::vars() {
                if is_launcher_var(&k) {
                    c.env_remove(k);
                }
            }
            c.env(ENV_CHILD, "1")
                .env("CUEFLOW_DEVICE", device)
                .env("CUEFLOW_LAUNCH_TIMEOUT", timeout_s.to_string())
                .envs(vars)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| text(&c.wait_with_output().unwrap()))
        .collect()
}

fn is_launcher_var(k: &str) -> bool {
    k.starts_with("SLURM_")
        || k.starts_with("OMPI_")
        || k.starts_with("TORCHELASTIC_")
        || k == "CUEFLOW_TRACE"
        || k == "CUEFLOW_STORE_PORT"
        || [
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ]
        .contains(&k)
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Rank `r`'s input: `r * 1000 + i`.
fn rank_data(r: usize, n: usize) -> Vec<i64> {
    (0..n).map(|i| (r * 1000 + i) as i64).collect()
}

/// One rank (does nothing unless started by `start`).
#[test]
fn rank_process() {
    if std::env::var(ENV_CHILD).is_err() {
        return;
    }
    let t = Instant::now();
    let run = || -> cueflow::Result<usize> {
        let dev = Device::from_local_rank()?;
        let comm = Communicator::from_env(&dev)?;
        let (rank, ranks) = (LaunchEnv::from_env()?.rank(), comm.ranks());
        assert_eq!(comm.local_ranks(), vec![rank]);
        let n = 4096;
        let s = Stream::new(&dev)?;
        let x = DeviceBuffer::<i64>::new(&dev, n)?;
        s.write_pageable(&x, &rank_data(rank, n))?;
        comm.all_reduce(&[(&s, &x, &x)], ReduceOp::Sum)?;
        let mut got = vec![0i64; n];
        s.read_pageable(&mut got, &x)?;
        let want: Vec<i64> = (0..n)
            .map(|i| (0..ranks).map(|q| rank_data(q, n)[i]).sum())
            .collect();
        assert_eq!(got, want, "all_reduce on rank {rank}");
        Ok(rank)
    };
    match run() {
        Ok(rank) => println!("RESULT ok rank={rank}"),
        // The variant and its fields (`Error`'s own Debug prints only the message).
        Err(cueflow::Error::Launch(e)) => {
            println!(
                "RESULT err ms={} Launch({e:?}) {e}",
                t.elapsed().as_millis()
            )
        }
        Err(e) => println!("RESULT err ms={} {e}", t.elapsed().as_millis()),
    }
}

/// A port nothing listens at now, in `range`.
fn free_port(range: std::ops::Range<u16>) -> u16 {
    let seed = std::process::id() as usize + Instant::now().elapsed().subsec_nanos() as usize;
    let len = (range.end - range.start) as usize;
    (0..len)
        .map(|i| range.start + ((seed * 7919 + i * 104_729) % len) as u16)
        .find(|&p| TcpListener::bind(("0.0.0.0", p)).is_ok())
        .expect("a free port")
}

fn any_port() -> u16 {
    TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn torchrun(rank: usize, ranks: usize, port: u16) -> Vars {
    vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", ranks.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("LOCAL_WORLD_SIZE", ranks.to_string()),
        ("GROUP_RANK", "0".into()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", port.to_string()),
    ]
}

fn assert_ok(outs: &[String]) {
    for (r, o) in outs.iter().enumerate() {
        assert!(o.contains("RESULT ok rank="), "process {r}:\n{o}");
    }
}

/// Every output is the typed error `variant` (its `Debug` starts `Launch(<variant>`), with
/// `detail` in it, within the timeout and the grace rank 0's verdict may take.
fn assert_err(outs: &[String], variant: &str, detail: &str) {
    for (r, o) in outs.iter().enumerate() {
        let line = o
            .lines()
            .find_map(|l| l.find("RESULT ").map(|i| &l[i..]))
            .unwrap_or_else(|| panic!("process {r} gave no result:\n{o}"));
        assert!(
            line.contains(&format!("Launch({variant}")) && line.contains(detail),
            "process {r}: expected {variant} with {detail:?}, got\n{o}"
        );
        let ms: f64 = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("ms="))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            ms < (2.0 * TIMEOUT_S + 1.0) * 1e3,
            "process {r} took {ms} ms: {line}"
        );
    }
}

#[test]
fn md5_torchrun_four_ranks() {
    let port = any_port();
    assert_ok(&start(
        (0..4).map(|r| torchrun(r, 4, port)).collect(),
        "host",
        30.0,
    ));
}

#[test]
fn md5_torchrun_with_its_agent_serving_its_own_store_at_master_port() {
    // torchrun's agent holds MASTER_PORT (PyTorch's store) and says so: cueflow's store
    // listens at the next port.
    let agent = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = agent.local_addr().unwrap().port();
    let ranks = (0..4)
        .map(|r| {
            let mut v = torchrun(r, 4, port);
            v.push(("TORCHELASTIC_USE_AGENT_STORE", "True".into()));
            v
        })
        .collect();
    assert_ok(&start(ranks, "host", 30.0));
}

#[test]
fn md5_slurm_four_ranks_store_at_the_first_node_and_the_jobs_port() {
    // No MASTER_ADDR / MASTER_PORT: the store is at the node list's first host, at port
    // 20000 + SLURM_JOB_ID mod 10000.
    let port = free_port(20000..30000);
    let job = 4_200_000 + u32::from(port - 20000);
    let vars = |r: usize| -> Vars {
        vec![
            ("SLURM_PROCID", r.to_string()),
            ("SLURM_NTASKS", "4".into()),
            ("SLURM_LOCALID", r.to_string()),
            ("SLURM_NNODES", "1".into()),
            ("SLURM_JOB_ID", job.to_string()),
            ("SLURM_JOB_NODELIST", "localhost,node[02-04]".into()),
            ("SLURM_NODELIST", "localhost,node[02-04]".into()),
        ]
    };
    assert_ok(&start((0..4).map(vars).collect(), "host", 30.0));
}

#[test]
fn md5_open_mpi_four_ranks() {
    // Every rank on this machine (OMPI_COMM_WORLD_LOCAL_SIZE = OMPI_COMM_WORLD_SIZE): the
    // store is at 127.0.0.1 without MASTER_ADDR.
    let port = any_port();
    let vars = |r: usize| -> Vars {
        vec![
            ("OMPI_COMM_WORLD_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "4".into()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4".into()),
            ("MASTER_PORT", port.to_string()),
        ]
    };
    assert_ok(&start((0..4).map(vars).collect(), "host", 30.0));
}

#[test]
fn md5_traces_of_four_ranks_merge_into_one_aligned_timeline() {
    let dir = std::env::temp_dir().join(format!("cueflow-launch-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = any_port();
    // No `{rank}` in the name: under a launcher each rank adds its own.
    let template = dir.join("trace.json").to_string_lossy().into_owned();
    let ranks = (0..4)
        .map(|r| {
            let mut v = torchrun(r, 4, port);
            v.push(("CUEFLOW_TRACE", template.clone()));
            v
        })
        .collect();
    assert_ok(&start(ranks, "host", 30.0));
    let texts: Vec<(String, String)> = (0..4)
        .map(|r| {
            let name = format!("trace-{r}.json");
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            (name, text)
        })
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    let inputs: Vec<(&str, &str)> = texts.iter().map(|(n, t)| (&n[..], &t[..])).collect();
    let merged: serde_json::Value =
        serde_json::from_str(&cueflow::trace::merge::merge_chrome_json(&inputs).unwrap()).unwrap();
    let events = merged["traceEvents"].as_array().unwrap();
    let procs: Vec<String> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(procs.len(), 4, "{procs:?}");
    for (r, p) in procs.iter().enumerate() {
        assert!(p.starts_with(&format!("rank {r}: host")), "{p}");
    }
    // Every rank's mark at one instant, and each rank's all-reduce ends there.
    let marks: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["name"] == cueflow::trace::chrome::CLOCK_SYNC_NAME)
        .collect();
    assert_eq!(marks.len(), 4);
    let at = marks[0]["ts"].as_f64().unwrap();
    // One instant up to the float rounding of each rank's shift (microseconds as f64).
    let ts: Vec<f64> = marks.iter().map(|m| m["ts"].as_f64().unwrap()).collect();
    assert!(ts.iter().all(|t| (t - at).abs() < 1e-3), "{ts:?}");
    for pid in 1..=4u64 {
        let ends: Vec<f64> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == "collective")
            .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
            .collect();
        assert!(!ends.is_empty(), "rank {}: no collective", pid - 1);
        assert!(
            ends.iter().all(|&e| (e - at).abs() < 1e-3),
            "rank {}: {ends:?} vs {at}",
            pid - 1
        );
    }
}

#[test]
fn md5_missing_and_inconsistent_variables_fail_at_once() {
    let port = any_port();
    let mut local_too_big = torchrun(1, 4, port);
    local_too_big[2].1 = "4".into();
    let cases: Vec<(Vars, &str, &str)> = vec![
        (vec![], "NoLauncher", ""),
        (
            vec![("RANK", "0".into())],
            "MissingVariable",
            "name: \"WORLD_SIZE\"",
        ),
        (
            vec![("SLURM_PROCID", "0".into()), ("SLURM_NTASKS", "two".into())],
            "BadVariable",
            "SLURM_NTASKS",
        ),
        (local_too_big, "Inconsistent", "local rank 4"),
        (torchrun(4, 4, port), "RankOutOfRange", "rank: 4, ranks: 4"),
    ];
    std::thread::scope(|s| {
        for (vars, variant, detail) in cases {
            s.spawn(move || assert_err(&start(vec![vars], "host", TIMEOUT_S), variant, detail));
        }
    });
}

#[test]
fn md5_an_unreachable_store_is_named_after_the_timeout() {
    let port = any_port();
    let t = Instant::now();
    let outs = start(vec![torchrun(1, 2, port)], "host", TIMEOUT_S);
    assert_err(&outs, "StoreUnreachable", &format!("127.0.0.1:{port}"));
    assert!(t.elapsed() >= Duration::from_secs_f64(TIMEOUT_S));
}

#[test]
fn md5_a_rank_that_never_comes_times_out_every_rank() {
    let port = any_port();
    let outs = start(
        (0..3).map(|r| torchrun(r, 4, port)).collect(),
        "host",
        TIMEOUT_S,
    );
    assert_err(&outs, "Timeout", "missing: [3]");
}

#[test]
fn md5_a_world_size_that_disagrees_fails_every_rank() {
    let port = any_port();
    let mut ranks: Vec<Vars> = (0..4).map(|r| torchrun(r, 4, port)).collect();
    // Rank 2 is told of a world of 3 (and 3 ranks on this machine).
    ranks[2][1].1 = "3".into();
    ranks[2][3].1 = "3".into();
    assert_err(
        &start(ranks, "host", TIMEOUT_S),
        "WorldSizeMismatch",
        "rank: 2, theirs: 3, ours: 4",
    );
}

#[test]
fn md5_two_processes_claiming_one_rank_fail_every_rank() {
    let port = any_port();
    // Four processes of a world of four, two of them rank 1: rank 3 is missing, so rank 0
    // is still waiting when the second rank 1 comes. (A duplicate arriving after every rank
    // met finds the store closed, and times out.)
    let ranks = [0, 1, 1, 2].map(|r| torchrun(r, 4, port)).to_vec();
    // Two rank 0s: the second finds the port taken and asks the first.
    let port0 = any_port();
    let ranks0 = [0, 0].map(|r| torchrun(r, 2, port0)).to_vec();
    std::thread::scope(|s| {
        s.spawn(|| assert_err(&start(ranks, "host", TIMEOUT_S), "DuplicateRank", "rank: 1"));
        s.spawn(|| {
            assert_err(
                &start(ranks0, "host", TIMEOUT_S),
                "DuplicateRank",
                "rank: 0",
            )
        });
    });
}

#[test]
fn md5_host_backend_refuses_a_store_on_another_machine() {
    let mut vars = torchrun(1, 2, any_port());
    // TEST-NET-1 (RFC 5737): never an address of this machine.
    vars[5].1 = "192.0.2.1".into();
    assert_err(
        &start(vec![vars], "host", TIMEOUT_S),
        "NotLocal",
        "192.0.2.1",
    );
}

#[test]
fn md5_cuda_torchrun_two_ranks() {
    let require = std::env::var("CUEFLOW_REQUIRE_NCCL").is_ok_and(|v| v == "1");
    if let Err(e) = Device::cuda(1).and_then(|d| Communicator::unique_id(&d)) {
        assert!(!require, "CUEFLOW_REQUIRE_NCCL=1 but: {e}");
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP cuda launched ranks: needs two GPUs and NCCL: {e}"
        );
        return;
    }
    let port = any_port();
    assert_ok(&start(
        (0..2).map(|r| torchrun(r, 2, port)).collect(),
        "cuda",
        60.0,
    ));
}

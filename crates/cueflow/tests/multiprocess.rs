//! Collectives whose ranks are separate processes (MD4 with `Communicator::join`): this test
//! binary starts copies of itself, one per rank, each running `rank_process`.
//!
//! On the host backend the ranks meet in shared memory; a mismatched call and a rank that never
//! comes fault the waiting ranks' devices with a typed error instead of hanging (C1, C4). On
//! CUDA every rank has a GPU of its own and NCCL connects them; with fewer than two GPUs, or
//! without `libnccl.so.2`, the CUDA test prints SKIP (`CUEFLOW_REQUIRE_NCCL=1` makes that a
//! failure).

use std::process::{Command, Output};
use std::time::Duration;

use cueflow::{Communicator, Device, DeviceBuffer, Error, ReduceOp, Stream, UniqueId};

const ENV_ID: &str = "CUEFLOW_MP_ID";
const ENV_RANK: &str = "CUEFLOW_MP_RANK";
const ENV_RANKS: &str = "CUEFLOW_MP_RANKS";
const ENV_MODE: &str = "CUEFLOW_MP_MODE";

/// Start `ranks` rank processes (only those in `only`, when given) and collect their output.
fn spawn(id: &UniqueId, ranks: usize, mode: &str, only: Option<&[usize]>) -> Vec<Output> {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..ranks)
        .filter(|r| only.is_none_or(|o| o.contains(r)))
        .map(|r| {
            Command::new(&exe)
                .args(["rank_process", "--exact", "--nocapture", "--test-threads=1"])
                .env(ENV_ID, id.to_string())
                .env(ENV_RANK, r.to_string())
                .env(ENV_RANKS, ranks.to_string())
                .env(ENV_MODE, mode)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
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

/// One rank, run by the tests below in a process of its own (does nothing when run directly).
#[test]
fn rank_process() {
    let (Ok(id), Ok(rank), Ok(ranks), Ok(mode)) = (
        std::env::var(ENV_ID),
        std::env::var(ENV_RANK),
        std::env::var(ENV_RANKS),
        std::env::var(ENV_MODE),
    ) else {
        return;
    };
    if mode == "fault" {
        return fault_or_work(rank.parse().unwrap());
    }
    let id: UniqueId = id.parse().unwrap();
    let (rank, ranks): (usize, usize) = (rank.parse().unwrap(), ranks.parse().unwrap());
    let dev = if id.to_string().starts_with("cuda:") {
        Device::cuda(rank).unwrap()
    } else {
        Device::host().unwrap()
    };
    let timeout = Duration::from_secs(if mode == "ok" { 60 } else { 2 });
    let comm = Communicator::join_with_timeout(&dev, &id, ranks, rank, timeout).unwrap();
    let s = Stream::new(&dev).unwrap();
    // A mismatch: the last rank sends twice as much.
    let n = if mode == "mismatch" && rank == ranks - 1 {
        2000
    } else {
        1000
    };
    let x = DeviceBuffer::<i64>::new(&dev, n).unwrap();
    s.write_pageable(&x, &rank_data(rank, n)).unwrap();
    let sum = DeviceBuffer::<i64>::new(&dev, n).unwrap();
    let all = DeviceBuffer::<i64>::new(&dev, n * ranks).unwrap();
    let r = comm
        .all_reduce(&[(&s, &x, &sum)], ReduceOp::Sum)
        .and_then(|()| comm.all_gather(&[(&s, &x, &all)]))
        .and_then(|()| comm.broadcast(&[(&s, &x, &x)], ranks - 1))
        .and_then(|()| s.synchronize());
    match r {
        Ok(()) => {
            let mut got = vec![0i64; n];
            s.read_pageable(&mut got, &sum).unwrap();
            let want: Vec<i64> = (0..n)
                .map(|i| (0..ranks).map(|q| rank_data(q, n)[i]).sum())
                .collect();
            assert_eq!(got, want, "all_reduce on rank {rank}");
            let mut got = vec![0i64; n * ranks];
            s.read_pageable(&mut got, &all).unwrap();
            let want: Vec<i64> = (0..ranks).flat_map(|q| rank_data(q, n)).collect();
            assert_eq!(got, want, "all_gather on rank {rank}");
            let mut got = vec![0i64; n];
            s.read_pageable(&mut got, &x).unwrap();
            assert_eq!(got, rank_data(ranks - 1, n), "broadcast on rank {rank}");
            println!("RANK {rank} OK");
        }
        Err(e) => {
            assert!(e.is_sticky(), "rank {rank}: {e}");
            assert_eq!(dev.sticky_error(), Some(e.clone()));
            println!("RANK {rank} FAULT {e}");
        }
    }
}

/// MD1 across processes: rank 0 faults its GPU, rank 1 keeps working on its own.
fn fault_or_work(rank: usize) {
    let dev = Device::cuda(rank).unwrap();
    let s = Stream::new(&dev).unwrap();
    if rank == 0 {
        cueflow::kernels::fault(&s).unwrap();
        let e = s.synchronize().unwrap_err();
        assert!(e.is_sticky(), "{e}");
        println!("RANK 0 FAULT {e}");
    } else {
        // Long enough to overlap rank 0's fault.
        let x = DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap();
        for _ in 0..200 {
            cueflow::kernels::fill(&s, &x, 4.0).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut out = vec![0.0f32; 1 << 20];
        s.read_pageable(&mut out, &x).unwrap();
        assert!(out.iter().all(|&v| v == 4.0));
        assert_eq!(dev.sticky_error(), None);
        println!("RANK 1 OK");
    }
}

#[test]
fn cuda_fault_in_one_process_leaves_the_other_gpu_usable() {
    if let Err(e) = Device::cuda(1) {
        if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
            panic!("CUEFLOW_REQUIRE_CUDA=1 but there is no second GPU: {e}");
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP cuda fault isolation: needs two GPUs: {e}"
        );
        return;
    }
    let id: UniqueId = "cuda:00".parse().unwrap();
    let outs = spawn(&id, 2, "fault", None);
    let (t0, t1) = (text(&outs[0]), text(&outs[1]));
    assert!(
        outs[0].status.success() && t0.contains("RANK 0 FAULT"),
        "{t0}"
    );
    assert!(outs[1].status.success() && t1.contains("RANK 1 OK"), "{t1}");
}

fn host_id() -> UniqueId {
    Communicator::unique_id(&Device::host().unwrap()).unwrap()
}

#[test]
fn host_ranks_in_three_processes() {
    let outs = spawn(&host_id(), 3, "ok", None);
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success() && text(o).contains(&format!("RANK {r} OK")),
            "rank {r}: {}",
            text(o)
        );
    }
}

#[test]
fn host_mismatch_across_processes_faults_every_rank() {
    let outs = spawn(&host_id(), 2, "mismatch", None);
    for (r, o) in outs.iter().enumerate() {
        let t = text(o);
        assert!(o.status.success(), "rank {r}: {t}");
        assert!(
            t.contains(&format!("RANK {r} FAULT")) && t.contains("mismatch"),
            "rank {r}: {t}"
        );
    }
}

#[test]
fn host_missing_rank_times_out_instead_of_hanging() {
    let outs = spawn(&host_id(), 2, "missing", Some(&[0]));
    let t = text(&outs[0]);
    assert!(outs[0].status.success(), "{t}");
    assert!(t.contains("RANK 0 FAULT") && t.contains("timed out"), "{t}");
}

#[test]
fn bad_ids_and_ranks_refused() {
    let dev = Device::host().unwrap();
    for bad in ["", "host", "host:", "host:abc", "host:zz"] {
        assert!(
            matches!(bad.parse::<UniqueId>(), Err(Error::InvalidHandle(_))),
            "{bad:?}"
        );
    }
    let id = host_id();
    assert_eq!(id.to_string().parse::<UniqueId>().unwrap(), id);
    assert!(matches!(
        Communicator::join(&dev, &id, 2, 2),
        Err(Error::Collective(_))
    ));
    let cuda_id: UniqueId = "cuda:00ff".parse().unwrap();
    assert!(matches!(
        Communicator::join(&dev, &cuda_id, 2, 0),
        Err(Error::InvalidHandle(_))
    ));
}

#[test]
fn cuda_ranks_in_two_processes() {
    let require = std::env::var("CUEFLOW_REQUIRE_NCCL").is_ok_and(|v| v == "1");
    let skip = |why: String| {
        assert!(!require, "CUEFLOW_REQUIRE_NCCL=1 but {why}");
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP cuda multi-process collectives: {why}"
        );
    };
    if let Err(e) = Device::cuda(1) {
        return skip(format!("needs two GPUs: {e}"));
    }
    let id = match Communicator::unique_id(&Device::cuda(0).unwrap()) {
        Ok(id) => id,
        Err(e) => return skip(e.to_string()),
    };
    let outs = spawn(&id, 2, "ok", None);
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success() && text(o).contains(&format!("RANK {r} OK")),
            "rank {r}: {}",
            text(o)
        );
    }
}

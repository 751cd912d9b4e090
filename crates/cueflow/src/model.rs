//! A performance model of the chunked copy–compute–copy pipeline (serial against concurrent),
//! to predict what streams buy before running anything.
//!
//! # The model
//!
//! A buffer goes through three stages: host-to-device copy (`H`), kernel (`K`) and
//! device-to-host copy (`D`), each given as the time the *whole* buffer takes on that stage
//! alone ([`StageTimes`]). Each stage has its own engine (H2D copy engine, compute, D2H copy
//! engine), and each engine runs one operation at a time. Every operation also pays a fixed
//! per-operation overhead `o` (launch latency, engine switch, small-transfer inefficiency).
//!
//! **Serial** (one stream, one chunk): nothing overlaps, so
//!
//! ```text
//! T_serial = H + K + D + 3·o
//! ```
//!
//! **Concurrent** (the buffer cut into `n` chunks, spread over enough streams): chunk `c` runs
//! `H2D(c) → K(c) → D2H(c)`, and while the kernel works on chunk `c` the H2D engine already
//! copies chunk `c + 1`. Once the pipeline is full, the slowest engine is busy all the time and
//! the other two only add the time the first and last chunks spend there:
//!
//! ```text
//! T_concurrent ≈ max(H, K, D) + (H + K + D − max(H, K, D)) / n + (n + 2)·o
//! ```
//!
//! (the bottleneck engine runs `n` operations back to back and each pays `o`; the first chunk
//! passes once through the engines before it, the last once through those after it). With three
//! equal stages `T` and four chunks that is `T·(1 + 2/4) = 1.5·T`: half of the serial `3·T`,
//! the classic picture of stream overlap. More chunks approach `T`, but the overhead term grows with `n`,
//! so there is an interior optimum that [`choose`] finds.
//!
//! The closed form is [`predict_closed_form`]. [`predict_concurrent`] instead runs a small
//! discrete-event simulation ([`simulate`] returns it as a [`Trace`]) that also accounts for:
//!
//! - **streams**: chunk `c` goes to stream `c % streams`, and each stream is FIFO, so the H2D of
//!   chunk `c` waits for the D2H of chunk `c − streams`. One stream serializes everything.
//! - **issue order**: the program enqueues `H2D c, K c, D2H c` for `c = 0, 1, …`; each engine
//!   starts, among the operations that are ready, the one issued first.
//! - **duplex slowdown** `s ≥ 1`: while both copy engines move data, each direction runs at
//!   `1/s` of its solo rate (PCIe shares more than it promises: about 55/47.6 on an H100; 1.0 on
//!   the host backend). Rates change only at event boundaries (an operation starting or ending).
//! - **compute slots**: how many kernels run side by side without slowing each other (1 = kernels
//!   serialize, the idealized model's assumption).
//! - **shared cores** `C` (0 = none): on the host backend the engines are threads, and a machine
//!   with fewer cores than engine threads shares them: at most `C` operations run at once, and
//!   an operation whose engine is free waits for a core, which goes to the earliest issued
//!   ready operation. (Traces of the host backend on two cores show this, not `C / k` of a core
//!   for each of `k` running operations: a third engine thread that wakes while both cores work
//!   waits for one before it starts its operation.) Three equal stages on two cores then take
//!   `3·T / 2` at best, not `T`. A GPU's engines are hardware of their own (0).
//!
//! All times are nanoseconds as `f64`.

use crate::trace::{Engine, OpKind, Trace, TraceOp};
use std::collections::BTreeSet;

/// Whole-buffer time of each pipeline stage when it runs alone, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Host-to-device copy of the whole buffer.
    pub h2d_ns: f64,
    /// Kernel over the whole buffer.
    pub kernel_ns: f64,
    /// Device-to-host copy of the whole buffer.
    pub d2h_ns: f64,
}

impl StageTimes {
    /// Three equal stages of `t_ns` each (the idealized model's assumption).
    pub fn balanced(t_ns: f64) -> Self {
        StageTimes {
            h2d_ns: t_ns,
            kernel_ns: t_ns,
            d2h_ns: t_ns,
        }
    }

    /// Sum of the three stages.
    pub fn total(&self) -> f64 {
        self.h2d_ns + self.kernel_ns + self.d2h_ns
    }

    /// The slowest stage.
    pub fn max(&self) -> f64 {
        self.h2d_ns.max(self.kernel_ns).max(self.d2h_ns)
    }

    fn get(&self, stage: usize) -> f64 {
        match stage {
            0 => self.h2d_ns,
            1 => self.kernel_ns,
            _ => self.d2h_ns,
        }
    }
}

/// Everything the model needs to know about a machine and a workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelParams {
    /// Whole-buffer stage times.
    pub stages: StageTimes,
    /// Fixed cost added to every operation (each copy and each kernel), in nanoseconds.
    pub per_op_overhead_ns: f64,
    /// Factor (`>= 1`) by which each copy direction slows while the other direction is moving
    /// data too: 1.0 on the host backend, about 55/47.6 on an H100 over PCIe.
    pub duplex_slowdown: f64,
    /// How many kernels can usefully run at once; 1 = kernels serialize.
    pub compute_slots: u32,
    /// Cores that the engines share (the host backend on a machine with fewer cores than
    /// engine threads): at most this many operations run at once, the others wait for a core.
    /// 0: every engine has hardware of its own (a GPU).
    pub shared_cores: u32,
}

impl ModelParams {
    /// Parameters with the given stage times, no overhead, no duplex slowdown and one compute
    /// slot: the idealized model.
    pub fn new(stages: StageTimes) -> Self {
        ModelParams {
            stages,
            per_op_overhead_ns: 0.0,
            duplex_slowdown: 1.0,
            compute_slots: 1,
            shared_cores: 0,
        }
    }
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams::new(StageTimes::default())
    }
}

/// A stream/chunk configuration chosen by [`choose`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// Number of streams.
    pub streams: u32,
    /// Number of chunks (a multiple of `streams`).
    pub chunks: u32,
    /// Predicted time of the whole pipeline, in nanoseconds.
    pub predicted_ns: f64,
}

/// Predicted time of the serial pipeline (one stream, one chunk): `H + K + D + 3·o`.
pub fn predict_serial(p: &ModelParams) -> f64 {
    p.stages.total() + 3.0 * p.per_op_overhead_ns.max(0.0)
}

/// The closed formula for `chunks` chunks on enough streams, ignoring duplex slowdown and
/// compute slots: `max + (sum − max) / n + (n + 2)·o`. Equals [`predict_serial`] for one chunk.
/// `chunks == 0` counts as 1.
pub fn predict_closed_form(p: &ModelParams, chunks: u32) -> f64 {
    let n = f64::from(chunks.max(1));
    let max = p.stages.max();
    max + (p.stages.total() - max) / n + (n + 2.0) * p.per_op_overhead_ns.max(0.0)
}

/// Predicted time, in nanoseconds, of the pipeline with `chunks` chunks spread round-robin over
/// `streams` streams, by discrete-event simulation (see the module docs). Zero streams or chunks
/// count as 1. Runs in `O(chunks · log chunks)` time and `O(chunks)` memory.
pub fn predict_concurrent(p: &ModelParams, streams: u32, chunks: u32) -> f64 {
    let sim = run(p, streams, chunks);
    sim.ops.iter().map(|o| o.end).fold(0.0, f64::max)
}

/// Simulate the pipeline and return the predicted timeline as a [`Trace`]: stream ids
/// `1..=streams` named `stream k` (only those that get a chunk), operations of kinds
/// [`OpKind::CopyH2D`], [`OpKind::Kernel`] and [`OpKind::CopyD2H`] on their engines, times in
/// nanoseconds from 0, all enqueued at time 0. `total_bytes` is split evenly over the chunks and
/// recorded on the copies. Zero streams or chunks count as 1; `simulate(p, 1, 1, b)` is the
/// serial timeline.
pub fn simulate(p: &ModelParams, streams: u32, chunks: u32, total_bytes: u64) -> Trace {
    let sim = run(p, streams, chunks);
    let chunks = u64::from(sim.chunks);
    let used_streams = sim.streams.min(sim.chunks);
    let base = total_bytes / chunks;
    let rem = total_bytes % chunks;
    let ops = sim
        .ops
        .iter()
        .enumerate()
        .map(|(id, op)| {
            let (kind, engine, tag) = match op.stage {
                0 => (OpKind::CopyH2D, Engine::CopyH2D, "h2d"),
                1 => (OpKind::Kernel, Engine::Compute, "kernel"),
                _ => (OpKind::CopyD2H, Engine::CopyD2H, "d2h"),
            };
            let chunk = u64::from(op.chunk);
            let bytes = if kind == OpKind::Kernel {
                0
            } else {
                base + u64::from(chunk < rem)
            };
            TraceOp {
                id: id as u64,
                kind,
                stream: u64::from(op.stream) + 1,
                engine,
                bytes,
                name: format!("{tag} chunk {chunk}"),
                enqueue_ns: 0,
                start_ns: to_ns(op.start),
                end_ns: to_ns(op.end),
                waits_on: Vec::new(),
            }
        })
        .collect();
    Trace {
        device: format!(
            "model: H2D {}, kernel {}, D2H {}, {}/op, duplex ×{:.2}, {} compute slot{}{}",
            fmt_ns(p.stages.h2d_ns),
            fmt_ns(p.stages.kernel_ns),
            fmt_ns(p.stages.d2h_ns),
            fmt_ns(p.per_op_overhead_ns),
            p.duplex_slowdown,
            p.compute_slots.max(1),
            if p.compute_slots.max(1) == 1 { "" } else { "s" },
            if p.shared_cores > 0 {
                format!(", engines share {} cores", p.shared_cores)
            } else {
                String::new()
            },
        ),
        streams: (1..=u64::from(used_streams))
            .map(|s| (s, format!("stream {s}")))
            .collect(),
        ops,
        clock_sync: None,
    }
}

/// Search streams in powers of two up to `max_streams` and chunks in powers of two up to
/// `max_chunks` (chunks ≥ streams, so chunks is a multiple of streams) for the lowest
/// [`predict_concurrent`] time. Among configurations within 1% of the best, the one with the
/// fewest operations (then the fewest streams) wins. Zero limits count as 1.
pub fn choose(p: &ModelParams, max_streams: u32, max_chunks: u32) -> Choice {
    choose_by(|_| *p, max_streams, max_chunks)
}

/// [`choose`] where the parameters depend on the chunk count: `params_at(chunks)` describes the
/// machine for a buffer cut into that many chunks (per-operation costs measured at that chunk
/// size, as on the host backend, where a chunk that stays in the caches costs less per byte
/// than the whole buffer streamed from memory). With the same parameters for every chunk count
/// this is exactly [`choose`].
pub fn choose_by(
    params_at: impl Fn(u32) -> ModelParams,
    max_streams: u32,
    max_chunks: u32,
) -> Choice {
    let max_chunks = max_chunks.max(1);
    let mut candidates = Vec::new();
    let mut streams = 1u32;
    while streams <= max_streams.max(1) && streams <= max_chunks {
        let mut chunks = streams;
        while chunks <= max_chunks {
            candidates.push(Choice {
                streams,
                chunks,
                predicted_ns: predict_concurrent(&params_at(chunks), streams, chunks),
            });
            match chunks.checked_mul(2) {
                Some(c) => chunks = c,
                None => break,
            }
        }
        match streams.checked_mul(2) {
            Some(s) => streams = s,
            None => break,
        }
    }
    let best = candidates
        .iter()
        .map(|c| c.predicted_ns)
        .fold(f64::INFINITY, f64::min);
    candidates
        .into_iter()
        .filter(|c| c.predicted_ns <= best * 1.01)
        .min_by(|a, b| {
            (a.chunks, a.streams)
                .cmp(&(b.chunks, b.streams))
                .then(a.predicted_ns.total_cmp(&b.predicted_ns))
        })
        .unwrap_or(Choice {
            streams: 1,
            chunks: 1,
            predicted_ns: predict_serial(&params_at(1)),
        })
}

fn to_ns(t: f64) -> u64 {
    if t.is_finite() && t > 0.0 {
        t.round() as u64
    } else {
        0
    }
}

/// Duration with automatic units and about three significant digits.
fn fmt_ns(ns: f64) -> String {
    let (v, unit) = if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    let decimals = if v >= 100.0 || unit == "ns" {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {unit}")
}

/// One simulated operation.
struct SimOp {
    /// 0 = H2D, 1 = kernel, 2 = D2H.
    stage: usize,
    chunk: u32,
    /// Stream index, 0-based.
    stream: u32,
    /// Index of the operation this one waits for on its stream, if any.
    pred: Option<usize>,
    state: State,
    overhead_left: f64,
    work_left: f64,
    start: f64,
    end: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Running,
    Done,
}

struct Sim {
    streams: u32,
    chunks: u32,
    ops: Vec<SimOp>,
}

/// Run the discrete-event simulation; operation `3·c + stage` is stage `stage` of chunk `c`.
fn run(p: &ModelParams, streams: u32, chunks: u32) -> Sim {
    let streams = streams.max(1);
    let chunks = chunks.max(1);
    let n = f64::from(chunks);
    let overhead = finite_nonneg(p.per_op_overhead_ns);
    let slowdown = if p.duplex_slowdown.is_finite() {
        p.duplex_slowdown.max(1.0)
    } else {
        1.0
    };
    let capacity = [1usize, p.compute_slots.max(1) as usize, 1];
    let cores = p.shared_cores as usize;

    let mut ops: Vec<SimOp> = Vec::with_capacity(3 * chunks as usize);
    for c in 0..chunks {
        for stage in 0..3 {
            let id = ops.len();
            let pred = if stage > 0 {
                Some(id - 1)
            } else if c >= streams {
                // D2H of chunk c - streams, the previous chunk on this stream.
                Some(3 * (c - streams) as usize + 2)
            } else {
                None
            };
            ops.push(SimOp {
                stage,
                chunk: c,
                stream: c % streams,
                pred,
                state: State::Waiting,
                overhead_left: overhead,
                work_left: finite_nonneg(p.stages.get(stage)) / n,
                start: 0.0,
                end: 0.0,
            });
        }
    }

    let mut t = 0.0f64;
    let mut done = 0usize;
    let mut busy = [0usize; 3];
    let mut running: Vec<usize> = Vec::new();
    // Ops whose stream predecessor is done, per engine; engines take the earliest issued.
    let mut ready: [BTreeSet<usize>; 3] = Default::default();
    for (id, op) in ops.iter().enumerate() {
        if op.pred.is_none() {
            ready[op.stage].insert(id);
        }
    }
    while done < ops.len() {
        // Engines with room start their earliest issued ready operation; with shared cores,
        // only while a core is free, and the earliest issued operation of any engine first.
        while cores == 0 || running.len() < cores {
            let next = (0..3)
                .filter(|&stage| busy[stage] < capacity[stage])
                .filter_map(|stage| ready[stage].first().copied())
                .min();
            let Some(id) = next else {
                break;
            };
            ready[ops[id].stage].remove(&id);
            ops[id].state = State::Running;
            ops[id].start = t;
            busy[ops[id].stage] += 1;
            running.push(id);
        }

        // Which copy directions are moving data right now.
        let mut moving = [false; 3];
        for &id in &running {
            let op = &ops[id];
            if op.overhead_left <= 0.0 && op.work_left > 0.0 {
                moving[op.stage] = true;
            }
        }
        let rate = |op: &SimOp| -> f64 {
            let other = match op.stage {
                0 => moving[2],
                2 => moving[0],
                _ => false,
            };
            if op.overhead_left <= 0.0 && other {
                1.0 / slowdown
            } else {
                1.0
            }
        };
        let to_boundary = |op: &SimOp| -> f64 {
            if op.overhead_left > 0.0 {
                op.overhead_left
            } else {
                op.work_left / rate(op)
            }
        };

        let dt = running
            .iter()
            .map(|&id| to_boundary(&ops[id]))
            .fold(f64::INFINITY, f64::min);
        if !dt.is_finite() {
            // Nothing running and nothing startable: cannot happen, but never spin.
            break;
        }
        let tol = 1e-9 * dt.max(1.0);
        t += dt;
        let mut finished = Vec::new();
        running.retain(|&id| {
            let op = &mut ops[id];
            let r = rate(op);
            if op.overhead_left > 0.0 {
                if op.overhead_left - dt <= tol {
                    op.overhead_left = 0.0;
                } else {
                    op.overhead_left -= dt;
                }
            } else if op.work_left / r - dt <= tol {
                op.work_left = 0.0;
            } else {
                op.work_left -= dt * r;
            }
            if op.overhead_left <= 0.0 && op.work_left <= 0.0 {
                op.state = State::Done;
                op.end = t;
                busy[op.stage] -= 1;
                done += 1;
                finished.push(id);
                false
            } else {
                true
            }
        });
        for id in finished {
            // Next op of the same chunk, or the next chunk on the same stream.
            let next = if ops[id].stage < 2 {
                Some(id + 1)
            } else {
                Some(id + 1 + 3 * (streams as usize - 1)).filter(|&n| n < ops.len())
            };
            if let Some(n) = next {
                ready[ops[n].stage].insert(n);
            }
        }
    }
    Sim {
        streams,
        chunks,
        ops,
    }
}

fn finite_nonneg(x: f64) -> f64 {
    if x.is_finite() {
        x.max(0.0)
    } else {
        0.0
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;

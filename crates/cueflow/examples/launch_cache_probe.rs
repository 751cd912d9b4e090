//! Where a cueflow launch's host time goes beyond its own instructions: a probe on a GPU
//! machine, which has no profiler.
//!
//! Under the null driver cueflow's whole path for an empty launch costs ~0.3–0.4 µs of host
//! time, yet beside the real driver a cueflow launch takes ~1 µs longer than a raw
//! `cuLaunchKernel`. Two explanations are tested here, each row the median per-call host time
//! of batches of `CALLS` calls, all rows alternating round by round in one process, the queue
//! drained (untimed) before each batch:
//!
//! * **The stream.** `raw` launches an empty kernel on a raw non-blocking stream;
//!   `raw_on_cueflow_stream` launches the same function with the same raw call on cueflow's
//!   stream (`Stream::raw_cuda_stream`). Equal rows: the stream cueflow makes costs the driver
//!   nothing more.
//! * **The caches.** `touch` alone touches `LINES` cache lines (a read and a write each: the
//!   fixed set of objects a call's bookkeeping visits) and `alu` runs a dependent chain of
//!   ~800 integer operations (instructions without memory); `raw+touch` and
//!   `raw+alu` do each after a raw launch. If `raw+touch - raw` is well above `touch`, the
//!   driver's launch leaves the host's caches cold for the code after it, and what cueflow
//!   costs beside the real driver depends on how much memory its path touches more than on
//!   its instruction count; if `raw+alu - raw` is near `alu`, instructions alone add up.
//! * **Atomics.** `locked` makes 12 locked read-modify-writes (the number cueflow's launch
//!   path makes, `scripts/locked-ops.sh`) on 12 cache lines; `raw+locked` after a raw launch.
//! * `cueflow`: `kernels::empty` on the cueflow stream, for scale.
//!
//! ```text
//! cargo run --release --example launch_cache_probe [-- ROUNDS CALLS LINES]   (7 10000 64)
//! ```
//! Needs CUDA device 0 and NVRTC; without them it says so and exits 0.

use std::hint::black_box;

use cueflow::cudarc::driver::{sys, CudaContext};
use cueflow::pipeline::median;
use cueflow::{kernels, Device, Stream};

#[path = "support/raw_cuda.rs"]
mod raw_cuda;

use raw_cuda::{cu, launch_empty as launch, non_blocking_stream, per_call, Res};

/// The same `lines` cache lines at every call, 4 KiB + 64 B apart (no two in one set).
struct Lines {
    mem: Vec<u64>,
    lines: usize,
}

impl Lines {
    const STRIDE: usize = (4096 + 64) / 8;

    fn new(lines: usize) -> Lines {
        Lines {
            mem: vec![0; lines * Self::STRIDE + 8],
            lines,
        }
    }

    /// Read and write each line once.
    fn touch(&mut self) {
        for i in 0..self.lines {
            let x = &mut self.mem[i * Self::STRIDE];
            *x = black_box(x.wrapping_add(1));
        }
    }
}

/// A dependent chain of about 800 integer operations touching no memory.
fn alu(seed: u64) -> u64 {
    let mut x = seed;
    for i in 0..200u64 {
        x = black_box(x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(7) ^ i);
    }
    x
}

/// Twelve atomic counters, one per cache line.
#[repr(align(64))]
#[derive(Default)]
struct Padded(std::sync::atomic::AtomicU64);

/// One locked increment of each counter.
fn locked(counters: &[Padded; 12]) {
    for c in counters {
        c.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

fn main() -> Res<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (rounds, calls, lines) = (arg(0, 7), arg(1, 10_000), arg(2, 64));
    if let Some(why) = raw_cuda::skip_reason("launch_cache_probe") {
        println!("{why}");
        return Ok(());
    }
    let ctx = CudaContext::new(0)?;
    ctx.bind_to_thread()?;
    let ptx = cueflow::cudarc::nvrtc::compile_ptx("extern \"C\" __global__ void cf_empty() {}")?;
    let module = ctx.load_module(ptx)?;
    // Valid while `module` lives (to the end of main).
    let func = module.load_function("cf_empty")?.cu_function();
    let raw_stream = non_blocking_stream()?;
    let dev = Device::cuda(0)?;
    let s = Stream::builder(&dev).non_blocking().build()?;
    let cf_stream = s.raw_cuda_stream().ok_or("no raw stream")? as sys::CUstream;
    // The raw call on cueflow's stream needs cueflow's context current: both are the
    // device's primary context (checked here: a launch on the stream succeeds).
    launch(func, cf_stream)?;
    let drain = || -> Res<()> {
        // SAFETY: both streams are live.
        cu(unsafe { sys::cuStreamSynchronize(raw_stream) }, "sync")?;
        s.synchronize()?;
        Ok(())
    };
    let mut mem = Lines::new(lines);
    let seed = std::cell::Cell::new(1u64);
    let counters: [Padded; 12] = Default::default();
    type Body<'a> = Box<dyn FnMut() -> Res<()> + 'a>;
    let names = [
        "raw",
        "raw_on_cueflow_stream",
        "touch",
        "raw+touch",
        "alu",
        "raw+alu",
        "locked",
        "raw+locked",
        "cueflow",
    ];
    let mem_cell = std::cell::RefCell::new(&mut mem);
    let mut rows: Vec<Body> = vec![
        Box::new(|| launch(func, raw_stream)),
        Box::new(|| launch(func, cf_stream)),
        Box::new(|| {
            mem_cell.borrow_mut().touch();
            Ok(())
        }),
        Box::new(|| {
            launch(func, raw_stream)?;
            mem_cell.borrow_mut().touch();
            Ok(())
        }),
        Box::new(|| {
            seed.set(alu(seed.get()));
            Ok(())
        }),
        Box::new(|| {
            launch(func, raw_stream)?;
            seed.set(alu(seed.get()));
            Ok(())
        }),
        Box::new(|| {
            locked(&counters);
            Ok(())
        }),
        Box::new(|| {
            launch(func, raw_stream)?;
            locked(&counters);
            Ok(())
        }),
        Box::new(|| Ok(kernels::empty(&s)?)),
    ];
    // Warm every path up.
    for row in rows.iter_mut() {
        for _ in 0..1000 {
            row()?;
        }
    }
    drain()?;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    for _ in 0..rounds {
        for (row, t) in rows.iter_mut().zip(&mut times) {
            t.push(per_call(7, calls, drain, row.as_mut())?);
        }
    }
    let med: Vec<f64> = times.into_iter().map(median).collect();
    for (name, m) in names.iter().zip(&med) {
        println!("RESULT probe {name}: {m:.3} us");
    }
    let (raw, touch, alu_t) = (med[0], med[2], med[4]);
    println!(
        "RESULT probe lines={lines}: raw_on_cueflow_stream/raw {:.3}; raw+touch - raw {:.3} us against touch alone {:.3} us; raw+alu - raw {:.3} us against alu alone {:.3} us; raw+locked - raw {:.3} us against locked alone {:.3} us; cueflow - raw {:.3} us",
        med[1] / raw,
        med[3] - raw,
        touch,
        med[5] - raw,
        alu_t,
        med[7] - raw,
        med[6],
        med[8] - raw
    );
    Ok(())
}

//! Port of NVIDIA's streamOrderedAllocation: vector addition in memory allocated and freed in
//! stream order (`cudaMallocAsync` / `cudaFreeAsync`), first with the default pool's default
//! attributes, then 20 times in a row with the default pool's release threshold raised to the
//! maximum, so that the synchronization after each round does not give the memory back to the
//! system and later rounds allocate from the pool alone (the "steady state").
//!
//! The checks are the original's (the relative L2 error of `c` against `a + b` below 1e-6,
//! for each part), plus what the original only describes, read from the pool's statistics
//! (`cudaMemPoolAttrReservedMemCurrent`/`…High`, `…UsedMemCurrent`): the default threshold
//! is 0 and the memory goes back at the synchronization; with the raised threshold it stays,
//! and the pool's reserve stops growing after the first round. The original copies from and
//! to `malloc` memory with `cudaMemcpyAsync`; here those are the pageable copies
//! (`write_pageable`, `read_pageable`), which block as CUDA's do for pageable memory (CP3).

use std::process::ExitCode;

use cueflow::{Event, Kernel, KernelArgs, LaunchConfig, MemPool, Stream};
use cueflow_samples::{device, main_with, uniform, vector_add_kernel, Checks};

const SOURCE: &str = include_str!("../../kernels/stream_ordered_allocation.cu");
const MAX_ITER: usize = 20;

fn relative_error(a: &[f32], b: &[f32], c: &[f32]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for i in 0..a.len() {
        let r = (a[i] + b[i]) as f64;
        err += (c[i] as f64 - r).powi(2);
        norm += r * r;
    }
    err.sqrt() / norm.sqrt()
}

/// One round: allocate three buffers on `s`, upload, add, free the inputs, download, free the
/// output, synchronize.
fn round(s: &Stream, k: &Kernel, a: &[f32], b: &[f32], c: &mut [f32]) -> cueflow::Result<()> {
    let n = a.len();
    let (d_a, d_b, d_c) = (
        s.alloc_async::<f32>(n)?,
        s.alloc_async::<f32>(n)?,
        s.alloc_async::<f32>(n)?,
    );
    s.write_pageable(&d_a, a)?;
    s.write_pageable(&d_b, b)?;
    s.launch(
        k,
        LaunchConfig::new(n.div_ceil(256) as u32, 256),
        KernelArgs::new()
            .read(&d_a)
            .read(&d_b)
            .write(&d_c)
            .scalar(n as i32),
    )?;
    s.free_async(d_a)?;
    s.free_async(d_b)?;
    s.read_pageable(c, &d_c)?;
    s.free_async(d_c)?;
    s.synchronize()
}

fn basic(checks: &mut Checks, pool: &MemPool, a: &[f32], b: &[f32]) -> cueflow::Result<()> {
    println!("Starting basicStreamOrderedAllocation()");
    let dev = pool.device();
    let s = Stream::builder(dev).non_blocking().build()?;
    let k = vector_add_kernel(SOURCE);
    let mut c = vec![0.0f32; a.len()];
    checks.eq(
        pool.release_threshold()?,
        0,
        "the default pool's release threshold",
    );
    pool.reset_peaks()?;
    round(&s, &k, a, b, &mut c)?;
    let st = pool.stats()?;
    println!("  pool after the synchronization: {st:?}");
    let bytes = (3 * a.len() * 4) as u64;
    checks.check(
        st.used_high >= bytes,
        format_args!("the pool handed out the round's {bytes} bytes ({st:?})"),
    );
    checks.check(
        st.reserved < st.reserved_high,
        format_args!("threshold 0: the synchronization gave the idle memory back ({st:?})"),
    );
    let rel = relative_error(a, b, &c);
    checks.check(
        rel < 1e-6,
        format_args!("basic: relative L2 error {rel:e} < 1e-6"),
    );
    if rel < 1e-6 {
        println!("basicStreamOrderedAllocation PASSED");
    }
    Ok(())
}

fn post_sync(checks: &mut Checks, pool: &MemPool, a: &[f32], b: &[f32]) -> cueflow::Result<()> {
    println!("Starting streamOrderedAllocationPostSync()");
    let dev = pool.device();
    let s = Stream::builder(dev).non_blocking().build()?;
    let (start, end) = (Event::new(dev)?, Event::new(dev)?);
    let k = vector_add_kernel(SOURCE);
    let mut c = vec![0.0f32; a.len()];
    // Keep freed memory in the pool over synchronizations.
    pool.set_release_threshold(u64::MAX)?;
    pool.reset_peaks()?;
    start.record(&s)?;
    let mut after_first = None;
    for i in 0..MAX_ITER {
        round(&s, &k, a, b, &mut c)?;
        if i == 0 {
            after_first = Some(pool.stats()?);
        }
    }
    end.record(&s)?;
    end.synchronize()?;
    println!(
        "Total elapsed time = {:.6} ms over {MAX_ITER} iterations",
        Event::elapsed_ms(&start, &end)?
    );
    let (first, last) = (after_first.expect("one round ran"), pool.stats()?);
    println!("  pool after round 1: {first:?}\n  pool after round {MAX_ITER}: {last:?}");
    let bytes = (3 * a.len() * 4) as u64;
    checks.check(
        last.reserved >= bytes && last.used == first.used,
        format_args!("the raised threshold kept the freed memory in the pool ({last:?})"),
    );
    checks.eq(
        last.reserved_high,
        first.reserved_high,
        "the pool's reserve after round 1 and after the last round (steady state)",
    );
    let rel = relative_error(a, b, &c);
    checks.check(
        rel < 1e-6,
        format_args!("post-sync: relative L2 error {rel:e} < 1e-6"),
    );
    if rel < 1e-6 {
        println!("streamOrderedAllocationPostSync PASSED");
    }
    // Give the pool CUDA's default back, and the memory it kept.
    pool.set_release_threshold(0)?;
    pool.trim_to(0)?;
    Ok(())
}

fn main() -> ExitCode {
    main_with("streamOrderedAllocation", |checks| {
        let dev = device()?;
        if !dev.properties().memory_pools {
            println!("Waiving execution as device does not support Memory Pools");
            return Ok(());
        }
        let n = 1usize << 20;
        let mut seed = 7u64;
        let a: Vec<f32> = (0..n).map(|_| uniform(&mut seed)).collect();
        let b: Vec<f32> = (0..n).map(|_| uniform(&mut seed)).collect();
        let pool = dev.default_pool();
        basic(checks, &pool, &a, &b)?;
        post_sync(checks, &pool, &a, &b)?;
        Ok(())
    })
}

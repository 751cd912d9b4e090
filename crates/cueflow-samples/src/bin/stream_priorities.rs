//! A port of NVIDIA's `StreamPriorities` sample: two non-blocking streams, one at the least
//! urgent priority the device offers and one at the most urgent (ST7), each get the same pair
//! of grid-stride copy kernels (1,024 blocks of 512 threads over half of a 256 MiB buffer
//! each), launched alternately low, high, low, high. Events recorded on each stream before and
//! after its pair time it (EV6). With priorities the device schedules the urgent stream's
//! blocks first as blocks free up, so its pair finishes sooner.
//!
//! What it checks, as the original: both destinations equal their sources (`memcmp`), after
//! the end events were waited for and the data copied back. Beyond the original, on a GPU it
//! checks what the sample demonstrates: the urgent stream's pair took less time than the
//! other's.
//!
//! Host backend and GPU differ: the host backend accepts the priorities (its range is CUDA's,
//! ST7) but its compute workers take blocks in submission order, so the timing is printed,
//! not checked; the buffers are 32 MiB there (256 MiB on a GPU, as the original).
//!
//! ```text
//! cargo run --release -p cueflow-samples --bin stream_priorities
//! ```

use std::process::ExitCode;

use cueflow::{DeviceBuffer, Event, Kernel, KernelArgs, LaunchConfig, Stream};
use cueflow_samples::{device, main_with, on_gpu, Checks};

const SOURCE: &str = include_str!("../../kernels/stream_priorities.cu");
const TBLOCKS: u32 = 1024;
const THREADS: u32 = 512;

/// `memcpy_kernel(dst, src, n)`; on the host backend a closure making each block's
/// grid-stride copies (the blocks run one after another over the whole of `dst`).
fn memcpy_kernel() -> Kernel {
    Kernel::new("memcpy_kernel")
        .cuda_source(SOURCE, "memcpy_kernel")
        .host(|ctx, args| {
            let (dst, src) = (args.whole_mut::<i32>(0), args.input::<i32>(1));
            let ints = (args.scalar::<u64>(2) / 4) as usize;
            let stride = (TBLOCKS * THREADS) as usize;
            for t in ctx.thread_range() {
                for i in (t as usize..ints).step_by(stride) {
                    dst[i] = src[i];
                }
            }
        })
        .build()
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let dev = device()?;
    let props = dev.properties().clone();
    let (major, minor) = props.compute_capability;
    if (major << 4) + minor < 0x35 {
        println!("StreamPriorities requires Compute Capability of SM 3.5 or higher to run.");
        return Ok(());
    }
    let (low, high) = (props.priority_least, props.priority_greatest);
    println!("CUDA stream priority range: LOW: {low} to HIGH: {high}");
    let st_low = Stream::builder(&dev).non_blocking().priority(low).build()?;
    let st_hi = Stream::builder(&dev)
        .non_blocking()
        .priority(high)
        .build()?;
    checks.eq(st_low.priority(), low, "the low stream's priority");
    checks.eq(st_hi.priority(), high, "the high stream's priority");

    let total: usize = if on_gpu(&dev) { 256 << 20 } else { 32 << 20 };
    let each = total / 2;
    let ints = total / 4;
    let src_low: Vec<i32> = (0..ints as i32).collect();
    let src_hi = src_low.clone();
    let d_src_low = DeviceBuffer::from_slice(&dev, &src_low)?;
    let d_src_hi = DeviceBuffer::from_slice(&dev, &src_hi)?;
    let d_dst_low = DeviceBuffer::<i32>::new(&dev, ints)?;
    let d_dst_hi = DeviceBuffer::<i32>::new(&dev, ints)?;
    let [start_low, start_hi, end_low, end_hi] = [0; 4].map(|_| Event::new(&dev));
    let (start_low, start_hi, end_low, end_hi) = (start_low?, start_hi?, end_low?, end_hi?);
    let copy = memcpy_kernel();
    copy.prepare(&dev)?;

    st_low.record_event(&start_low)?;
    st_hi.record_event(&start_hi)?;
    for i in (0..total).step_by(each) {
        let j = i / 4..(i + each) / 4;
        for (s, dst, src) in [
            (&st_low, &d_dst_low, &d_src_low),
            (&st_hi, &d_dst_hi, &d_src_hi),
        ] {
            s.launch(
                &copy,
                LaunchConfig::new(TBLOCKS, THREADS),
                KernelArgs::new()
                    .write_whole(&dst.slice(j.clone())?)
                    .read(&src.slice(j.clone())?)
                    .scalar(each as u64),
            )?;
        }
    }
    st_low.record_event(&end_low)?;
    st_hi.record_event(&end_hi)?;
    end_low.synchronize()?;
    end_hi.synchronize()?;

    checks.check(
        d_dst_low.to_vec()? == src_low,
        "the low stream's copy equals its source",
    );
    checks.check(
        d_dst_hi.to_vec()? == src_hi,
        "the high stream's copy equals its source",
    );
    let ms_low = Event::elapsed_ms(&start_low, &end_low)?;
    let ms_hi = Event::elapsed_ms(&start_hi, &end_hi)?;
    println!("elapsed time of kernels launched to LOW priority stream: {ms_low:.3} ms");
    println!("elapsed time of kernels launched to HI  priority stream: {ms_hi:.3} ms");
    if on_gpu(&dev) && high < low {
        checks.check(
            ms_hi < ms_low,
            format_args!("the urgent stream's kernels took {ms_hi:.3} ms, under {ms_low:.3} ms"),
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    main_with("StreamPriorities", run)
}

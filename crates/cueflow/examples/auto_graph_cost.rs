//! Host instructions per held call of automatic graphs (SPEC AG2): a window of `calls`
//! `kernels::scale` launches on one stream, then a synchronize, repeated `windows` times — the
//! first windows record the signature and instantiate its graph (`warm`), the measured ones
//! (`held_windows`) hold every call and replay the graph. `plain_windows` runs the same calls
//! on a stream outside the mode, for reference. `scripts/autograph-instructions.sh` counts each
//! function's instructions with callgrind and divides by its calls.
//!
//! Run: `cargo run --release -p cueflow --example auto_graph_cost [windows] [calls]`; prints
//! what the mode did, so a run whose windows were not replayed shows it.

use cueflow::{kernels, Device, DeviceBuffer, Result, Stream};

/// `calls` launches on `s`, then a synchronize, `windows` times.
fn windows_of(s: &Stream, d: &DeviceBuffer<f32>, windows: usize, calls: usize) -> Result<()> {
    for _ in 0..windows {
        for _ in 0..calls {
            kernels::scale(s, d, 1.0)?;
        }
        s.synchronize()?;
    }
    Ok(())
}

/// The measured windows of the stream in the mode: every call held, each window one replay.
#[inline(never)]
fn held_windows(s: &Stream, d: &DeviceBuffer<f32>, windows: usize, calls: usize) -> Result<()> {
    std::hint::black_box("held"); // Not folded into plain_windows: callgrind names each.
    windows_of(s, d, windows, calls)
}

/// The same windows on a stream outside the mode.
#[inline(never)]
fn plain_windows(s: &Stream, d: &DeviceBuffer<f32>, windows: usize, calls: usize) -> Result<()> {
    std::hint::black_box("plain");
    windows_of(s, d, windows, calls)
}

/// Windows that record the signature and instantiate its graph (not measured).
#[inline(never)]
fn warm(s: &Stream, d: &DeviceBuffer<f32>, calls: usize) -> Result<()> {
    windows_of(s, d, 3, calls)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let windows = args.next().flatten().unwrap_or(20);
    let calls = args.next().flatten().unwrap_or(1000);
    let dev = Device::from_env()?;
    let held = Stream::builder(&dev).non_blocking().auto_graph().build()?;
    let plain = Stream::builder(&dev).non_blocking().build()?;
    let d = DeviceBuffer::from_slice(&dev, &[1.0f32; 256])?;
    warm(&held, &d, calls)?;
    warm(&plain, &d, calls)?;
    let before = dev.auto_graph_stats();
    held_windows(&held, &d, windows, calls)?;
    plain_windows(&plain, &d, windows, calls)?;
    let st = dev.auto_graph_stats();
    println!(
        "windows={windows} calls={calls} replays={} replayed_ops={} issued_one_by_one={}",
        st.replays - before.replays,
        st.replayed_ops - before.replayed_ops,
        st.issued_one_by_one - before.issued_one_by_one
    );
    assert_eq!(d.to_vec()?, vec![1.0f32; 256]);
    Ok(())
}

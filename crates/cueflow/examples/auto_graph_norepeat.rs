//! What automatic graphs (SPEC AG1–AG6) cost on work that never repeats: a reproducible random
//! program of launch-bound work over four streams — kernels, copies between the device and
//! pinned memory, event records and cross-stream waits — cut into windows of random length by
//! stream or device synchronizations, so no window repeats a remembered signature and every
//! call is issued as it comes. The same program runs on plain streams and on streams in the
//! mode, alternating round by round; each round's final buffers must be the same bit for bit in
//! both modes. Prints the median time per call in each mode and their ratio (the mode's cost;
//! issue 31 asks for ≤ 1.02).
//!
//! ```text
//! cargo run --release -p cueflow --example auto_graph_norepeat -- [calls] [rounds] [variant]
//! CUEFLOW_DEVICE=cuda:0 cargo run --release -p cueflow --example auto_graph_norepeat
//! ```
//!
//! `AG_ONLY=plain` or `AG_ONLY=auto` runs the program in that mode only, once (for counting
//! instructions with callgrind: `--toggle-collect='auto_graph_norepeat::call'`).

use std::time::Instant;

use cueflow::{kernels, Device, DeviceBuffer, Event, EventFlags, PinnedBuffer, Result, Stream};

const STREAMS: usize = 4;
const N: usize = 4096;

/// A small deterministic generator (the program must be the same in both modes).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Each stream's own buffers: its kernels and copies touch only these, so the program has no
/// race whatever its events, and its result is the same in both modes.
struct Lane {
    stream: Stream,
    a: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
    pinned: PinnedBuffer<f32>,
    event: Event,
}

fn lanes(dev: &Device, auto: bool) -> Result<Vec<Lane>> {
    let quiet = EventFlags {
        timing: false,
        ..EventFlags::default()
    };
    (0..STREAMS)
        .map(|k| {
            let b = Stream::builder(dev).non_blocking();
            Ok(Lane {
                stream: if auto {
                    b.auto_graph().build()?
                } else {
                    b.build()?
                },
                a: DeviceBuffer::from_slice(dev, &vec![k as f32; N])?,
                b: DeviceBuffer::from_slice(dev, &vec![1.0f32; N])?,
                pinned: PinnedBuffer::from_slice(dev, &vec![0.5f32; N])?,
                event: Event::with_flags(dev, quiet)?,
            })
        })
        .collect()
}

/// One call of the program on `lanes`, chosen by `rng`.
fn call(lanes: &mut [Lane], rng: &mut Lcg) -> Result<()> {
    let k = rng.below(STREAMS);
    let factor = [0.5f32, 1.0, 2.0][rng.below(3)];
    match rng.below(10) {
        0..=2 => {
            let l = &lanes[k];
            let buf = if rng.below(2) == 0 { &l.a } else { &l.b };
            kernels::scale(&l.stream, buf, factor)
        }
        3 => kernels::fill(&lanes[k].stream, &lanes[k].b, factor),
        4 | 5 => kernels::saxpy(&lanes[k].stream, 0.5, &lanes[k].a, &lanes[k].b),
        6 => {
            let l = &mut lanes[k];
            l.stream.copy_d2h(&mut l.pinned, &l.b)
        }
        7 => lanes[k].stream.copy_h2d(&lanes[k].a, &lanes[k].pinned),
        8 => lanes[k].stream.record_event(&lanes[k].event),
        _ => {
            let j = rng.below(STREAMS);
            lanes[j].stream.wait_event(&lanes[k].event)
        }
    }
}

/// The whole program: `calls` calls in windows of 4–47 calls, each ended by a synchronize of
/// every stream or of the device. Returns seconds and the final buffers.
fn program(dev: &Device, auto: bool, calls: usize, variant: u64) -> Result<(f64, Vec<u32>)> {
    let mut lanes = lanes(dev, auto)?;
    dev.synchronize()?;
    let mut rng = Lcg(variant);
    let t = Instant::now();
    let mut done = 0;
    while done < calls {
        let len = 4 + rng.below(44);
        for _ in 0..len {
            call(&mut lanes, &mut rng)?;
        }
        done += len;
        if rng.below(2) == 0 {
            dev.synchronize()?;
        } else {
            for l in &lanes {
                l.stream.synchronize()?;
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let mut bits = Vec::new();
    for l in &lanes {
        for v in l.a.to_vec()?.into_iter().chain(l.b.to_vec()?) {
            bits.push(v.to_bits());
        }
        bits.extend(l.pinned.read()?.iter().map(|v| v.to_bits()));
    }
    Ok((secs, bits))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().ok());
    let calls = args.next().flatten().unwrap_or(20_000).max(1) as usize;
    let rounds = args.next().flatten().unwrap_or(7).max(1) as usize;
    let variant = args.next().flatten().unwrap_or(31);
    let dev = Device::from_env()?;
    println!(
        "# work that never repeats: {} ({}), {calls} calls, median of {rounds} rounds, modes alternating",
        dev.properties().name,
        dev.properties().backend
    );
    if let Ok(only) = std::env::var("AG_ONLY") {
        program(&dev, only == "auto", calls, variant)?;
        println!("# {only} only: {:?}", dev.auto_graph_stats());
        return Ok(());
    }
    program(&dev, false, calls / 10, variant)?; // warm: kernels loaded
    let before = dev.auto_graph_stats();
    let (mut plain, mut auto) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Each round its own program, the same in both modes; which mode runs first alternates.
        let variant = variant.wrapping_add(round as u64);
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut results = Vec::new();
        for auto_mode in order {
            let (secs, bits) = program(&dev, auto_mode, calls, variant)?;
            if auto_mode { &mut auto } else { &mut plain }.push(secs * 1e6 / calls as f64);
            results.push(bits);
        }
        if results[0] != results[1] {
            eprintln!("round {round}: the buffers differ between the modes");
            std::process::exit(1);
        }
    }
    let st = dev.auto_graph_stats();
    let (p, a) = (median(plain), median(auto));
    println!("RESULT auto_graph_norepeat mode=plain us_per_call={p:.3}");
    println!("RESULT auto_graph_norepeat mode=auto us_per_call={a:.3}");
    println!("RATIO auto_graph_norepeat auto/plain={:.3}", a / p);
    println!(
        "# in the measured rounds: {} replays, {} graphs instantiated, {} calls issued one by one, {} windows passed a cold device",
        st.replays - before.replays,
        st.graphs - before.graphs,
        st.issued_one_by_one - before.issued_one_by_one,
        st.cold_windows - before.cold_windows
    );
    Ok(())
}

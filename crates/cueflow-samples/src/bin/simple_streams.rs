//! Port of NVIDIA's simpleStreams: the same kernel-then-download work run once on one stream
//! (non-streamed) and split over 4 streams so each stream's download overlaps the others'
//! kernels, timed with events recorded on the legacy default stream; the check is the
//! original's: after `reps` rounds every element is `5 * reps * iterations`.
//!
//! The host memory is, as in the original, either memory the program already has, registered
//! with the device (`cudaHostRegister`, the default, `--use_generic_memory`), or pinned memory
//! allocated for it (`cudaMallocHost`, `--use_cuda_malloc_host`). `--sync_method=n` (0 auto,
//! 1 spin, 2 yield, 4 blocking sync, the default) sets how the host waits, and blocking-sync
//! events with method 4.
//!
//! Sizes: on a GPU the original's (16 Mi ints, 100 rounds with a sync method given, else 10);
//! on the host backend 256 Ki ints and 4 rounds, so the run takes well under a second.

use std::process::ExitCode;

use cueflow::{
    DeviceBuffer, Event, EventFlags, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, PinnedFlags,
    RegisteredBuffer, Stream, SyncMode,
};
use cueflow_samples::{device, main_with, on_gpu};

const SOURCE: &str = include_str!("../../kernels/simple_streams.cu");
const STREAMS: usize = 4;
const ITERATIONS: i32 = 5;
const C: i32 = 5;

fn init_array() -> Kernel {
    Kernel::new("init_array")
        .host(|_, args| {
            let factor = args.input::<i32>(1)[0];
            let iterations: i32 = args.scalar(2);
            for x in args.tile_mut::<i32>(0) {
                for _ in 0..iterations {
                    *x += factor;
                }
            }
        })
        .cuda_source(SOURCE, "init_array")
        .build()
}

/// The host array: registered memory of the program's, or allocated pinned memory.
enum HostArray {
    Registered(RegisteredBuffer<i32>),
    Allocated(PinnedBuffer<i32>),
}

impl HostArray {
    fn buf(&mut self) -> &mut PinnedBuffer<i32> {
        match self {
            HostArray::Registered(r) => r,
            HostArray::Allocated(p) => p,
        }
    }
}

fn arg_int(name: &str) -> Option<i64> {
    let prefix = format!("--{name}=");
    std::env::args().find_map(|a| a.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
}

fn main() -> ExitCode {
    main_with("simpleStreams", |checks| {
        let generic = !std::env::args().any(|a| a == "--use_cuda_malloc_host");
        let method = arg_int("sync_method").unwrap_or(4);
        let mode = match method {
            0 => SyncMode::Auto,
            1 => SyncMode::Spin,
            2 => SyncMode::Yield,
            4 => SyncMode::BlockingSync,
            m => return Err(format!("invalid --sync_method={m}").into()),
        };
        let dev = device()?;
        dev.set_sync_mode(mode)?;
        let gpu = on_gpu(&dev);
        let (n, reps) = if gpu {
            (
                16usize << 20,
                if arg_int("sync_method").is_some() {
                    100
                } else {
                    10
                },
            )
        } else {
            (256usize << 10, 4)
        };
        println!("> array_size = {n}, {reps} rounds, sync method {method} ({mode:?})");
        let mut host = if generic {
            println!(
                "> registering {:.2} MB of the program's memory",
                (n * 4) as f64 / 1e6
            );
            HostArray::Registered(RegisteredBuffer::register(
                &dev,
                vec![0i32; n],
                PinnedFlags::default().mapped(),
            )?)
        } else {
            println!(
                "> allocating {:.2} MB of pinned memory",
                (n * 4) as f64 / 1e6
            );
            HostArray::Allocated(PinnedBuffer::new(&dev, n)?)
        };
        let h = host.buf();
        let legacy = Stream::legacy(&dev);
        let d_a = DeviceBuffer::<i32>::new(&dev, n)?;
        legacy.memset(&d_a, 0)?;
        let d_c = DeviceBuffer::<i32>::new(&dev, 1)?;
        legacy.write_pageable(&d_c, &[C])?;
        let streams = (0..STREAMS)
            .map(|_| Stream::new(&dev))
            .collect::<cueflow::Result<Vec<_>>>()?;
        let flags = EventFlags {
            blocking_sync: mode == SyncMode::BlockingSync,
            ..EventFlags::default()
        };
        let (start, stop) = (
            Event::with_flags(&dev, flags)?,
            Event::with_flags(&dev, flags)?,
        );
        let kernel = init_array();
        let launch = |s: &Stream, part: &DeviceBuffer<i32>| {
            s.launch(
                &kernel,
                LaunchConfig::new((part.len() / 512) as u32, 512),
                KernelArgs::new().write(part).read(&d_c).scalar(ITERATIONS),
            )
        };

        // Time one download and one kernel.
        start.record(&legacy)?;
        streams[0].copy_d2h(&mut *h, &d_a)?;
        stop.record(&legacy)?;
        stop.synchronize()?;
        println!("memcopy:\t{:.2}", Event::elapsed_ms(&start, &stop)?);
        start.record(&legacy)?;
        launch(&streams[0], &d_a)?;
        stop.record(&legacy)?;
        stop.synchronize()?;
        println!("kernel:\t\t{:.2}", Event::elapsed_ms(&start, &stop)?);

        // Non-streamed: kernel, then a synchronous download, on the legacy stream.
        start.record(&legacy)?;
        for _ in 0..reps {
            launch(&legacy, &d_a)?;
            legacy.copy_d2h(&mut *h, &d_a)?;
            legacy.synchronize()?; // cudaMemcpy returns once the data arrived
        }
        stop.record(&legacy)?;
        stop.synchronize()?;
        println!(
            "non-streamed:\t{:.2}",
            Event::elapsed_ms(&start, &stop)? / reps as f32
        );

        // Streamed: each stream its own quarter, kernels then downloads.
        h.write()?.fill(-1);
        legacy.memset(&d_a, 0)?;
        let parts = d_a.chunks(STREAMS)?;
        start.record(&legacy)?;
        for _ in 0..reps {
            for (s, part) in streams.iter().zip(&parts) {
                launch(s, part)?;
            }
            let q = n / STREAMS;
            for (i, (s, part)) in streams.iter().zip(&parts).enumerate() {
                s.copy_d2h(h.range_mut(i * q..(i + 1) * q)?, part)?;
            }
        }
        stop.record(&legacy)?;
        stop.synchronize()?;
        println!(
            "{STREAMS} streams:\t{:.2}",
            Event::elapsed_ms(&start, &stop)? / reps as f32
        );
        println!("-------------------------------");
        let want = C * reps * ITERATIONS;
        let got = h.read()?;
        let bad = got.iter().position(|&x| x != want);
        checks.check(
            bad.is_none(),
            format_args!(
                "element {bad:?} is {:?}, expected {want}",
                bad.map(|i| got[i])
            ),
        );
        drop(got);
        if let HostArray::Registered(r) = host {
            r.unregister()?; // cudaHostUnregister
        }
        Ok(())
    })
}

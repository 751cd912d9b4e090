//! Per-call costs on CUDA against raw driver and NCCL calls in the same process, and the driver
//! calls each cueflow call makes.
//!
//! Each row is the median per-call host time over batches, raw and cueflow alternating in every
//! round (the machine's drift hits both alike), the queue drained before each batch outside the
//! timed region (as `benches/cuda/overhead.cu` times it):
//!
//! * `launch` — an empty kernel, one block of one thread: raw `cuLaunchKernel` on a raw
//!   non-blocking stream (the kernel compiled with NVRTC through cudarc) against
//!   `kernels::empty` on a cueflow stream; batches of `CALLS`.
//! * `graph` — a one-kernel graph: raw `cuGraphLaunch` of a hand-captured graph against
//!   `GraphExec::launch` of cueflow's capture of `kernels::empty`; batches of `CALLS / 10`.
//! * `alternating` — two different empty kernels, one after the other, on one stream: what
//!   most programs do (each launch of a kernel other than the last one sealed a batch of
//!   cueflow's keepalive queue, Q2, until batches held several kernels); batches of `CALLS / 2`
//!   pairs.
//! * `mixed` — a kernel, then a graph launch, on one stream (kernel and graph launches sealed
//!   each other's batch until batches held both).
//! * `allreduce_1mib` — with two devices and NCCL: `Communicator::all_reduce` of 1 MiB (`f32`,
//!   sum, in place) over both GPUs from one thread, against `ncclGroupStart`, `ncclAllReduce`
//!   per GPU (after making its context current), `ncclGroupEnd` over the same buffers and
//!   streams; and the raw calls without binding each context, to see whether that matters.
//!
//! `percall_profile count [ROUNDS CALLS]` runs each loop once instead, under
//! `tools/driver-call-count`'s counting driver (on `LD_LIBRARY_PATH`), which prints the driver
//! calls of each loop (`COUNTS <loop>: cuFoo=N …` on stderr): which calls cueflow makes that raw
//! CUDA does not.
//!
//! ```text
//! cargo run --release --example percall_profile [-- [count] ROUNDS CALLS]   (5 10000)
//! ```
//! Needs CUDA device 0 and NVRTC; without them it says so and exits 0. The allreduce row needs a
//! second device (`cuda:1`) and `libnccl.so.2`.

use std::ffi::c_void;
use std::time::Instant;

use cueflow::cudarc::driver::{sys, CudaContext};
use cueflow::pipeline::median;
use cueflow::{
    kernels, CaptureMode, Communicator, Device, DeviceBuffer, GraphExec, Kernel, KernelArgs,
    LaunchConfig, ReduceOp, Stream,
};

#[path = "support/raw_cuda.rs"]
mod raw_cuda;

use raw_cuda::{cu, launch_empty, non_blocking_stream, per_call, Res};

const EMPTY: &str = "extern \"C\" __global__ void cf_empty() {}
extern \"C\" __global__ void cf_empty_too() {}
extern \"C\" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}";

/// The raw side: a non-blocking stream, the empty kernel and a one-kernel graph.
struct Raw {
    stream: sys::CUstream,
    func: sys::CUfunction,
    /// A second empty kernel, for the alternating row.
    func_too: sys::CUfunction,
    spin: sys::CUfunction,
    exec: sys::CUgraphExec,
    _module: std::sync::Arc<cueflow::cudarc::driver::CudaModule>,
}

impl Raw {
    fn new(ctx: &std::sync::Arc<CudaContext>) -> Res<Raw> {
        ctx.bind_to_thread()?;
        let ptx = cueflow::cudarc::nvrtc::compile_ptx(EMPTY)?;
        let module = ctx.load_module(ptx)?;
        let f = module.load_function("cf_empty")?;
        // The handle stays valid while `module` is alive, which `Raw` keeps.
        let func = f.cu_function();
        let spin = module.load_function("spin")?.cu_function();
        let func_too = module.load_function("cf_empty_too")?.cu_function();
        let stream = non_blocking_stream()?;
        let mut raw = Raw {
            stream,
            func,
            func_too,
            spin,
            exec: std::ptr::null_mut(),
            _module: module,
        };
        raw.exec = raw.capture_one()?;
        Ok(raw)
    }

    fn launch(&self) -> Res<()> {
        launch_empty(self.func, self.stream)
    }

    fn capture_one(&self) -> Res<sys::CUgraphExec> {
        let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the stream is live; capture begins and ends on this thread; out-pointers valid.
        unsafe {
            cu(
                sys::cuStreamBeginCapture_v2(
                    self.stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                ),
                "cuStreamBeginCapture",
            )?;
            self.launch()?;
            cu(
                sys::cuStreamEndCapture(self.stream, &mut graph),
                "cuStreamEndCapture",
            )?;
            cu(
                sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0),
                "cuGraphInstantiate",
            )?;
        }
        Ok(exec)
    }

    fn graph_launch(&self) -> Res<()> {
        // SAFETY: the exec and stream are live.
        cu(
            unsafe { sys::cuGraphLaunch(self.exec, self.stream) },
            "cuGraphLaunch",
        )
    }

    /// One thread spinning for `cycles` clock cycles.
    fn spin(&self, cycles: i64) -> Res<()> {
        let mut c = cycles;
        let mut params = [&mut c as *mut i64 as *mut c_void];
        // SAFETY: `spin` takes one `long long`, which `params` points to for the call.
        cu(
            unsafe {
                sys::cuLaunchKernel(
                    self.spin,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    self.stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
        )
    }

    /// The empty kernel, then the other one.
    fn alternating(&self) -> Res<()> {
        self.launch()?;
        launch_empty(self.func_too, self.stream)
    }

    /// A kernel, then a graph launch.
    fn mixed(&self) -> Res<()> {
        self.launch()?;
        self.graph_launch()
    }

    fn sync(&self) -> Res<()> {
        // SAFETY: the stream is live.
        cu(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        )
    }
}

/// Print the driver calls made since the last call of this, when the driver is
/// `tools/driver-call-count`'s counting stand-in (a no-op on the real driver).
fn driver_counts(label: &str) {
    static DUMP: std::sync::OnceLock<Option<unsafe extern "C" fn(*const std::ffi::c_char)>> =
        std::sync::OnceLock::new();
    let dump = DUMP.get_or_init(|| {
        // SAFETY: opening the driver library again only raises its reference count; the symbol,
        // when present, is the counter's `void cueflow_driver_counts(const char*)`, and the
        // library stays loaded (leaked) for the process.
        // Both names the driver is loaded by (the real driver, which the counter opened by
        // its path, answers to `libcuda.so.1` too).
        ["libcuda.so", "libcuda.so.1"]
            .iter()
            .find_map(|name| unsafe {
                let lib = libloading::Library::new(*name).ok()?;
                let f = *lib
                    .get::<unsafe extern "C" fn(*const std::ffi::c_char)>(
                        b"cueflow_driver_counts\0",
                    )
                    .ok()?;
                std::mem::forget(lib);
                Some(f)
            })
    });
    if let Some(f) = dump {
        let c = std::ffi::CString::new(label).expect("no NUL in labels");
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { f(c.as_ptr()) };
    }
}

/// A second empty kernel, cueflow's side of the alternating row.
fn empty_too() -> Kernel {
    Kernel::new("cf_empty_too")
        .cuda_source(EMPTY, "cf_empty_too")
        .host(|_, _| {})
        .build()
}

/// A kernel, then a graph launch, on a cueflow stream.
fn mixed(exec: &GraphExec, s: &Stream) -> Res<()> {
    kernels::empty(s)?;
    Ok(exec.launch(s)?)
}

/// One row: its name, how many calls a batch makes, and each side's call.
struct Row<'a> {
    name: &'static str,
    calls: usize,
    raw: Box<dyn Fn() -> Res<()> + 'a>,
    cueflow: Box<dyn Fn() -> Res<()> + 'a>,
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let counting = args.first().is_some_and(|a| a == "count");
    let args = if counting { args[1..].to_vec() } else { args };
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (rounds, calls) = (arg(0, 5), arg(1, 10_000));
    if let Some(why) = raw_cuda::skip_reason("percall_profile") {
        println!("{why}");
        return Ok(());
    }
    let ctx = CudaContext::new(0)?;
    let raw = Raw::new(&ctx)?;
    // The device as cueflow opens it (not from cudarc: an adopted context makes every call
    // check which context is current, which an ordinary program does not pay).
    let dev = Device::cuda(0)?;
    let s = Stream::builder(&dev).non_blocking().build()?;
    s.begin_capture(CaptureMode::Relaxed)?;
    kernels::empty(&s)?;
    let exec = s.end_capture()?.instantiate()?;
    let too = empty_too();
    let one = LaunchConfig::new(1, 1);
    let alternating = || -> Res<()> {
        kernels::empty(&s)?;
        Ok(s.launch(&too, one, KernelArgs::new())?)
    };
    // Warm both paths up.
    for _ in 0..1000 {
        raw.launch()?;
        kernels::empty(&s)?;
        raw.alternating()?;
        alternating()?;
        raw.graph_launch()?;
        exec.launch(&s)?;
    }
    raw.sync()?;
    s.synchronize()?;
    let graph_calls = (calls / 10).max(1);
    let rows = [
        Row {
            name: "launch",
            calls,
            raw: Box::new(|| raw.launch()),
            cueflow: Box::new(|| Ok(kernels::empty(&s)?)),
        },
        Row {
            name: "graph",
            calls: graph_calls,
            raw: Box::new(|| raw.graph_launch()),
            cueflow: Box::new(|| Ok(exec.launch(&s)?)),
        },
        Row {
            name: "alternating",
            calls: (calls / 2).max(1),
            raw: Box::new(|| raw.alternating()),
            cueflow: Box::new(alternating),
        },
        Row {
            name: "mixed",
            calls: graph_calls,
            raw: Box::new(|| raw.mixed()),
            cueflow: Box::new(|| mixed(&exec, &s)),
        },
    ];
    let raw_sync = || {
        ctx.bind_to_thread()?;
        raw.sync()
    };
    let cf_sync = || Ok(s.synchronize()?);
    if counting {
        // With the counting driver: `calls` of each, the queues drained between them, each
        // loop's driver calls printed (stderr).
        for row in &rows {
            for (side, call, sync) in [
                ("raw", &row.raw, &raw_sync as &dyn Fn() -> Res<()>),
                ("cueflow", &row.cueflow, &cf_sync),
            ] {
                sync()?;
                driver_counts("drain");
                for _ in 0..calls {
                    call()?;
                }
                driver_counts(&format!("{side}_{} x{calls}", row.name));
            }
        }
        cf_sync()?;
        return allreduce(&dev, &s, 0, calls);
    }
    for row in &rows {
        let (mut r, mut c) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            r.push(per_call(7, row.calls, raw_sync, &row.raw)?);
            c.push(per_call(7, row.calls, cf_sync, &row.cueflow)?);
        }
        let ratios: Vec<f64> = r.iter().zip(&c).map(|(r, c)| c / r).collect();
        println!(
            "RESULT percall {}: raw {:.3} us, cueflow {:.3} us, cueflow/raw {:.3} (rounds {:.3}..{:.3})",
            row.name,
            median(r),
            median(c),
            median(ratios.clone()),
            ratios.iter().cloned().fold(f64::INFINITY, f64::min),
            ratios.iter().cloned().fold(0.0, f64::max)
        );
    }
    event_costs(&raw, calls)?;
    allreduce(&dev, &s, rounds, calls)
}

/// The raw event calls the events row times.
mod event {
    use super::{cu, sys, Res};

    pub fn create() -> Res<sys::CUevent> {
        let mut e = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: a valid out-pointer; the caller's context is current.
        let r = unsafe { sys::cuEventCreate(&mut e, flags) };
        cu(r, "cuEventCreate")?;
        Ok(e)
    }

    pub fn destroy(e: sys::CUevent) -> Res<()> {
        // SAFETY: `e` came from `create` and is not used after this.
        cu(unsafe { sys::cuEventDestroy_v2(e) }, "cuEventDestroy")
    }

    pub fn record(e: sys::CUevent, s: sys::CUstream) -> Res<()> {
        // SAFETY: a live event and stream of the current context.
        cu(unsafe { sys::cuEventRecord(e, s) }, "cuEventRecord")
    }

    /// Whether `e` completed.
    pub fn query(e: sys::CUevent) -> Res<bool> {
        // SAFETY: a live event.
        match unsafe { sys::cuEventQuery(e) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(format!("cuEventQuery: {e:?}").into()),
        }
    }
}

/// What the driver's event calls cost here (they decide how a keepalive queue retires its
/// batches, Q2/Q3): create + destroy, record, and a query of a completed event and of one still
/// pending behind a spinning kernel.
fn event_costs(raw: &Raw, calls: usize) -> Res<()> {
    let time = |body: &mut dyn FnMut() -> Res<()>| -> Res<f64> {
        let start = Instant::now();
        for _ in 0..calls {
            body()?;
        }
        Ok(start.elapsed().as_secs_f64() * 1e6 / calls as f64)
    };
    let ev = event::create()?;
    let create_destroy = time(&mut || event::destroy(event::create()?))?;
    let record = time(&mut || event::record(ev, raw.stream))?;
    raw.sync()?;
    let done = time(&mut || event::query(ev).map(drop))?;
    // The first query of an event that completed since it was recorded (the host waits 50 us
    // after recording it behind an empty kernel, so the GPU is past it).
    let mut fresh = Vec::with_capacity(calls.min(2000));
    for _ in 0..calls.min(2000) {
        raw.launch()?;
        event::record(ev, raw.stream)?;
        let t = Instant::now();
        while t.elapsed() < std::time::Duration::from_micros(50) {}
        let t = Instant::now();
        event::query(ev)?;
        fresh.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let fresh = median(fresh);
    // Pending: behind a kernel spinning for ~2e9 cycles (about a second), longer than the loop.
    raw.spin(2_000_000_000)?;
    event::record(ev, raw.stream)?;
    let pending_ready = event::query(ev)?;
    let pending = time(&mut || event::query(ev).map(drop))?;
    raw.sync()?;
    event::destroy(ev)?;
    println!(
        "RESULT percall events: create+destroy {create_destroy:.3} us, record {record:.3} us, query done {done:.3} us, first query after completion {fresh:.3} us, query pending {pending:.3} us{}",
        if pending_ready { " (the pending event was already complete)" } else { "" }
    );
    Ok(())
}

/// The one-thread all-reduce over `cuda:0` (this program's device) and `cuda:1`: timed in
/// `rounds` rounds, or counted (`rounds` 0) over `calls` calls.
/// One in-place all-reduce over both members (a function of its own, so callgrind under
/// `tools/null-driver` can count its instructions: `--toggle-collect='*cueflow_all_reduce'`).
#[inline(never)]
fn cueflow_all_reduce(
    comm: &Communicator,
    members: [(&Stream, &DeviceBuffer<f32>); 2],
) -> cueflow::Result<()> {
    let [(s0, x0), (s1, x1)] = members;
    comm.all_reduce(&[(s0, x0, x0), (s1, x1, x1)], ReduceOp::Sum)
}

fn allreduce(d0: &Device, s0: &Stream, rounds: usize, calls: usize) -> Res<()> {
    let Ok(d1) = Device::open_str("cuda:1") else {
        println!("SKIP allreduce: no second CUDA device");
        return Ok(());
    };
    let comm = match Communicator::new(&[d0.clone(), d1.clone()]) {
        Ok(c) => c,
        Err(e) => {
            println!("SKIP allreduce: {e}");
            return Ok(());
        }
    };
    let n = (1 << 20) / 4;
    let s1 = Stream::builder(&d1).non_blocking().build()?;
    let x0 = DeviceBuffer::<f32>::new(d0, n)?;
    let x1 = DeviceBuffer::<f32>::new(&d1, n)?;
    kernels::fill(s0, &x0, 0.0)?;
    kernels::fill(&s1, &x1, 0.0)?;
    let call = || cueflow_all_reduce(&comm, [(s0, &x0), (&s1, &x1)]);
    let sync = || -> Res<()> {
        s0.synchronize()?;
        s1.synchronize()?;
        Ok(())
    };
    for _ in 0..20 {
        call()?;
    }
    sync()?;
    if rounds == 0 {
        let n = calls.min(1000);
        driver_counts("setup");
        for _ in 0..n {
            call()?;
        }
        driver_counts(&format!("cueflow_allreduce x{n}"));
        return sync();
    }
    let raw = RawNccl::new([(d0, s0, &x0), (&d1, &s1, &x1)])?;
    let mut t: [Vec<f64>; 3] = Default::default();
    for _ in 0..rounds {
        t[0].push(per_call(7, 100, sync, || raw.all_reduce(true))?);
        t[1].push(per_call(7, 100, sync, || Ok(call()?))?);
        t[2].push(per_call(7, 100, sync, || raw.all_reduce(false))?);
    }
    let [r, c, u] = t.map(median);
    println!(
        "RESULT percall allreduce_1mib: raw {r:.3} us, cueflow {c:.3} us, cueflow/raw {:.3}; raw without setting each member's context {u:.3} us (host, batches of 100, drained between)",
        c / r
    );
    Ok(())
}

/// NCCL called directly over the same buffers and streams: the in-process reference of the
/// one-thread all-reduce (`ncclGroupStart`, `ncclAllReduce` per GPU, `ncclGroupEnd`).
struct RawNccl {
    _lib: libloading::Library,
    group_start: unsafe extern "C" fn() -> i32,
    group_end: unsafe extern "C" fn() -> i32,
    #[allow(clippy::type_complexity)]
    all_reduce: unsafe extern "C" fn(u64, u64, usize, i32, i32, *mut c_void, *mut c_void) -> i32,
    members: Vec<(*mut c_void, *mut c_void, sys::CUcontext, u64, usize)>,
}

impl RawNccl {
    fn new(parts: [(&Device, &Stream, &DeviceBuffer<f32>); 2]) -> Res<RawNccl> {
        // SAFETY: NCCL's C functions with their documented signatures; the library stays
        // loaded while `RawNccl` holds it.
        unsafe {
            let lib = libloading::Library::new("libnccl.so.2")?;
            let init_all: unsafe extern "C" fn(*mut *mut c_void, i32, *const i32) -> i32 =
                *lib.get(b"ncclCommInitAll\0")?;
            let mut comms = [std::ptr::null_mut(); 2];
            let r = init_all(comms.as_mut_ptr(), 2, [0i32, 1].as_ptr());
            if r != 0 {
                return Err(format!("ncclCommInitAll: {r}").into());
            }
            let members = parts
                .iter()
                .zip(comms)
                .map(|((d, s, x), comm)| {
                    let ctx = d.raw_cuda_context().ok_or("no raw context")? as sys::CUcontext;
                    let st = s.raw_cuda_stream().ok_or("no raw stream")?;
                    Ok((comm, st, ctx, x.device_addr(), x.len()))
                })
                .collect::<Res<Vec<_>>>()?;
            Ok(RawNccl {
                group_start: *lib.get(b"ncclGroupStart\0")?,
                group_end: *lib.get(b"ncclGroupEnd\0")?,
                all_reduce: *lib.get(b"ncclAllReduce\0")?,
                members,
                _lib: lib,
            })
        }
    }

    /// One all-reduce (sum, f32, in place) over both GPUs; `bind` makes each member's context
    /// current before its call, as a CUDA program calls `cudaSetDevice`.
    fn all_reduce(&self, bind: bool) -> Res<()> {
        // SAFETY: the communicators, streams and buffers are live (the caller holds them), each
        // buffer holds `n` floats on its member's device.
        unsafe {
            if (self.group_start)() != 0 {
                return Err("ncclGroupStart".into());
            }
            for &(comm, st, ctx, addr, n) in &self.members {
                if bind {
                    cu(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
                }
                let r = (self.all_reduce)(addr, addr, n, 7, 0, comm, st);
                if r != 0 {
                    return Err(format!("ncclAllReduce: {r}").into());
                }
            }
            if (self.group_end)() != 0 {
                return Err("ncclGroupEnd".into());
            }
        }
        Ok(())
    }
}

//! A cuBLAS SGEMM in the middle of a cueflow stream program, as an external operation:
//! upload A and B → scale A by 2 (a cueflow kernel) → C = A·B (cuBLAS on the raw stream, or the
//! host side on the host backend) → scale C by 0.5 → download, verified against a host
//! reference; a Chrome trace and a timeline show the SGEMM with its stream and engine. Then the
//! same program is captured into a graph (the SGEMM's nodes captured from cuBLAS by the
//! driver), launched three times, and its result compared with the stream run's bit for bit.
//!
//! ```text
//! cargo run --release --example 08_sgemm [-- N [OUT_DIR]]     (N×N matrices, default 1024)
//! ```
//! cuBLAS is loaded at run time (`libcublas.so.13`, `.12`, or `CUEFLOW_CUBLAS_LIB`); on a GPU
//! machine without it the example says so and exits 0. Device: `CUEFLOW_DEVICE`.

use std::ffi::{c_int, c_void, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use cueflow::trace::chrome::to_chrome_json;
use cueflow::trace::svg::{to_svg, RowMode, SvgOptions};
use cueflow::{kernels, CaptureMode, Device, DeviceBuffer, Error, PinnedBuffer, Result, Stream};

type Handle = *mut c_void;

/// The three cuBLAS functions the example calls.
struct Cublas {
    create: unsafe extern "C" fn(*mut Handle) -> c_int,
    set_stream: unsafe extern "C" fn(Handle, *mut c_void) -> c_int,
    #[allow(clippy::type_complexity)]
    sgemm: unsafe extern "C" fn(
        Handle,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        *const f32,
        *const f32,
        c_int,
        *const f32,
        c_int,
        *const f32,
        *mut f32,
        c_int,
    ) -> c_int,
}

/// cuBLAS, opened once, or why it is missing.
fn cublas() -> std::result::Result<&'static Cublas, String> {
    static LIB: OnceLock<std::result::Result<Cublas, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let names: Vec<String> = match std::env::var("CUEFLOW_CUBLAS_LIB") {
            Ok(n) => vec![n],
            Err(_) => vec![
                "libcublas.so.13".into(),
                "libcublas.so.12".into(),
                "libcublas.so".into(),
            ],
        };
        for n in &names {
            let c = CString::new(n.as_str()).expect("no NUL");
            // SAFETY: a NUL-terminated name; the handle is kept for the process.
            let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if lib.is_null() {
                continue;
            }
            let sym = |s: &str| {
                let cs = CString::new(s).expect("no NUL");
                // SAFETY: `lib` is live; `cs` is NUL-terminated.
                unsafe { libc::dlsym(lib, cs.as_ptr()) }
            };
            let (c, st, g) = (
                sym("cublasCreate_v2"),
                sym("cublasSetStream_v2"),
                sym("cublasSgemm_v2"),
            );
            if c.is_null() || st.is_null() || g.is_null() {
                return Err(format!("{n} lacks cublasCreate_v2/SetStream_v2/Sgemm_v2"));
            }
            // SAFETY: the symbols are cuBLAS v2 functions with exactly these C signatures.
            return Ok(unsafe {
                Cublas {
                    create: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(*mut Handle) -> c_int,
                    >(c),
                    set_stream: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(Handle, *mut c_void) -> c_int,
                    >(st),
                    sgemm: std::mem::transmute_copy::<*mut c_void, _>(&g),
                }
            });
        }
        Err(format!("no cuBLAS library found (tried {names:?})"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// One cuBLAS handle for the process, made on first use (its GPU's context current).
fn handle(lib: &Cublas) -> Result<Handle> {
    static H: OnceLock<usize> = OnceLock::new();
    if let Some(&h) = H.get() {
        return Ok(h as Handle);
    }
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the caller's context is current.
    let r = unsafe { (lib.create)(&mut h) };
    if r != 0 {
        return Err(Error::Unsupported(format!(
            "cublasCreate failed: status {r}"
        )));
    }
    Ok(*H.get_or_init(|| h as usize) as Handle)
}

/// Enqueue C = A·B (row-major n×n) on `s`: cuBLAS on CUDA, a plain triple loop on the host.
fn sgemm(
    s: &Stream,
    n: usize,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
    c: &DeviceBuffer<f32>,
) -> Result<()> {
    let (pa, pb, pc) = (a.device_addr(), b.device_addr(), c.device_addr());
    s.external("cublasSgemm")
        .reads(a)
        .reads(b)
        .writes(c)
        .cuda(move |raw| {
            let lib = cublas().map_err(Error::Unsupported)?;
            let h = handle(lib)?;
            let (one, zero, n) = (1.0f32, 0.0f32, n as c_int);
            // SAFETY: the three ranges are the declared buffers (alive while the op is), n×n
            // f32 each; `raw.stream` is the live stream. Row-major C = A·B is column-major
            // Cᵀ = Bᵀ·Aᵀ, so B comes first.
            let r = unsafe {
                (lib.set_stream)(h, raw.stream);
                (lib.sgemm)(
                    h,
                    0,
                    0,
                    n,
                    n,
                    n,
                    &one,
                    pb as *const f32,
                    n,
                    pa as *const f32,
                    n,
                    &zero,
                    pc as *mut f32,
                    n,
                )
            };
            if r != 0 {
                return Err(Error::Unsupported(format!(
                    "cublasSgemm failed: status {r}"
                )));
            }
            Ok(())
        })
        .host(move |io| {
            let (ins, mut outs) = io.buffers::<f32>();
            let (a, b, c) = (ins[0], ins[1], &mut outs[0]);
            for i in 0..n {
                for j in 0..n {
                    c[i * n + j] = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
                }
            }
        })
        .enqueue()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .first()
        .map_or(1024, |a| a.parse().expect("N is a number"));
    let out_dir = PathBuf::from(args.get(1).map_or(".", String::as_str));
    run(&Device::from_env()?, n, &out_dir)
}

/// The whole example on `dev` with n×n matrices, files into `out_dir`.
pub fn run(dev: &Device, n: usize, out_dir: &std::path::Path) -> Result<()> {
    let dev = dev.clone();
    if dev.properties().backend == "cuda" {
        if let Err(why) = cublas() {
            println!("08_sgemm: cuBLAS is not available ({why}); nothing to run");
            return Ok(());
        }
    }
    let s = Stream::builder(&dev)
        .non_blocking()
        .name("sgemm stream")
        .build()?;
    let av: Vec<f32> = (0..n * n)
        .map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5)
        .collect();
    let bv: Vec<f32> = (0..n * n)
        .map(|i| ((i * 5) % 11) as f32 * 0.125 - 0.5)
        .collect();
    let (ha, hb) = (
        PinnedBuffer::from_slice(&dev, &av)?,
        PinnedBuffer::from_slice(&dev, &bv)?,
    );
    let mut hc = PinnedBuffer::<f32>::new(&dev, n * n)?;
    let [a, b, c] = [0, 1, 2].map(|_| DeviceBuffer::<f32>::new(&dev, n * n));
    let (a, b, c) = (a?, b?, c?);

    // Upload, scale A, SGEMM, scale C, download.
    let program = |hc: &mut PinnedBuffer<f32>| -> Result<()> {
        s.copy_h2d(&a, &ha)?;
        s.copy_h2d(&b, &hb)?;
        kernels::scale(&s, &a, 2.0)?;
        sgemm(&s, n, &a, &b, &c)?;
        kernels::scale(&s, &c, 0.5)?;
        s.copy_d2h(hc, &c)
    };
    // Twice: the first run loads cuBLAS and makes its handle (host time that would otherwise
    // stretch the traced SGEMM, whose start event is already recorded); the second is traced.
    for traced in [false, true] {
        if traced {
            dev.start_trace()?;
        }
        program(&mut hc)?;
        s.synchronize()?;
    }
    let trace = dev.stop_trace()?;
    let streamed: Vec<f32> = hc.read()?.to_vec();

    // The same program captured into a graph: the SGEMM's CUDA side is called when the graph
    // is instantiated, on a stream the driver captures; cuBLAS's work then runs at every launch
    // (on the host backend, the host side runs at every launch).
    // A driver too old for what cuBLAS does inside a graph (graph memory in an external
    // operation needs CUDA 12.3) refuses it with `Unsupported` naming that version: that part
    // is skipped, said so; any other error is the example's.
    hc.write()?.fill(0.0);
    s.begin_capture(CaptureMode::Global)?;
    program(&mut hc)?;
    let launches = 3;
    let graph = match s.end_capture().and_then(|g| g.instantiate()) {
        Ok(exec) => {
            let t = std::time::Instant::now();
            for _ in 0..launches {
                exec.launch(&s)?;
            }
            s.synchronize()?;
            let ms = t.elapsed().as_secs_f64() * 1e3 / launches as f64;
            Some((ms, *hc.read()? == *streamed))
        }
        Err(e) => match e.needed_driver_version() {
            Some(v) if v > dev.properties().driver_version => {
                println!(
                    "SKIP 08_sgemm captured into a graph: needs CUDA {}.{} ({e})",
                    v / 1000,
                    v % 1000 / 10
                );
                None
            }
            _ => return Err(e),
        },
    };
    let replayed = graph.is_none_or(|(_, same)| same);

    // Host reference: (2A)·B·0.5 = A·B, in f64.
    let got = &streamed;
    let mut worst = 0.0f64;
    for i in 0..n {
        for j in (0..n).step_by((n / 64).max(1)) {
            let want: f64 = (0..n)
                .map(|k| av[i * n + k] as f64 * bv[k * n + j] as f64)
                .sum();
            let err = (got[i * n + j] as f64 - want).abs() / want.abs().max(1.0);
            worst = worst.max(err);
        }
    }
    let ok = worst < 1e-3 && replayed;
    let ext = trace
        .ops
        .iter()
        .find(|o| o.name == "cublasSgemm")
        .expect("the SGEMM is traced");
    println!(
        "08_sgemm on {}: {n}×{n} SGEMM as an external operation on `{}` ({:?} engine), {:.3} ms; \
         worst relative error against the host reference {worst:.2e}: {}",
        dev.properties().name,
        trace.stream_name(ext.stream),
        ext.engine,
        (ext.end_ns - ext.start_ns) as f64 / 1e6,
        if ok { "verified" } else { "WRONG" }
    );
    if let Some((graph_ms, _)) = graph {
        println!(
            "08_sgemm captured into a graph (upload, scale, SGEMM, scale, download): {graph_ms:.3} \
             ms per launch of {launches}; the result {} the stream run's bit for bit",
            if replayed { "equals" } else { "DIFFERS from" }
        );
    }
    std::fs::create_dir_all(out_dir).ok();
    let json = out_dir.join("sgemm_trace.json");
    let svg = out_dir.join("sgemm_timeline.svg");
    std::fs::write(&json, to_chrome_json(&trace)).map_err(|e| Error::Unsupported(e.to_string()))?;
    let opts = SvgOptions {
        title: format!("cueflow: a cuBLAS SGEMM ({n}×{n}) between cueflow kernels"),
        rows: RowMode::ByStream,
        width_px: 1000,
    };
    std::fs::write(&svg, to_svg(&[("sgemm", &trace)], &opts))
        .map_err(|e| Error::Unsupported(e.to_string()))?;
    println!("wrote {} and {}", json.display(), svg.display());
    if !ok {
        return Err(Error::Unsupported(format!(
            "SGEMM result off by {worst:.2e}"
        )));
    }
    Ok(())
}

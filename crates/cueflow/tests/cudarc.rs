//! cudarc interop (feature `cudarc-interop`): a cudarc context, streams and slices handed to
//! cueflow and back without copying, and cudarc calls over cueflow memory as declared
//! operations the sanitizer sees. The refusals run everywhere; the rest needs CUDA device 0
//! (`SKIP cuda: …` otherwise; `CUEFLOW_REQUIRE_CUDA=1` makes that a failure).
#![cfg(feature = "cudarc-interop")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use cueflow::cudarc::driver::{CudaContext, CudaFunction, PushKernelArg};
use cueflow::{kernels, CaptureMode, Device, DeviceBuffer, Error, SanitizeMode, Stream};

/// A cueflow device of its own on CUDA device 0 (the tests run at once; each keeps its
/// sanitizer mode and reports to itself) with its context as cudarc's, or `None` after
/// printing why the CUDA tests are skipped.
///
/// cueflow is asked first, before any cudarc call: on a driver older than cudarc's bindings
/// need (CUDA 12.5), cudarc's loader panics at the first function the driver lacks, and
/// `Device::cudarc_context` refuses with `Unsupported` naming that version instead — then
/// the test is skipped, said so. Every test calls this before touching cudarc.
fn cuda() -> Option<(Arc<CudaContext>, Device)> {
    match Device::cuda(0) {
        Ok(dev) => match dev.cudarc_context() {
            Ok(ctx) => Some((ctx, dev)),
            Err(e) => {
                let driver = dev.properties().driver_version;
                match e.needed_driver_version() {
                    Some(v) if v > driver => {
                        eprintln!(
                            "SKIP cudarc (driver CUDA {}.{}): {e}",
                            driver / 1000,
                            driver % 1000 / 10
                        );
                        None
                    }
                    _ => panic!("Device::cudarc_context: {e}"),
                }
            }
        },
        Err(e) => {
            if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("CUEFLOW_REQUIRE_CUDA=1 but the CUDA backend is unavailable: {e}");
            }
            eprintln!("SKIP cuda: {e}");
            None
        }
    }
}

const FILL: &str = r#"
extern "C" __global__ void fill(float* x, float v, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
extern "C" __global__ void add(const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
"#;

/// `fill` and `add`, compiled with cudarc's NVRTC and loaded with cudarc.
fn functions(ctx: &Arc<CudaContext>) -> (CudaFunction, CudaFunction) {
    let ptx = cueflow::cudarc::nvrtc::compile_ptx(FILL).unwrap();
    let m = ctx.load_module(ptx).unwrap();
    (
        m.load_function("fill").unwrap(),
        m.load_function("add").unwrap(),
    )
}

/// A cudarc kernel launch writing `v` into `x`, as an operation on `s`.
fn cudarc_fill(s: &Stream, f: &CudaFunction, x: &DeviceBuffer<f32>, v: f32) -> cueflow::Result<()> {
    s.cudarc("cudarc fill").writes(x).run(|call| {
        let (mut x,) = call.views();
        let n = x.len() as u32;
        let mut launch = call.stream().launch_builder(f);
        launch.arg(&mut x).arg(&v).arg(&n);
        let cfg = cueflow::cudarc::driver::LaunchConfig::for_num_elems(n);
        // SAFETY: `fill(float*, float, unsigned)` with a view of `n` floats.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    })
}

#[test]
fn cudarc_calls_are_refused_on_the_host_backend() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let (a, b) = (
        DeviceBuffer::<f32>::from_slice(&dev, &[1.0; 64]).unwrap(),
        DeviceBuffer::<f32>::new(&dev, 64).unwrap(),
    );
    dev.start_trace().unwrap();
    let called = AtomicBool::new(false);
    let e = s
        .cudarc("never")
        .reads(&a)
        .writes(&b)
        .run(|_| {
            called.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("never")),
        "{e}"
    );
    assert!(!called.load(Ordering::SeqCst));
    s.synchronize().unwrap();
    assert!(
        dev.stop_trace().unwrap().ops.is_empty(),
        "nothing enqueued (ER3)"
    );
    assert!(matches!(s.as_cudarc(), Err(Error::Unsupported(_))));
    assert!(matches!(dev.cudarc_context(), Err(Error::Unsupported(_))));
    // Memory cueflow allocated has no cudarc slice to give back; the buffer comes back.
    let refused = b.into_cudarc().unwrap_err();
    assert!(matches!(
        *refused.error,
        Error::NotPermitted { rule: "MM2", .. }
    ));
    assert_eq!(refused.buffer.len(), 64);
}

#[test]
fn one_primary_context_for_both() {
    let Some((own_ctx, own)) = cuda() else { return };
    let ctx = CudaContext::new(0).unwrap(); // a cudarc program's
    let dev = Device::from_cudarc(&ctx).unwrap();
    assert_eq!(dev.raw_cuda_context(), Some(ctx.cu_ctx() as *mut _));
    assert_eq!(
        own_ctx.cu_ctx(),
        ctx.cu_ctx(),
        "the primary context, whoever asks"
    );
    // One device per context: its memory serves the other handle's streams (memory of
    // another device would be refused).
    let again = Device::from_cudarc(&ctx).unwrap();
    let probe = DeviceBuffer::from_slice(&dev, &[1.0f32; 4]).unwrap();
    kernels::scale(&Stream::new(&again).unwrap(), &probe, 1.0).unwrap();
    assert_eq!(dev.cudarc_context().unwrap().cu_ctx(), ctx.cu_ctx());
    // Neither releases the context under the other: each side works after the other is gone.
    let cs = ctx.new_stream().unwrap();
    drop((dev, again, probe, own, own_ctx));
    let v = cs
        .clone_dtoh(&cs.clone_htod(&[1.0f32, 2.0]).unwrap())
        .unwrap();
    assert_eq!(v, [1.0, 2.0]);
    let dev = Device::cuda(0).unwrap(); // keeps no cudarc object: only its own reference
    drop((cs, ctx));
    let x = DeviceBuffer::from_slice(&dev, &[3.0f32; 16]).unwrap();
    kernels::scale(&Stream::new(&dev).unwrap(), &x, 2.0).unwrap();
    dev.synchronize().unwrap();
    assert_eq!(x.to_vec().unwrap(), [6.0; 16]);
    // A context that is not the primary one is refused, and so are its objects.
    let other = CudaContext::new_non_primary(0, 0).unwrap();
    assert!(matches!(
        Device::from_cudarc(&other),
        Err(Error::Unsupported(_))
    ));
    let e = Stream::from_cudarc(&dev, other.new_stream().unwrap()).unwrap_err();
    assert!(matches!(e, Error::InvalidHandle(_)), "{e}");
}

#[test]
fn streams_go_both_ways_and_outlive_each_other() {
    let Some((ctx, dev)) = cuda() else { return };
    // cudarc's stream in cueflow: the same raw stream, kept alive, never destroyed.
    let cs = ctx.new_stream().unwrap();
    let s = Stream::from_cudarc(&dev, cs.clone()).unwrap();
    assert_eq!(s.raw_cuda_stream(), Some(cs.cu_stream() as *mut _));
    assert!(
        Arc::ptr_eq(&s.as_cudarc().unwrap(), &cs),
        "cudarc's own handle back"
    );
    assert_eq!(Stream::from_cudarc(&dev, cs.clone()).unwrap().id(), s.id());
    let x = DeviceBuffer::from_slice(&dev, &[1.0f32; 1024]).unwrap();
    kernels::scale(&s, &x, 3.0).unwrap();
    drop(s);
    cs.synchronize().unwrap(); // still alive: cueflow did not destroy it
    assert_eq!(x.to_vec().unwrap(), [3.0; 1024]);
    // A cueflow stream in cudarc: one shared handle, the stream again when it comes back.
    let s = Stream::new(&dev).unwrap();
    let lent = s.as_cudarc().unwrap();
    assert!(Arc::ptr_eq(&lent, &s.as_cudarc().unwrap()));
    assert_eq!(lent.cu_stream() as *mut _, s.raw_cuda_stream().unwrap());
    assert_eq!(
        Stream::from_cudarc(&dev, lent.clone()).unwrap().id(),
        s.id()
    );
    assert_eq!(
        Stream::from_cudarc(&dev, ctx.default_stream())
            .unwrap()
            .id(),
        Stream::legacy(&dev).id()
    );
    // The lent handle outlives the cueflow stream: the raw stream lingers until it goes.
    drop(s);
    kernels::scale(&Stream::new(&dev).unwrap(), &x, 1.0).unwrap(); // a driver-facing call
    let back = lent
        .clone_dtoh(&lent.clone_htod(&[5.0f32; 8]).unwrap())
        .unwrap();
    assert_eq!(back, [5.0; 8]);
    drop(lent);
    dev.synchronize().unwrap();
}

#[test]
fn slices_go_in_and_out_without_copying() {
    let Some((ctx, dev)) = cuda() else { return };
    let cs = ctx.new_stream().unwrap();
    let data: Vec<f32> = (0..4096).map(|i| i as f32).collect();
    let slice = cs.clone_htod(&data).unwrap();
    let buf = DeviceBuffer::from_cudarc(&dev, slice).unwrap();
    let addr = buf.device_addr();
    let s = Stream::new(&dev).unwrap();
    let gate = Arc::new(Barrier::new(2));
    let g = gate.clone();
    s.host_fn(move || {
        g.wait();
    })
    .unwrap();
    kernels::scale(&s, &buf, 2.0).unwrap(); // pending behind the gate
                                            // Refused while an operation holds the memory, or for a part, or while another handle
                                            // exists; the buffer comes back each time.
    let refused = buf.into_cudarc().unwrap_err();
    assert!(
        refused.to_string().contains("not yet seen complete"),
        "{refused}"
    );
    let buf = refused.buffer;
    gate.wait();
    s.synchronize().unwrap();
    let refused = buf.slice(1..).unwrap().into_cudarc().unwrap_err();
    assert!(refused.to_string().contains("part"), "{refused}");
    drop(refused); // The refusal hands the view back: it holds the memory until dropped.
    let refused = buf.clone().into_cudarc().unwrap_err();
    drop(refused);
    let slice = buf.into_cudarc().unwrap();
    let doubled: Vec<f32> = data.iter().map(|x| 2.0 * x).collect();
    assert_eq!(cs.clone_dtoh(&slice).unwrap(), doubled);
    // The same memory went in and came out.
    let (back, _sync) = cueflow::cudarc::driver::DevicePtr::device_ptr(&slice, &cs);
    assert_eq!(back, addr);
    drop(_sync);
    // In a stream's order, without a host wait: the adoption is a write on `s`, which another
    // stream must follow (the sanitizer checks it).
    dev.set_sanitize(SanitizeMode::Error);
    let buf = DeviceBuffer::from_cudarc_on(&s, slice).unwrap();
    let other = Stream::new(&dev).unwrap();
    let e = kernels::scale(&other, &buf, 0.5).unwrap_err();
    assert!(
        matches!(&e, Error::Race(r) if r.to_string().contains("from_cudarc_on")),
        "{e}"
    );
    other.wait_event(&s.record().unwrap()).unwrap();
    kernels::scale(&other, &buf, 0.5).unwrap();
    other.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap(), data);
}

#[test]
fn a_cudarc_kernel_racing_a_cueflow_copy_is_reported() {
    let Some((ctx, dev)) = cuda() else { return };
    dev.set_sanitize(SanitizeMode::Error);
    let (fill, _) = functions(&ctx);
    let (a, b) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    let (x, y) = (
        DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap(),
        DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap(),
    );
    cudarc_fill(&a, &fill, &x, 7.0).unwrap();
    // The copy on another stream reads what the cudarc kernel writes, with nothing between.
    let e = b.copy_d2d(&y, &x).unwrap_err();
    let Error::Race(report) = &e else {
        panic!("expected a race, got {e}")
    };
    assert!(report.to_string().contains("cudarc fill"), "{report}");
    // And the other way: a cudarc kernel writing what a cueflow copy still reads.
    a.synchronize().unwrap();
    b.copy_d2d(&y, &x).unwrap();
    let e = cudarc_fill(&a, &fill, &x, 1.0).unwrap_err();
    assert!(matches!(e, Error::Race(_)), "{e}");
    // Fixed with an event each way: silent, and the data is the kernel's.
    dev.take_sanitizer_reports();
    a.wait_event(&b.record().unwrap()).unwrap();
    cudarc_fill(&a, &fill, &x, 9.0).unwrap();
    b.wait_event(&a.record().unwrap()).unwrap();
    b.copy_d2d(&y, &x).unwrap();
    b.synchronize().unwrap();
    assert!(dev.take_sanitizer_reports().is_empty());
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 9.0));
}

#[test]
fn views_are_cudarc_arguments_and_stay_on_their_stream() {
    let Some((ctx, dev)) = cuda() else { return };
    let (_, add) = functions(&ctx);
    let s = Stream::new(&dev).unwrap();
    let (x, y) = (
        DeviceBuffer::from_slice(&dev, &[2.0f32; 1000]).unwrap(),
        DeviceBuffer::from_slice(&dev, &[1.0f32; 1000]).unwrap(),
    );
    dev.start_trace().unwrap();
    s.cudarc("add")
        .reads(&x)
        .writes(&y)
        .run(|call| {
            let (x, mut y) = call.views();
            assert_eq!((x.len(), y.len()), (1000, 1000));
            let n = x.len() as u32;
            let mut launch = call.stream().launch_builder(&add);
            launch.arg(&x).arg(&mut y).arg(&n);
            // SAFETY: `add(const float*, float*, unsigned)` over two views of `n` floats.
            unsafe { launch.launch(cueflow::cudarc::driver::LaunchConfig::for_num_elems(n)) }?;
            Ok(())
        })
        .unwrap();
    s.synchronize().unwrap();
    let t = dev.stop_trace().unwrap();
    assert!(t.ops.iter().any(|o| o.name == "add" && o.stream == s.id()));
    assert_eq!(y.to_vec().unwrap(), [3.0; 1000]);
    // cudarc work through a view on another stream is reported: cueflow cannot order it.
    let elsewhere = ctx.new_stream().unwrap();
    let e = s
        .cudarc("zero elsewhere")
        .writes(&y)
        .run(|call| {
            let (mut y,) = call.views();
            elsewhere.memset_zeros(&mut y)?;
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { why, .. } if why.contains("another stream")),
        "{e}"
    );
    elsewhere.synchronize().unwrap();
    // cudarc's errors come back as cueflow's.
    let e = s
        .cudarc("fails")
        .run(|_| Err(Error::NotReady("inner").into()))
        .unwrap_err();
    assert_eq!(e, Error::NotReady("inner"));
    // A capture cannot record cudarc work: refused, nothing recorded.
    s.begin_capture(CaptureMode::Global).unwrap();
    let e = s.cudarc("captured").writes(&y).run(|_| Ok(())).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    s.end_capture().unwrap();
}

#[test]
fn an_owner_dropped_inside_a_host_function_frees_outside_it() {
    let Some((ctx, dev)) = cuda() else { return };
    let cs = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::from_cudarc(&dev, cs.alloc_zeros::<f32>(1 << 16).unwrap()).unwrap();
    let s = Stream::new(&dev).unwrap();
    // The last handle goes inside a host function, where no driver call may be made: cudarc's
    // free must wait until the callback returned.
    s.host_fn_once(move || drop(buf)).unwrap();
    s.synchronize().unwrap();
    kernels::scale(&s, &DeviceBuffer::<f32>::new(&dev, 4).unwrap(), 1.0).unwrap();
    s.synchronize().unwrap();
    ctx.check_err()
        .expect("cudarc's drop made no driver call inside the callback");
}

#[test]
fn the_bound_context_survives_cudarc_on_another_device() {
    let Some((_, dev)) = cuda() else { return };
    let Ok(other) = CudaContext::new(1) else {
        eprintln!("SKIP cuda: a second GPU is needed to change the current context");
        return;
    };
    let s = Stream::new(&dev).unwrap();
    let x = DeviceBuffer::from_slice(&dev, &[1.0f32; 256]).unwrap();
    kernels::scale(&s, &x, 2.0).unwrap(); // cueflow binds device 0 on this thread
    let _ = other.new_stream().unwrap(); // cudarc binds device 1 on this thread
    let y = DeviceBuffer::<f32>::new(&dev, 256).unwrap(); // allocated on device 0 again
    s.copy_d2d(&y, &x).unwrap();
    s.synchronize().unwrap();
    assert_eq!(y.to_vec().unwrap(), [2.0; 256]);
}

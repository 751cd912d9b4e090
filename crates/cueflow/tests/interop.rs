//! Interop: external operations (work of another library on a cueflow stream, declared memory),
//! raw handles, and memory created elsewhere. Host backend here, CUDA too when a GPU is present
//! (`external_cuda_side_runs_on_the_raw_stream`, SKIP otherwise).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cueflow::trace::{Engine, OpKind};
use cueflow::{kernels, CaptureMode, Device, DeviceBuffer, Error, SanitizeMode, Stream};

fn double(s: &Stream, x: &DeviceBuffer<f32>, y: &DeviceBuffer<f32>) -> cueflow::Result<()> {
    s.external("double")
        .reads(x)
        .writes(y)
        .host(|io| {
            let (ins, mut outs) = io.buffers::<f32>();
            for (o, i) in outs[0].iter_mut().zip(ins[0]) {
                *o = 2.0 * i;
            }
        })
        .enqueue()
}

fn download(s: &Stream, b: &DeviceBuffer<f32>) -> Vec<f32> {
    let mut v = vec![0.0; b.len()];
    s.read_pageable(&mut v, b).unwrap();
    v
}

#[test]
fn an_external_operation_runs_in_stream_order_and_is_traced() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let (x, y) = (
        DeviceBuffer::<f32>::new(&dev, 4096).unwrap(),
        DeviceBuffer::<f32>::new(&dev, 4096).unwrap(),
    );
    dev.start_trace().unwrap();
    kernels::fill(&s, &x, 3.0).unwrap(); // before: the external op sees 3
    double(&s, &x, &y).unwrap();
    kernels::scale(&s, &y, 10.0).unwrap(); // after: sees 6
    s.synchronize().unwrap();
    let t = dev.stop_trace().unwrap();
    assert!(download(&s, &y).iter().all(|&v| v == 60.0));
    let ext: Vec<_> = t
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::External)
        .collect();
    assert_eq!(ext.len(), 1);
    assert_eq!(
        (ext[0].name.as_str(), ext[0].engine),
        ("double", Engine::Compute)
    );
    assert_eq!(ext[0].stream, s.id());
    assert!(ext[0].end_ns >= ext[0].start_ns && ext[0].start_ns > 0);
}

#[test]
fn declared_memory_is_tracked_like_a_kernels() {
    let dev = Device::host().unwrap();
    dev.set_sanitize(SanitizeMode::Error);
    let (a, b) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    let (x, y) = (
        DeviceBuffer::<f32>::new(&dev, 256).unwrap(),
        DeviceBuffer::<f32>::new(&dev, 256).unwrap(),
    );
    double(&a, &x, &y).unwrap();
    // Another stream reading what the external op writes, unordered: a race (AC3, AC4).
    let e = kernels::scale(&b, &y, 2.0).unwrap_err();
    assert!(
        matches!(&e, Error::Race(r) if r.to_string().contains("double")),
        "{e}"
    );
    b.wait_event(&a.record().unwrap()).unwrap();
    kernels::scale(&b, &y, 2.0).unwrap();
    b.synchronize().unwrap();
}

#[test]
fn the_operation_keeps_its_memory_alive() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let gate = Arc::new(std::sync::Barrier::new(2));
    let g = gate.clone();
    s.host_fn(move || {
        g.wait();
    })
    .unwrap();
    let y = DeviceBuffer::<f32>::new(&dev, 1024).unwrap();
    {
        let x = DeviceBuffer::<f32>::new(&dev, 1024).unwrap();
        double(&s, &x, &y).unwrap();
    } // x dropped while the op waits behind the gate (MM2)
    gate.wait();
    s.synchronize().unwrap();
    assert!(download(&s, &y).iter().all(|&v| v == 0.0));
}

#[test]
fn misuse_is_refused_with_nothing_enqueued() {
    let dev = Device::host().unwrap();
    let other = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let x = DeviceBuffer::<f32>::new(&dev, 64).unwrap();
    let foreign = DeviceBuffer::<f32>::new(&other, 64).unwrap();
    let host_side = |_io: cueflow::ExternalIo<'_>| {};
    let cases: Vec<(&str, Error)> = vec![
        (
            "foreign memory",
            s.external("f")
                .reads(&foreign)
                .host(host_side)
                .enqueue()
                .unwrap_err(),
        ),
        (
            "written range overlapping another",
            s.external("f")
                .reads(&x)
                .writes(&x.slice(10..20).unwrap())
                .host(host_side)
                .enqueue()
                .unwrap_err(),
        ),
        (
            "no host side on the host backend",
            s.external("f")
                .writes(&x)
                .cuda(|_| Ok(()))
                .enqueue()
                .unwrap_err(),
        ),
    ];
    assert!(
        matches!(cases[0].1, Error::InvalidHandle(_)),
        "{:?}",
        cases[0]
    );
    assert!(
        matches!(cases[1].1, Error::InvalidArgument { .. }),
        "{:?}",
        cases[1]
    );
    assert!(
        matches!(cases[2].1, Error::Unsupported(_)),
        "{:?}",
        cases[2]
    );
    let cap = Stream::new(&dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    let e = cap
        .external("f")
        .writes(&x)
        .host(host_side)
        .enqueue()
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    drop(cap.end_capture());
    assert!(s.query().unwrap());
    // Raw handles: none on the host backend.
    assert!(s.raw_cuda_stream().is_none() && dev.raw_cuda_context().is_none());
    // SAFETY: never reached with a real handle: the host backend refuses before using it.
    let e = unsafe { Stream::from_raw_cuda(&dev, std::ptr::null_mut()) }.unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)));
}

#[test]
fn memory_from_elsewhere_is_used_without_copying_and_its_owner_dropped_last() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    struct Tracked(#[allow(dead_code)] Vec<f32>, Arc<AtomicUsize>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut v = vec![1.5f32; 1000];
    let addr = v.as_mut_ptr() as u64;
    let owner = Tracked(v, dropped.clone());
    // SAFETY: on the host backend device memory is host memory; the vector's buffer stays put
    // (it moves into `owner`, its heap allocation does not) until `owner` is dropped, and
    // nothing else touches it meanwhile.
    let buf = unsafe { DeviceBuffer::<f32>::from_raw_parts(&dev, addr, 1000, owner) }.unwrap();
    kernels::scale(&s, &buf, 2.0).unwrap();
    assert!(download(&s, &buf).iter().all(|&x| x == 3.0));
    let view = buf.slice(10..20).unwrap();
    drop(buf);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        0,
        "a view still holds the memory"
    );
    drop(view);
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    // SAFETY: refused before use (null address).
    let e = unsafe { DeviceBuffer::<f32>::from_raw_parts(&dev, 0, 4, ()) }.unwrap_err();
    assert!(matches!(e, Error::InvalidHandle(_)));
}

#[test]
fn external_cuda_side_runs_on_the_raw_stream() {
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("CUEFLOW_REQUIRE_CUDA=1 but the CUDA backend is unavailable: {e}");
            }
            eprintln!("SKIP cuda: {e}");
            return;
        }
    };
    let s = Stream::new(&dev).unwrap();
    let x = DeviceBuffer::<u32>::new(&dev, 1 << 20).unwrap();
    let (addr, n) = (x.device_addr(), x.len());
    assert!(s.raw_cuda_stream().is_some() && dev.raw_cuda_context().is_some());
    dev.start_trace().unwrap();
    s.external("cuMemsetD32Async")
        .writes(&x)
        .cuda(move |raw| {
            // SAFETY: `addr..addr + 4n` is the declared buffer, kept alive by the operation;
            // `raw.stream` is the live stream, its context current.
            let r =
                unsafe { cudarc::driver::sys::cuMemsetD32Async(addr, 0x2a, n, raw.stream as _) };
            match r {
                cudarc::driver::sys::CUresult::CUDA_SUCCESS => Ok(()),
                e => Err(Error::Unsupported(format!("cuMemsetD32Async: {e:?}"))),
            }
        })
        .enqueue()
        .unwrap();
    s.synchronize().unwrap();
    let t = dev.stop_trace().unwrap();
    let mut out = vec![0u32; n];
    s.read_pageable(&mut out, &x).unwrap();
    assert!(out.iter().all(|&v| v == 0x2a));
    assert!(t
        .ops
        .iter()
        .any(|o| o.kind == OpKind::External && o.stream == s.id()));
    // A stream made elsewhere, adopted: ordered like any cueflow stream, never destroyed by it.
    let mut raw: cudarc::driver::sys::CUstream = std::ptr::null_mut();
    // SAFETY: the device's context is current on this thread (cueflow bound it above).
    unsafe {
        cudarc::driver::sys::cuCtxSetCurrent(dev.raw_cuda_context().unwrap() as _);
        assert_eq!(
            cudarc::driver::sys::cuStreamCreate(&mut raw, 1),
            cudarc::driver::sys::CUresult::CUDA_SUCCESS
        );
    }
    {
        // SAFETY: `raw` is a live stream of the device's primary context, destroyed below
        // after this Stream and its work are gone.
        let adopted = unsafe { Stream::from_raw_cuda(&dev, raw as _) }.unwrap();
        kernels::scale(&adopted, &DeviceBuffer::<f32>::new(&dev, 64).unwrap(), 2.0).unwrap();
        adopted.synchronize().unwrap();
    }
    // SAFETY: the adopted stream is gone; cueflow did not destroy the handle.
    unsafe {
        cudarc::driver::sys::cuCtxSetCurrent(dev.raw_cuda_context().unwrap() as _);
        assert_eq!(
            cudarc::driver::sys::cuStreamDestroy_v2(raw),
            cudarc::driver::sys::CUresult::CUDA_SUCCESS
        );
    }
}

//! Devices, compilation and host functions (issue 18: DV2, KC1, KC4, HF3)

use super::*;

#[test]
fn device_flags_after_first_work() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    match dev.set_sync_mode(cueflow::SyncMode::BlockingSync) {
        Err(Error::NotPermitted { rule: "DV2", .. }) => {}
        other => panic!("expected a DV2 refusal, got {other:?}"),
    }
    assert!(s.query().unwrap());
}

#[test]
fn bad_compile_options() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 0.0);
    for opts in [
        cueflow::CompileOptions::new().define("A B", "1"),
        cueflow::CompileOptions::new().define("A", "1\n#define B"),
        cueflow::CompileOptions::new().std("gnu++17"),
        cueflow::CompileOptions::new().max_registers(256),
        cueflow::CompileOptions::new().include_dir("/no/such/dir/for/cueflow"),
        cueflow::CompileOptions::new().option("O3"),
        cueflow::CompileOptions::new().header("", "x"),
    ] {
        let k = Kernel::new("cft_options")
            .host(|_, _| {})
            .cuda_source("extern \"C\" __global__ void k(float*) {}", "k")
            .cuda_options(opts.clone())
            .build();
        let e = refused(&dev, &s, || {
            s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new().write(&d))
        });
        assert!(
            matches!(&e, Error::InvalidOptions { kernel, .. } if kernel == "cft_options"),
            "{opts:?}: {e:?}"
        );
        assert!(matches!(k.prepare(&dev), Err(Error::InvalidOptions { .. })));
    }
}

/// A missing header is a compile error that names it and where headers were looked for; the
/// host backend compiles no CUDA C, so this runs on a GPU only (`SKIP cuda:` otherwise).
#[test]
fn missing_header() {
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP cuda: missing_header needs a GPU: {e}");
            return;
        }
    };
    let s = Stream::new(&dev).unwrap();
    let k = Kernel::new("cft_missing_header")
        .cuda_source(
            "#include <cueflow_no_such_header.h>\nextern \"C\" __global__ void k() {}",
            "k",
        )
        .build();
    let e = refused(&dev, &s, || {
        s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new())
    });
    match e {
        Error::Compile { kernel, log } => {
            assert_eq!(kernel, "cft_missing_header");
            assert!(log.contains("cueflow_no_such_header.h"), "{log}");
            assert!(log.contains("looked in"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn host_kernel_reads_an_aliased_argument_whole() {
    // Read and written through two names is allowed (KC4), but a host kernel that reads the
    // written buffer whole (`input`) would alias other blocks' writes: a fault naming it.
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    let k = Kernel::new("cft_reads_alias_whole")
        .host(|_, a| {
            let _ = a.input::<f32>(0);
        })
        .build();
    s.launch(
        &k,
        LaunchConfig::new(1, 32),
        KernelArgs::new().read(&d).write(&d),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "cft_reads_alias_whole");
            assert!(detail.contains("in_place"), "{detail}");
        }
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn host_task_over_device_memory_or_overlapping_writes() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let p = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let e = refused(&dev, &s, || {
        s.host_task("overlap")
            .writes(&p)
            .reads(p.range(1..4).unwrap())
            .run(|_| {})
    });
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let e = refused(&dev, &s, || {
        s.host_task("twice").writes(&p).writes(&p).run(|_| {})
    });
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // (Another device's pinned memory is no misuse: portable with unified addressing, HM2.)
}

#[test]
fn host_function_touching_an_undeclared_buffer() {
    // A host task touches what it declared only: a safe host view of any pinned buffer inside
    // it is refused (HF2) — the task gets its views through `HostIo` — and a view it did not
    // declare (an index past its declarations, or read/write swapped) faults it with its name.
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let declared = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let undeclared = Arc::new(PinnedBuffer::<f32>::new(&dev, N).unwrap());
    let seen = Arc::new(Mutex::new(None));
    {
        let (u, seen) = (undeclared.clone(), seen.clone());
        s.host_task("peeks")
            .reads(&declared)
            .run(move |_io| *seen.lock().unwrap() = Some(u.read().map(|_| ())))
            .unwrap();
    }
    s.synchronize().unwrap();
    assert!(matches!(
        seen.lock().unwrap().take(),
        Some(Err(Error::NotPermitted { rule: "HF2", .. }))
    ));
    s.host_task("out_of_range")
        .reads(&declared)
        .run(|io| {
            let _ = io.read::<f32>(1);
        })
        .unwrap();
    match s.synchronize().unwrap_err() {
        Error::HostFnFault { name, detail, .. } => {
            assert_eq!(name, "out_of_range");
            assert!(detail.contains("declared 1"), "{detail}");
        }
        other => panic!("expected a host-function fault, got {other:?}"),
    }
}

#[test]
fn host_fn_once_during_capture() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(s.host_fn_once(|| {}), Err(Error::Capture(_))));
    assert!(matches!(
        s.add_callback(|_| panic!("never called")),
        Err(Error::Capture(_))
    ));
    assert!(matches!(
        s.host_task("captured").run(|_| {}),
        Err(Error::Capture(_))
    ));
    assert_eq!(s.end_capture().unwrap().node_count(), 0);
}

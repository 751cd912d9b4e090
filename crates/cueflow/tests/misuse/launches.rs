//! Launches (KN1, ER3)

use super::*;

#[test]
fn zero_grid_dimension() {
    assert_launch_refused(LaunchConfig::new(0, 32));
    assert_launch_refused(LaunchConfig::new((4, 0), 32));
    assert_launch_refused(LaunchConfig::new((4, 1, 0), 32));
}

#[test]
fn zero_block_dimension() {
    assert_launch_refused(LaunchConfig::new(1, 0));
    assert_launch_refused(LaunchConfig::new(1, (32, 0)));
    assert_launch_refused(LaunchConfig::new(1, (32, 1, 0)));
}

#[test]
fn too_many_threads_per_block() {
    assert_launch_refused(LaunchConfig::new(1, 1025));
    assert_launch_refused(LaunchConfig::new(1, (32, 33)));
    assert_launch_refused(LaunchConfig::new(1, (16, 16, 8)));
}

#[test]
fn block_dimension_over_limit() {
    assert_launch_refused(LaunchConfig::new(1, (1, 1, 65)));
}

#[test]
fn grid_dimension_over_limit() {
    let max = dev().properties().max_grid;
    assert_launch_refused(LaunchConfig::new((1, max[1] + 1), 32));
    assert_launch_refused(LaunchConfig::new((1, 1, max[2] + 1), 32));
}

#[test]
fn shared_memory_too_large() {
    let max = dev().properties().max_shared_per_block;
    assert_launch_refused(LaunchConfig::new(1, 32).shared(max + 1));
}

#[test]
fn kernel_without_implementation_for_backend() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    // PTX has no meaning on the host backend (CUDA C does: HK1).
    let cuda_only = Kernel::new("cft_cuda_only")
        .cuda(cueflow::CudaCode::Ptx {
            code: ".version 7.0\n.target sm_70\n.address_size 64\n".into(),
            entry: "cft_cuda_only".into(),
        })
        .build();
    let none = Kernel::new("cft_nothing").build();
    for k in [&cuda_only, &none] {
        match refused(&dev, &s, || {
            s.launch(k, LaunchConfig::new(1, 1), KernelArgs::new())
        }) {
            Error::Unsupported(m) => assert!(m.contains(k.name()), "{m}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}

#[test]
fn written_buffer_overlaps_another_argument() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    // Two names writing the same bytes (KC4).
    let e = refused(&dev, &s, || {
        s.launch(
            &kernels::SAXPY_F32,
            LaunchConfig::for_elements(N, 256),
            KernelArgs::new()
                .write(&d)
                .write(&d)
                .scalar(2.0f32)
                .scalar(N as u64),
        )
    });
    assert!(
        matches!(&e, Error::InvalidArgument { kernel, .. } if kernel == "cf_saxpy_f32"),
        "{e:?}"
    );
    // Read and written through two names of the same bytes is what CUDA allows (KC4): y = 2y + y.
    kernels::saxpy(&s, 2.0, &d, &d).unwrap();
    s.synchronize().unwrap();
    assert!(read(&d).iter().all(|&x| x == 3.0));
    s.memset(&d, 0).unwrap();
    kernels::fill(&s, &d, 1.0).unwrap();
    // Partly overlapping x and y: the built-in refuses (threads would read what others write).
    let e = refused(&dev, &s, || {
        kernels::saxpy(
            &s,
            2.0,
            &d.slice(0..N / 2).unwrap(),
            &d.slice(N / 4..3 * N / 4).unwrap(),
        )
    });
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // Disjoint views of one buffer are fine.
    kernels::saxpy(
        &s,
        2.0,
        &d.slice(0..N / 2).unwrap(),
        &d.slice(N / 2..).unwrap(),
    )
    .unwrap();
    s.synchronize().unwrap();
    let v = read(&d);
    assert!(v[..N / 2].iter().all(|&x| x == 1.0) && v[N / 2..].iter().all(|&x| x == 3.0));
}

#[test]
fn scalar_argument_too_large() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let e = refused(&dev, &s, || {
        s.launch(
            &kernels::EMPTY,
            LaunchConfig::new(1, 1),
            KernelArgs::new().scalar([[0u8; 4096]; 10]),
        )
    });
    assert!(
        matches!(&e, Error::InvalidArgument { kernel, .. } if kernel == "cf_empty"),
        "{e:?}"
    );
}

#[test]
fn saxpy_length_mismatch() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let (x, y) = (filled(&dev, N, 1.0), filled(&dev, N - 1, 1.0));
    let e = refused(&dev, &s, || kernels::saxpy(&s, 1.0, &x, &y));
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
}

/// Not refused at the call (the host kernel's reads are not declared), but it cannot go
/// unnoticed either: the wrong read panics in the kernel, which becomes a sticky kernel fault
/// naming the kernel (KN2).
#[test]
fn wrong_argument_type_read_by_host_kernel() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    let k = Kernel::new("cft_wrong_type")
        .host(|_, a| {
            let _: f64 = a.scalar(1);
            let _ = a.input::<f32>(0);
        })
        .build();
    s.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().read(&d).scalar(2.0f32),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "cft_wrong_type");
            assert!(detail.contains("f32") && detail.contains("f64"), "{detail}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    // The buffer type too.
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    let k = Kernel::new("cft_wrong_buffer_type")
        .host(|_, a| {
            let _ = a.input::<u32>(0);
        })
        .build();
    s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new().read(&d))
        .unwrap();
    assert!(matches!(
        s.synchronize().unwrap_err(),
        Error::KernelFault { kernel, .. } if kernel == "cft_wrong_buffer_type"
    ));
}

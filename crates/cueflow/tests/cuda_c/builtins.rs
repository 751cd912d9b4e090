//! HK1–HK3: the built-in kernels from their CUDA C alone, and a wild access from CUDA C.

use super::*;

/// HK1/HK2: every built-in kernel runs from `builtins.cu` alone (no closure) on the host
/// backend, bit-identical to its Rust closure.
#[test]
fn hk2_builtins_from_cuda_c_match_their_closures_bit_for_bit() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let n = 1000; // not a multiple of the block: the tail block checks `i >= n`
    let x0 = inputs(n);
    let y0: Vec<f32> = inputs(n).iter().map(|v| v * 3.0 + 0.5).collect();
    let cfg = LaunchConfig::for_elements(n, kernels::BLOCK);
    let run = |closure: bool, which: &str| -> Vec<f32> {
        let y = upload(&s, &y0);
        let x = upload(&s, &x0);
        let k = |name: &str| c_kernel(name, BUILTINS_CU);
        match (which, closure) {
            ("fill", true) => kernels::fill(&s, &y, 1.25).unwrap(),
            ("fill", false) => s
                .launch(
                    &k("cf_fill_f32"),
                    cfg,
                    KernelArgs::new().write(&y).scalar(1.25f32).scalar(n as u64),
                )
                .unwrap(),
            ("scale", true) => kernels::scale(&s, &y, 1.7).unwrap(),
            ("scale", false) => s
                .launch(
                    &k("cf_scale_f32"),
                    cfg,
                    KernelArgs::new().write(&y).scalar(1.7f32).scalar(n as u64),
                )
                .unwrap(),
            ("saxpy", true) => kernels::saxpy(&s, 0.3, &x, &y).unwrap(),
            ("saxpy", false) => s
                .launch(
                    &k("cf_saxpy_f32"),
                    cfg,
                    KernelArgs::new()
                        .write(&y)
                        .read(&x)
                        .scalar(0.3f32)
                        .scalar(n as u64),
                )
                .unwrap(),
            ("compute", true) => kernels::compute(&s, &y, 37).unwrap(),
            ("compute", false) => s
                .launch(
                    &k("cf_compute_f32"),
                    cfg,
                    KernelArgs::new().write(&y).scalar(37u32).scalar(n as u64),
                )
                .unwrap(),
            _ => unreachable!(),
        }
        download(&s, &y)
    };
    // The GPU, when present, computes the same bits (HK2).
    let gpu = cuda().map(|d| {
        let g = Stream::new(&d).unwrap();
        let mut out = Vec::new();
        for which in ["fill", "scale", "saxpy", "compute"] {
            let y = upload(&g, &y0);
            let x = upload(&g, &x0);
            match which {
                "fill" => kernels::fill(&g, &y, 1.25).unwrap(),
                "scale" => kernels::scale(&g, &y, 1.7).unwrap(),
                "saxpy" => kernels::saxpy(&g, 0.3, &x, &y).unwrap(),
                _ => kernels::compute(&g, &y, 37).unwrap(),
            }
            out.push(download(&g, &y));
        }
        out
    });
    for (w, which) in ["fill", "scale", "saxpy", "compute"]
        .into_iter()
        .enumerate()
    {
        let a = run(true, which);
        let b = run(false, which);
        if let Some(g) = &gpu {
            for i in 0..n {
                assert_eq!(
                    a[i].to_bits(),
                    g[w][i].to_bits(),
                    "{which} on the GPU: element {i}"
                );
            }
        }
        for i in 0..n {
            assert_eq!(
                a[i].to_bits(),
                b[i].to_bits(),
                "{which}: element {i}: {} vs {}",
                a[i],
                b[i]
            );
        }
    }
    // The tools: empty, spin, flags.
    s.launch(
        &c_kernel("cf_empty", BUILTINS_CU),
        LaunchConfig::new(3, 64),
        KernelArgs::new(),
    )
    .unwrap();
    s.launch(
        &c_kernel("cf_spin_ns", BUILTINS_CU),
        LaunchConfig::new(2, 1),
        KernelArgs::new().scalar(1000u64),
    )
    .unwrap();
    let flag = upload(&s, &[0u32]);
    s.launch(
        &c_kernel("cf_set_flag", BUILTINS_CU),
        LaunchConfig::new(1, 32),
        KernelArgs::new().atomic(&flag).scalar(7u32),
    )
    .unwrap();
    s.launch(
        &c_kernel("cf_wait_flag", BUILTINS_CU),
        LaunchConfig::new(1, 32),
        KernelArgs::new()
            .atomic(&flag)
            .scalar(7u32)
            .scalar(1_000_000_000u64),
    )
    .unwrap();
    s.synchronize().unwrap();
    assert_eq!(download(&s, &flag), vec![7]);
}

/// HK3/KN2: the built-in fault kernel from CUDA C (a write to address 0x10) is a sticky kernel
/// fault naming the kernel; the process goes on.
#[test]
fn hk3_wild_access_to_unmapped_memory_is_a_sticky_fault() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let k = c_kernel("cf_fault", BUILTINS_CU);
    s.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().scalar(0x10u64),
    )
    .unwrap();
    let e = s.synchronize().unwrap_err();
    match &e {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "cf_fault");
            assert!(detail.contains("illegal address"), "{detail}");
        }
        other => panic!("expected a kernel fault, got {other}"),
    }
    // Sticky (ER2).
    assert!(matches!(s.synchronize(), Err(Error::KernelFault { .. })));
    // Another device works.
    let d2 = Device::host().unwrap();
    let s2 = Stream::new(&d2).unwrap();
    let b = upload(&s2, &[1.0f32; 4]);
    kernels::scale(&s2, &b, 2.0).unwrap();
    assert_eq!(download(&s2, &b), vec![2.0; 4]);
}

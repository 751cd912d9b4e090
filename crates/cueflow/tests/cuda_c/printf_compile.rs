//! HK1, HK3, KC1: printf and assert, compile options, templates.

use super::*;

/// HK1: `printf` formats and writes (its return value is the formatted length); HK3/KN2: a
/// failed `assert` is a sticky fault naming the kernel.
#[test]
fn hk1_printf_and_hk3_assert_faults() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let k = c_kernel("checked", MISC);
    let input = upload(&s, &[1i32, 22, 333]);
    let out = upload(&s, &[0i32; 3]);
    s.launch(
        &k,
        LaunchConfig::new(1, 3),
        KernelArgs::new().read(&input).write(&out),
    )
    .unwrap();
    let want: Vec<i32> = [1, 22, 333]
        .iter()
        .enumerate()
        .map(|(t, v)| format!("thread {t} has {v}\n").len() as i32)
        .collect();
    assert_eq!(download(&s, &out), want);

    let bad = upload(&s, &[1i32, 13, 2]);
    s.launch(
        &k,
        LaunchConfig::new(1, 3),
        KernelArgs::new().read(&bad).write(&out),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "checked");
            assert!(detail.contains("v != 13"), "{detail}");
        }
        e => panic!("expected a kernel fault, got {e}"),
    }
    assert!(matches!(s.synchronize(), Err(Error::KernelFault { .. })));

    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    s.launch(
        &c_kernel("trapper", MISC),
        LaunchConfig::new(2, 8),
        KernelArgs::new(),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "trapper");
            assert!(detail.contains("__trap"), "{detail}");
        }
        e => panic!("expected a kernel fault, got {e}"),
    }
}

/// KC1: options reach the compiler (a define, an include directory, a header given as text);
/// a compile error is `Error::Compile` with the compiler's log; a parameter mismatch is
/// refused at launch (ER3) with nothing enqueued.
#[test]
fn kc1_options_errors_and_parameter_checks() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let dir = std::env::temp_dir().join(format!("cueflow-cuda-c-inc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("twice.h"), "#define TWICE(x) ((x) * 2)\n").unwrap();
    let src = r#"
#include "twice.h"
#include "plus.h"
extern "C" __global__ void opts(int* out) { out[threadIdx.x] = PLUS(TWICE(VALUE), 1); }
"#;
    let k = Kernel::new("opts")
        .cuda_source(src, "opts")
        .cuda_options(
            CompileOptions::new()
                .define("VALUE", "20")
                .include_dir(&dir)
                .header("plus.h", "#define PLUS(a, b) ((a) + (b))\n")
                .std("c++17"),
        )
        .build();
    let out = upload(&s, &[0i32; 2]);
    s.launch(&k, LaunchConfig::new(1, 2), KernelArgs::new().write(&out))
        .unwrap();
    assert_eq!(download(&s, &out), vec![41, 41]);

    let broken = Kernel::new("broken")
        .cuda_source(
            "extern \"C\" __global__ void broken(int* o) { o[0] = undefined_name; }",
            "broken",
        )
        .build();
    match s.launch(
        &broken,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&out),
    ) {
        Err(Error::Compile { kernel, log }) => {
            assert_eq!(kernel, "broken");
            assert!(log.contains("undefined_name"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    match s.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&out).scalar(1u32),
    ) {
        Err(Error::InvalidArgument { why, .. }) => assert!(why.contains("1 parameters"), "{why}"),
        other => panic!("expected a parameter mismatch, got {other:?}"),
    }
    s.synchronize().unwrap();
}

/// HK1: a templated kernel by name expression, with a struct parameter passed by value (KC4).
#[test]
fn hk1_templates_and_struct_parameters() {
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Affine {
        a: f32,
        b: f32,
        n: u32,
        _pad: u32,
    }
    let src = r#"
struct Affine { float a, b; unsigned n, pad; };
template <class T> __global__ void affine(T* d, Affine p)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) d[i] = __fadd_rn(__fmul_rn(d[i], p.a), p.b);
}
"#;
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let k = Kernel::new("affine")
            .cuda_source(src, "affine<float>")
            .build();
        let data = inputs(300);
        let d = upload(&s, &data);
        let p = Affine {
            a: 1.5,
            b: -0.25,
            n: 300,
            _pad: 0,
        };
        s.launch(
            &k,
            LaunchConfig::for_elements(300, 128),
            KernelArgs::new().write(&d).scalar(p),
        )
        .unwrap();
        let got = download(&s, &d);
        for (g, x) in got.iter().zip(&data) {
            assert_eq!(g.to_bits(), (x * 1.5 - 0.25).to_bits());
        }
    }
}

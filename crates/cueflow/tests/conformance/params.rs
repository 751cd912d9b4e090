//! KC4: kernel parameters by value, structs included, and several arguments over one buffer.

use bytemuck::{Pod, Zeroable};
use cueflow::{Device, Error, Kernel, KernelArgs, LaunchConfig, SanitizeMode, Stream};

use crate::support::*;

/// A parameter block the size of a real one: coefficients and a few scalars (1,040 bytes).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    coef: [f32; 256],
    scale: f32,
    n: u32,
    pad: [u32; 2],
}

const PARAMS_CU: &str = r#"
struct Params { float coef[256]; float scale; unsigned int n; unsigned int pad[2]; };
extern "C" __global__ void kc_params(const float* in, float* out, Params p) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) out[i] = in[i] * p.scale + p.coef[i % 256];
}
"#;

/// KC4: a struct of over a kilobyte passes by value, as CUDA passes it, on both backends;
/// one over the device's parameter limit is refused with nothing enqueued.
pub fn kc4_structs_by_value(dev: &Device) {
    let k = Kernel::new("kc_params")
        .host(|b, a| {
            let p: Params = a.scalar(2);
            let x = a.input::<f32>(0);
            let lo = b.thread_range().start as usize;
            for (j, o) in a.tile_mut::<f32>(1).iter_mut().enumerate() {
                let i = lo + j;
                *o = x[i] * p.scale + p.coef[i % 256];
            }
        })
        .cuda_source(PARAMS_CU, "kc_params")
        .build();
    let mut p = Params {
        coef: [0.0; 256],
        scale: 2.0,
        n: N as u32,
        pad: [0; 2],
    };
    for (i, c) in p.coef.iter_mut().enumerate() {
        *c = i as f32;
    }
    let s = Stream::new(dev).unwrap();
    let x = filled(dev, N, 1.0);
    let y = zeros(dev, N);
    s.launch(
        &k,
        LaunchConfig::for_elements(N, 256),
        KernelArgs::new().read(&x).write(&y).scalar(p),
    )
    .unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    let got = download(&y);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, 2.0 + (i % 256) as f32, "element {i}");
    }
    // Over the limit: refused at the launch, nothing enqueued.
    let limit = dev.properties().max_parameter_bytes as usize;
    assert!(limit >= 4096);
    dev.start_trace().unwrap();
    let huge = [[0u8; 4096]; 10];
    match s.launch(
        &k,
        LaunchConfig::new(1, 32),
        KernelArgs::new().read(&x).write(&y).scalar(huge),
    ) {
        Err(Error::InvalidArgument { kernel, why }) => {
            assert_eq!(kernel, "kc_params");
            assert!(
                why.contains("KC4") && why.contains(&limit.to_string()),
                "{why}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(enqueued(&dev.stop_trace().unwrap()), 0);
}

const IN_PLACE_CU: &str = r#"
extern "C" __global__ void kc_in_place(const float* in, float* out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f + 1.0f;
}
"#;

fn in_place_kernel() -> Kernel {
    Kernel::new("kc_in_place")
        .host(|_, a| {
            for v in a.in_place::<f32>(0, 1) {
                *v = *v * 2.0 + 1.0;
            }
        })
        .cuda_source(IN_PLACE_CU, "kc_in_place")
        .build()
}

/// KC4: an in-place kernel's `in` and `out` may name one buffer (read and written through one
/// name each); two written names of the same bytes are refused. The accesses stay tracked by
/// byte range: the sanitizer reports another stream's unordered read of the buffer, and not
/// an ordered one.
pub fn kc4_several_arguments_over_one_buffer(dev: &Device) {
    let k = in_place_kernel();
    let s = Stream::new(dev).unwrap();
    let d = filled(dev, N, 3.0);
    let cfg = LaunchConfig::for_elements(N, 256);
    s.launch(
        &k,
        cfg,
        KernelArgs::new().read(&d).write(&d).scalar(N as u64),
    )
    .unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&d), 7.0);
    // Two written names: refused, nothing enqueued.
    dev.start_trace().unwrap();
    for args in [
        KernelArgs::new().write(&d).write(&d).scalar(N as u64),
        KernelArgs::new()
            .write(&d.slice(0..N / 2).unwrap())
            .write(&d.slice(N / 4..N).unwrap())
            .scalar(N as u64),
    ] {
        assert!(matches!(
            s.launch(&k, cfg, args),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert_eq!(enqueued(&dev.stop_trace().unwrap()), 0);
    // Two names of one allocation over disjoint halves are separate buffers.
    let (lo, hi) = (d.slice(0..N / 2).unwrap(), d.slice(N / 2..N).unwrap());
    let apart = Kernel::new("kc_out_of_place")
        .host(|b, a| {
            let x = a.input::<f32>(0);
            let lo = b.thread_range().start as usize;
            for (j, v) in a.tile_mut::<f32>(1).iter_mut().enumerate() {
                *v = x[lo + j] * 2.0 + 1.0;
            }
        })
        .cuda_source(IN_PLACE_CU, "kc_in_place")
        .build();
    s.launch(
        &apart,
        LaunchConfig::for_elements(N / 2, 256),
        KernelArgs::new()
            .read(&lo)
            .write(&hi)
            .scalar((N / 2) as u64),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    s.synchronize().unwrap();
    // Tracking by byte range: an unordered read on another stream races with the in-place
    // write; after an event wait it does not.
    let other = side_stream(dev);
    let sink = zeros(dev, N);
    dev.set_sanitize(SanitizeMode::Error);
    s.launch(
        &k,
        cfg,
        KernelArgs::new().read(&d).write(&d).scalar(N as u64),
    )
    .unwrap();
    match other.copy_d2d(&sink, &d) {
        Err(Error::Race(_)) => {}
        r => panic!("an unordered read of the in-place kernel's buffer: {r:?}"),
    }
    let e = s.record().unwrap();
    other.wait_event(&e).unwrap();
    other.copy_d2d(&sink, &d).unwrap();
    other.synchronize().unwrap();
    dev.set_sanitize(SanitizeMode::Off);
    // The halves held 7 and 15 before the last in-place launch.
    let got = download(&sink);
    assert_all(&got[..N / 2], 15.0);
    assert_all(&got[N / 2..], 31.0);
}

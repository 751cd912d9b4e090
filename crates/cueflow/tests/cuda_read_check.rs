//! AC7 on CUDA: with the sanitizer on, a kernel's read-declared arguments are checksummed
//! before and after it, and every argument whose bytes changed is reported (a lint naming the
//! kernel and the argument). These cases are the checksum's edges — single bytes at the start,
//! middle and end of ranges of every alignment, and several arguments — which only a GPU runs
//! (the host backend checks reads by page protection instead: `conformance` `ac7_…`). Each
//! test prints `SKIP` and passes where CUDA is unavailable.

use cueflow::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, SanitizeMode, Stream};

fn cuda() -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("SKIP cuda_read_check: {e}");
            None
        }
    }
}

const SOURCE: &str = r#"
extern "C" __global__ void cf_poke(unsigned char* p, unsigned long long i) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && i != ~0ull) p[i] ^= 0x10;
}
extern "C" __global__ void cf_poke_second(const unsigned char* a, unsigned char* b,
                                          unsigned char* c, unsigned long long i) {
    if (threadIdx.x == 0) { b[i] ^= 1; c[i] = a[i]; }
}
"#;

fn poke() -> Kernel {
    Kernel::new("cf_poke")
        .cuda_source(SOURCE, "cf_poke")
        .build()
}

/// Reports of writes through read arguments so far, taken.
fn reports(dev: &Device) -> Vec<String> {
    dev.take_sanitizer_lints()
        .into_iter()
        .filter(|l| l.kind == cueflow::LintKind::ReadArgumentWritten)
        .map(|l| l.message)
        .collect()
}

/// AC7: one changed byte anywhere in a read argument — first, middle or last, in ranges that
/// start and end at every alignment — is reported; a launch that writes nothing is not.
#[test]
fn ac7_every_changed_byte_is_reported() {
    let Some(dev) = cuda() else { return };
    dev.set_sanitize(SanitizeMode::Warn);
    let s = Stream::new(&dev).unwrap();
    let buf = DeviceBuffer::<u8>::new(&dev, 1000).unwrap();
    s.write_pageable(&buf, &[7u8; 1000]).unwrap();
    s.synchronize().unwrap();
    reports(&dev);
    for (offset, len) in [
        (0, 1000),
        (3, 13),
        (1, 7),
        (5, 2),
        (8, 64),
        (7, 993),
        (0, 1),
    ] {
        let view = buf.slice(offset..offset + len).unwrap();
        for i in [0, len / 2, len - 1] {
            s.launch(
                &poke(),
                LaunchConfig::new(1, 32),
                KernelArgs::new().read(&view).scalar(i as u64),
            )
            .unwrap();
            s.synchronize().unwrap();
            let r = reports(&dev);
            assert!(
                r.len() == 1 && r[0].contains("cf_poke") && r[0].contains("argument 0"),
                "byte {i} of {offset}..{}: {r:?}",
                offset + len
            );
        }
        s.launch(
            &poke(),
            LaunchConfig::new(1, 32),
            KernelArgs::new().read(&view).scalar(u64::MAX),
        )
        .unwrap();
        s.synchronize().unwrap();
        assert!(reports(&dev).is_empty(), "a launch that wrote nothing");
    }
}

/// AC7: of several arguments, the one written through a read declaration is named; a read
/// argument that stays the same and a written argument are not reported, nor is a launch
/// with the sanitizer off.
#[test]
fn ac7_only_the_written_read_argument_is_named() {
    let Some(dev) = cuda() else { return };
    let s = Stream::new(&dev).unwrap();
    let k = Kernel::new("cf_poke_second")
        .cuda_source(SOURCE, "cf_poke_second")
        .build();
    let bufs: Vec<DeviceBuffer<u8>> = (0..3)
        .map(|_| {
            let b = DeviceBuffer::<u8>::new(&dev, 4096).unwrap();
            s.write_pageable(&b, &[1u8; 4096]).unwrap();
            b
        })
        .collect();
    let args = || {
        KernelArgs::new()
            .read(&bufs[0])
            .read(&bufs[1])
            .write(&bufs[2])
            .scalar(100u64)
    };
    s.launch(&k, LaunchConfig::new(1, 32), args()).unwrap();
    s.synchronize().unwrap();
    assert!(reports(&dev).is_empty(), "checked with the sanitizer off");
    dev.set_sanitize(SanitizeMode::Warn);
    s.launch(&k, LaunchConfig::new(1, 32), args()).unwrap();
    s.synchronize().unwrap();
    let r = reports(&dev);
    assert!(
        r.len() == 1 && r[0].contains("argument 1"),
        "expected argument 1 only: {r:?}"
    );
}

//! Pageable copies at memory speed (CP3, issue 19): each direction timed against
//! `copy_from_slice` of the same bytes, median of several rounds, in one run. The host
//! backend's target is at least 0.8 x at 4 MiB and 256 MiB.
//!
//! A measurement, not a timed assertion (run it on an idle machine):
//! `cargo test -p cueflow --release --test pageable_speed -- --ignored --nocapture`
//! (`CUEFLOW_DEVICE=cuda:0` measures a GPU's pageable copies against host memcpy instead.)

use std::time::{Duration, Instant};

use cueflow::{Device, Stream};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn pageable_copies_against_copy_from_slice() {
    let dev = Device::from_env().unwrap();
    let s = Stream::new(&dev).unwrap();
    println!("device: {}", dev.properties().name);
    for (mib, rounds) in [(4usize, 31usize), (256, 9)] {
        let n = mib << 20;
        let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let mut dst = vec![0u8; n];
        let d = cueflow::DeviceBuffer::<u8>::new(&dev, n).unwrap();
        // Warm every buffer's pages first.
        dst.copy_from_slice(&src);
        s.write_pageable(&d, &src).unwrap();
        s.read_pageable(&mut dst, &d).unwrap();
        let (mut memcpy, mut up, mut down) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            memcpy.push(t.elapsed());
            let t = Instant::now();
            s.write_pageable(&d, &src).unwrap();
            up.push(t.elapsed());
            let t = Instant::now();
            s.read_pageable(&mut dst, &d).unwrap();
            down.push(t.elapsed());
        }
        assert_eq!(dst, src);
        let (m, u, w) = (median(memcpy), median(up), median(down));
        let ratio = |x: Duration| m.as_secs_f64() / x.as_secs_f64();
        println!(
            "{mib:>4} MiB: copy_from_slice {:>9.1?}  write_pageable {:>9.1?} ({:.2} x)  \
             read_pageable {:>9.1?} ({:.2} x)  [median of {rounds}]",
            m,
            u,
            ratio(u),
            w,
            ratio(w)
        );
    }
}

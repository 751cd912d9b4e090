//! The work-item-loop compiler against fibers, hand-vectorized C++ and the Rust closure, on
//! the research note's four reference kernels (`tests/common/lanes_kernels.cu`), one compute
//! worker (one core), in one run:
//!
//! ```text
//! cargo run --release -p cueflow --example cuda_c_lanes [reps]
//! ```
//! K1 `cf_compute_f32` (2^20 elements × 64 steps), K2 a divergent loop + if, K3 a
//! shared-memory tree with barriers, K4 shuffles + shared memory. The fiber timings come from
//! this program run again with `CUEFLOW_HOST_CUDA_C_PATH=fibers` (the path is chosen per
//! process), the hand-vectorized code (`cuda_c_lanes_hand.cpp`) is compiled here with the
//! machine's C++ compiler and called on one thread. Every output is compared bit for bit.

use std::time::Instant;

use cueflow::{Device, DeviceBuffer, HostPath, Kernel, KernelArgs, LaunchConfig, Stream};

const SRC: &str = include_str!("../tests/common/lanes_kernels.cu");
const HAND: &str = include_str!("cuda_c_lanes_hand.cpp");
const N: usize = 1 << 20;
const ITERS: u32 = 64;
const BS: u32 = 256;
/// Launches per timing (one synchronization for all: a thread's wake-up on a busy machine is
/// paid once per batch).
const BATCH: usize = 4;

fn hsh(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846ca68b);
    x ^ (x >> 16)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

type Hand1 = unsafe extern "C" fn(*mut f32, u32, u64, u32);
type Hand2 = unsafe extern "C" fn(*mut f32, *const u32, u64, u32);
type Hand3 = unsafe extern "C" fn(*const f32, *mut f32, u32, u64, u32);

/// The hand-vectorized functions, compiled now.
fn hand() -> Option<(Hand1, Hand2, Hand3, Hand3)> {
    let dir = std::env::temp_dir().join(format!("cueflow-lanes-hand-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let (src, so) = (dir.join("hand.cpp"), dir.join("hand.so"));
    std::fs::write(&src, HAND).ok()?;
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let ok = std::process::Command::new(cxx)
        .args([
            "-O3",
            "-mavx2",
            "-mfma",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-shared",
            "-fPIC",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&so)
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let path = std::ffi::CString::new(so.to_str()?).ok()?;
    // SAFETY: a shared object compiled just now from cuda_c_lanes_hand.cpp; its symbols have the
    // signatures declared above (extern "C" functions of that file).
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        if h.is_null() {
            return None;
        }
        let f = |n: &str| libc::dlsym(h, std::ffi::CString::new(n).unwrap().as_ptr());
        Some((
            std::mem::transmute::<*mut libc::c_void, Hand1>(f("k1_closure")),
            std::mem::transmute::<*mut libc::c_void, Hand2>(f("k2_hand")),
            std::mem::transmute::<*mut libc::c_void, Hand3>(f("k3_hand")),
            std::mem::transmute::<*mut libc::c_void, Hand3>(f("k4_hand")),
        ))
    }
}

fn main() -> cueflow::Result<()> {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(7);
    let child = std::env::var("CUEFLOW_HOST_CUDA_C_PATH").is_ok_and(|v| v == "fibers");
    let dev = Device::host_with_workers(1)?;
    let s = Stream::new(&dev)?;
    let init: Vec<f32> = (0..N as u32)
        .map(|i| (hsh(i) % 1000) as f32 / 1000.0)
        .collect();
    let cnt: Vec<u32> = (0..N as u32)
        .map(|i| 32 + hsh(i.wrapping_mul(7) + 1) % 65)
        .collect();
    let steps2: f64 = cnt.iter().map(|&c| c as f64).sum();
    let blocks = (N as u32).div_ceil(BS);
    let d = DeviceBuffer::<f32>::new(&dev, N)?;
    let c = DeviceBuffer::<u32>::new(&dev, N)?;
    let out = DeviceBuffer::<f32>::new(&dev, blocks as usize)?;
    s.write_pageable(&c, &cnt)?;
    let cfg = LaunchConfig::new(blocks, BS);
    let k = |name: &str| Kernel::new(name).cuda_source(SRC, name).build();
    let (k1, k2, k3, k4) = (
        k("k1_compute"),
        k("k2_diverge"),
        k("k3_reduce_smem"),
        k("k4_reduce_shfl"),
    );
    let names = ["K1", "K2", "K3", "K4"];
    let kerns = [&k1, &k2, &k3, &k4];
    for (name, kern) in names.iter().zip(kerns) {
        let path = kern.host_path(&dev)?;
        if !child {
            assert_eq!(path, Some(HostPath::Lanes), "{name}");
        }
    }
    let hand = if child { None } else { hand() };
    let sum = |o: &[f32]| {
        o.iter()
            .fold(0u64, |h, x| h.rotate_left(5) ^ x.to_bits() as u64)
    };
    // Timings interleaved (each repetition runs every variant), so that a busy machine slows
    // them alike: [kernel][variant: lanes, hand, closure] → times, output checksum.
    let mut t = vec![vec![(Vec::new(), 0u64); 3]; 4];
    for _ in 0..reps {
        for (w, kern) in kerns.iter().enumerate() {
            let name = names[w];
            s.write_pageable(&d, &init)?;
            s.synchronize()?;
            let args = || match name {
                "K1" => KernelArgs::new().write(&d).scalar(ITERS).scalar(N as u64),
                "K2" => KernelArgs::new().write(&d).read(&c).scalar(N as u64),
                _ => KernelArgs::new()
                    .read(&d)
                    .write(&out)
                    .scalar(ITERS)
                    .scalar(N as u64),
            };
            let t0 = Instant::now();
            for _ in 0..BATCH {
                s.launch(kern, cfg, args())?;
            }
            s.synchronize()?;
            t[w][0].0.push(t0.elapsed().as_secs_f64() / BATCH as f64);
            let mut o = vec![0f32; if w < 2 { N } else { blocks as usize }];
            if w < 2 {
                s.read_pageable(&mut o, &d)?;
            } else {
                s.read_pageable(&mut o, &out)?;
            }
            t[w][0].1 = sum(&o);
            if let Some((h1, h2, h3, h4)) = hand {
                let mut data = init.clone();
                let mut outb = vec![0f32; blocks as usize];
                let t0 = Instant::now();
                for _ in 0..BATCH {
                    // SAFETY: buffers of N elements (blocks for the outputs), as the functions
                    // expect.
                    unsafe {
                        match w {
                            0 => h1(data.as_mut_ptr(), ITERS, N as u64, blocks),
                            1 => h2(data.as_mut_ptr(), cnt.as_ptr(), N as u64, blocks),
                            2 => h3(data.as_ptr(), outb.as_mut_ptr(), ITERS, N as u64, blocks),
                            _ => h4(data.as_ptr(), outb.as_mut_ptr(), ITERS, N as u64, blocks),
                        }
                    }
                }
                t[w][1].0.push(t0.elapsed().as_secs_f64() / BATCH as f64);
                t[w][1].1 = sum(if w < 2 { &data } else { &outb });
            }
            if w == 0 && !child {
                s.write_pageable(&d, &init)?;
                s.synchronize()?;
                let t0 = Instant::now();
                for _ in 0..BATCH {
                    cueflow::kernels::compute(&s, &d, ITERS)?;
                }
                s.synchronize()?;
                t[0][2].0.push(t0.elapsed().as_secs_f64() / BATCH as f64);
                let mut o = vec![0f32; N];
                s.read_pageable(&mut o, &d)?;
                t[0][2].1 = sum(&o);
            }
        }
    }
    if child {
        for (w, name) in names.iter().enumerate() {
            println!("FIBERS {name} {} {}", median(t[w][0].0.clone()), t[w][0].1);
        }
        return Ok(());
    }
    // The fibers, in a second run of this program.
    let exe = std::env::current_exe().unwrap();
    let fib = std::process::Command::new(exe)
        .arg(reps.min(3).to_string())
        .env("CUEFLOW_HOST_CUDA_C_PATH", "fibers")
        .env_remove("CUEFLOW_HOST_CUDA_C_DUMP")
        .output()
        .expect("run the fibers");
    let fib_text = String::from_utf8_lossy(&fib.stdout).to_string();
    let fibers: Vec<(String, f64, u64)> = fib_text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 4 && w[0] == "FIBERS").then(|| {
                (
                    w[1].to_string(),
                    w[2].parse().unwrap(),
                    w[3].parse().unwrap(),
                )
            })
        })
        .collect();
    let results: Vec<(&str, f64, u64)> = names
        .iter()
        .enumerate()
        .map(|(w, n)| (*n, median(t[w][0].0.clone()), t[w][0].1))
        .collect();
    let hand_t: Vec<Option<(f64, u64)>> = (0..4)
        .map(|w| (!t[w][1].0.is_empty()).then(|| (median(t[w][1].0.clone()), t[w][1].1)))
        .collect();
    let (closure_t, closure_sum) = (median(t[0][2].0.clone()), t[0][2].1);
    println!("one compute worker; medians of {reps} runs; G element-steps/s (ratio)");
    println!("| kernel | lanes | fibers | hand C++ | Rust closure | lanes/fibers | lanes/hand | lanes/closure |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, (name, t, sum)) in results.iter().enumerate() {
        let steps = if *name == "K2" {
            steps2
        } else {
            N as f64 * ITERS as f64
        };
        let rate = |t: f64| steps / t / 1e9;
        let f = fibers.iter().find(|f| f.0 == *name);
        let h = hand_t[i];
        let same = |o: Option<u64>| match o {
            Some(o) if o == *sum => "",
            Some(_) => " (bits differ)",
            None => "",
        };
        let fs = f.map_or("-".into(), |f| {
            format!("{:.2}{}", rate(f.1), same(Some(f.2)))
        });
        let hs = h.map_or("-".into(), |h| {
            format!("{:.2}{}", rate(h.0), same(Some(h.1)))
        });
        let cs = if *name == "K1" {
            format!("{:.2}{}", rate(closure_t), same(Some(closure_sum)))
        } else {
            "-".into()
        };
        println!(
            "| {name} | {:.2} | {fs} | {hs} | {cs} | {} | {} | {} |",
            rate(*t),
            f.map_or("-".into(), |f| format!("{:.1}×", f.1 / t)),
            h.map_or("-".into(), |h| format!("{:.2}×", h.0 / t)),
            if *name == "K1" {
                format!("{:.2}×", closure_t / t)
            } else {
                "-".into()
            },
        );
    }
    Ok(())
}

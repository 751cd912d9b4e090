//! The work-item-loop compiler for CUDA C on the host backend (issue 30): one test per
//! transformation rule, each comparing the kernel's output with values computed here in Rust,
//! independently of the kernel. `lanes_and_fibers_agree` runs this binary again with
//! `CUEFLOW_HOST_CUDA_C_PATH=fibers`, so the same checks pass on both paths (and so the two
//! paths give the same bits). On a GPU (CUDA device 0) the same CUDA C runs too
//! (`SKIP cuda: …` without one).

use cueflow::{Device, DeviceBuffer, HostPath, Kernel, KernelArgs, LaunchConfig, Stream};

#[path = "common/kernel_entries.rs"]
mod kernel_entries;
use kernel_entries::kernel_entries;

const SRC: &str = include_str!("common/lanes_kernels.cu");

fn forced_fibers() -> bool {
    std::env::var("CUEFLOW_HOST_CUDA_C_PATH").is_ok_and(|v| v == "fibers")
}

fn devices() -> Vec<Device> {
    let mut v = vec![Device::host().unwrap()];
    match Device::cuda(0) {
        Ok(d) => v.push(d),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("SKIP cuda: {e}"));
        }
    }
    v
}

/// The kernel; on the host it takes the path this run expects.
fn kernel(dev: &Device, name: &str) -> Kernel {
    let k = Kernel::new(name).cuda_source(SRC, name).build();
    if let Some(path) = k.host_path(dev).unwrap() {
        if forced_fibers() {
            assert!(matches!(path, HostPath::Fibers { .. }), "{name}: {path}");
        } else {
            assert_eq!(path, HostPath::Lanes, "{name}");
        }
    }
    k
}

fn upload<T: bytemuck::Pod>(s: &Stream, data: &[T]) -> DeviceBuffer<T> {
    let d = DeviceBuffer::<T>::new(s.device(), data.len()).unwrap();
    s.write_pageable(&d, data).unwrap();
    d
}

fn download<T: bytemuck::Pod + Default>(s: &Stream, d: &DeviceBuffer<T>) -> Vec<T> {
    let mut out = vec![T::default(); d.len()];
    s.read_pageable(&mut out, d).unwrap();
    out
}

fn inputs(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919) % 1000) as f32 * 0.001).collect()
}

fn compute(mut x: f32, iters: u32) -> f32 {
    for _ in 0..iters {
        x = x.mul_add(0.999, 0.001);
    }
    x
}

/// Divergent return (live mask), a uniform loop with the thread loop inside.
#[test]
fn divergent_return() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 1000usize; // not a multiple of the block: the last block's tail returns
        let data = inputs(n);
        let d = upload(&s, &data);
        let args = KernelArgs::new().write(&d).scalar(37u32).scalar(n as u64);
        s.launch(&kernel(&dev, "k1_compute"), LaunchConfig::new(4, 256), args)
            .unwrap();
        let want: Vec<f32> = data.iter().map(|&x| compute(x, 37)).collect();
        assert_eq!(download(&s, &d), want, "{dev:?}");
    }
}

/// A divergent loop (per-thread trip count) with a divergent if inside.
#[test]
fn divergent_loop() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 700usize;
        let data = inputs(n);
        let cnt: Vec<u32> = (0..n as u32).map(|i| (i * 13) % 41).collect();
        let (d, c) = (upload(&s, &data), upload(&s, &cnt));
        let args = KernelArgs::new().write(&d).read(&c).scalar(n as u64);
        s.launch(&kernel(&dev, "k2_diverge"), LaunchConfig::new(3, 256), args)
            .unwrap();
        let want: Vec<f32> = data
            .iter()
            .zip(&cnt)
            .map(|(&x0, &c)| {
                let mut x = x0;
                for _ in 0..c {
                    x = if x > 0.5 {
                        x.mul_add(0.999, 0.001)
                    } else {
                        x.mul_add(1.001, 0.002)
                    };
                }
                x
            })
            .collect();
        assert_eq!(download(&s, &d), want, "{dev:?}");
    }
}

/// `if (threadIdx.x OP uniform)` narrows the thread range to a computed bound (R3): every
/// comparison direction, signed and unsigned, bounds below, inside and beyond the block (and a
/// chunk), 64-bit and float bounds, checked against C's comparison rules computed here.
#[test]
fn thread_index_bounds() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let (blocks, bs) = (2u32, 160u32);
        let k = kernel(&dev, "thread_bounds");
        for (a, big, f) in [
            (-5i32, -1i64, -0.5f32),
            (0, 0, 0.0),
            (3, 50, 2.5),
            (63, 64, 63.5),
            (100, 1 << 40, 159.0),
            (159, 159, 1e9),
            (300, -(1 << 40), 70.25),
            (i32::MIN, i64::MAX, f32::NEG_INFINITY),
            (i32::MAX, i64::MIN, f32::INFINITY),
        ] {
            let out = upload(&s, &vec![-1i32; (blocks * bs) as usize]);
            let args = KernelArgs::new()
                .write(&out)
                .scalar(a)
                .scalar(big)
                .scalar(f);
            s.launch(&k, LaunchConfig::new(blocks, bs), args).unwrap();
            let want: Vec<i32> = (0..blocks * bs)
                .map(|g| {
                    let t = g % bs;
                    let si = t as i32;
                    let au = a as u32; // C converts the int to unsigned beside an unsigned
                    let conds = [
                        t < au,
                        si < a,
                        si <= a,
                        a < si,
                        si >= a,
                        a >= si,
                        si == a,
                        t > au,
                        (si as i64) < big,
                        big <= si as i64,
                        (si as f32) < f,
                        t <= 2u32.wrapping_mul(au),
                        au > t,
                        si > a && t <= au.wrapping_add(40),
                    ];
                    conds
                        .iter()
                        .enumerate()
                        .map(|(i, &c)| (c as i32) << i)
                        .sum()
                })
                .collect();
            assert_eq!(download(&s, &out), want, "{dev:?} a={a} big={big} f={f}");
        }
    }
}

/// A barrier inside a uniform loop, shared memory indexed by the thread, `if (t < st)` as
/// the thread loop's bound.
#[test]
fn barrier_inside_a_uniform_loop() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let (n, blocks) = (1000usize, 4usize);
        let data = inputs(n);
        let (d, out) = (upload(&s, &data), upload(&s, &vec![0f32; blocks]));
        let args = KernelArgs::new()
            .read(&d)
            .write(&out)
            .scalar(5u32)
            .scalar(n as u64);
        s.launch(
            &kernel(&dev, "k3_reduce_smem"),
            LaunchConfig::new(blocks as u32, 256),
            args,
        )
        .unwrap();
        let want: Vec<f32> = (0..blocks)
            .map(|b| {
                let mut v: Vec<f32> = (0..256)
                    .map(|t| compute(data.get(b * 256 + t).copied().unwrap_or(0.0), 5))
                    .collect();
                let mut st = 128;
                while st > 0 {
                    for t in 0..st {
                        v[t] += v[t + st];
                    }
                    st /= 2;
                }
                v[0]
            })
            .collect();
        assert_eq!(download(&s, &out), want, "{dev:?}");
    }
}

/// Shuffles (down) in uniform loops and after a barrier, inside `if (t < 32)`.
#[test]
fn shuffles_and_shared_memory() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let (n, blocks) = (1000usize, 4usize);
        let data = inputs(n);
        let (d, out) = (upload(&s, &data), upload(&s, &vec![0f32; blocks]));
        let args = KernelArgs::new()
            .read(&d)
            .write(&out)
            .scalar(3u32)
            .scalar(n as u64);
        s.launch(
            &kernel(&dev, "k4_reduce_shfl"),
            LaunchConfig::new(blocks as u32, 256),
            args,
        )
        .unwrap();
        let warp_sum = |v: &mut [f32]| {
            let mut off = 16;
            while off > 0 {
                let snap = v.to_vec();
                for l in 0..32 {
                    v[l] += if l + off < 32 { snap[l + off] } else { snap[l] };
                }
                off /= 2;
            }
            v[0]
        };
        let want: Vec<f32> = (0..blocks)
            .map(|b| {
                let x: Vec<f32> = (0..256)
                    .map(|t| compute(data.get(b * 256 + t).copied().unwrap_or(0.0), 3))
                    .collect();
                let mut w: Vec<f32> = x.chunks(32).map(|c| warp_sum(&mut c.to_vec())).collect();
                w.resize(32, 0.0);
                warp_sum(&mut w)
            })
            .collect();
        assert_eq!(download(&s, &out), want, "{dev:?}");
    }
}

/// A shuffle inside a divergent loop (some lanes leave it first).
#[test]
fn shuffle_inside_a_divergent_loop() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 64 * 5; // whole warps: every lane's partner is in the loop with it
        let data: Vec<i32> = (0..n as i32).map(|i| i * 7 - 100).collect();
        let (d, out) = (upload(&s, &data), upload(&s, &vec![0i32; n]));
        let args = KernelArgs::new().read(&d).write(&out).scalar(n as i32);
        s.launch(&kernel(&dev, "swap_pairs"), LaunchConfig::new(2, 64), args)
            .unwrap();
        let want: Vec<i32> = (0..n).map(|i| data[i] * 1000 + data[i ^ 1]).collect();
        assert_eq!(download(&s, &out), want, "{dev:?}");
    }
}

/// A per-thread value live across a barrier; shared memory read at another thread's index.
#[test]
fn value_live_across_a_barrier() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let (bs, blocks) = (96usize, 3usize);
        let data: Vec<i32> = (0..(bs * blocks) as i32).map(|i| i * 5 - 17).collect();
        let (d, out) = (upload(&s, &data), upload(&s, &vec![0i32; bs * blocks]));
        let args = KernelArgs::new().read(&d).write(&out);
        s.launch(
            &kernel(&dev, "rotate_block"),
            LaunchConfig::new(blocks as u32, bs as u32),
            args,
        )
        .unwrap();
        let want: Vec<i32> = (0..bs * blocks)
            .map(|g| {
                let (b, t) = (g / bs, g % bs);
                data[g] * 3 * 100 + data[b * bs + (t + 1) % bs] * 3 + 1
            })
            .collect();
        assert_eq!(download(&s, &out), want, "{dev:?}");
    }
}

/// Per-thread constants recomputed in each thread loop instead of kept in arrays, and a value
/// live across barriers that a chunk updates through a chunk-sized copy, in blocks of 100
/// threads (a full chunk and a partial one) with a narrowed range inside the chunk.
#[test]
fn recomputed_values_and_chunk_copies() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let (bs, blocks, n, rounds) = (100usize, 3usize, 280usize, 3i32);
        let data: Vec<i32> = (0..n as i32).map(|i| (i * 37) % 101 - 50).collect();
        let (d, out) = (upload(&s, &data), upload(&s, &vec![0i32; n]));
        let args = KernelArgs::new()
            .read(&d)
            .write(&out)
            .scalar(n as i32)
            .scalar(rounds);
        s.launch(
            &kernel(&dev, "remat_chunks"),
            LaunchConfig::new(blocks as u32, bs as u32),
            args,
        )
        .unwrap();
        let mut want = vec![0i32; n];
        for b in 0..blocks {
            let g = |t: usize| (b * bs + t) as i32;
            let half = |t: usize| (g(t) + 3) / 2 - (t % 5) as i32;
            let mut acc: Vec<i32> = (0..bs)
                .map(|t| {
                    if g(t) < n as i32 {
                        data[g(t) as usize]
                    } else {
                        -1
                    }
                })
                .collect();
            let mut sh = acc.clone();
            for r in 0..rounds {
                for t in 0..bs {
                    if t < bs - 7 {
                        acc[t] = acc[t].wrapping_add(sh[t + 7].wrapping_mul(r + 1) + half(t));
                    }
                    acc[t] ^= g(t);
                }
                sh = acc.clone();
            }
            for t in 0..bs {
                if g(t) < n as i32 {
                    let k = half(t) * 2 + g(t);
                    want[g(t) as usize] = k.wrapping_mul(3).wrapping_add(acc[t]);
                }
            }
        }
        assert_eq!(download(&s, &out), want, "{dev:?}");
    }
}

/// Atomics on shared and global memory, guarded by the thread's index.
#[test]
fn atomics() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 3000u32;
        let data: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2654435761) >> 9).collect();
        let (d, bins) = (upload(&s, &data), upload(&s, &[0u32; 8]));
        let args = KernelArgs::new().read(&d).scalar(n).atomic(&bins);
        s.launch(
            &kernel(&dev, "count_mod"),
            LaunchConfig::new(n.div_ceil(128), 128),
            args,
        )
        .unwrap();
        let mut want = [0u32; 8];
        for x in &data {
            want[(x % 8) as usize] += 1;
        }
        assert_eq!(download(&s, &bins), want, "{dev:?}");
    }
}

/// A divergent if/else with loops in both branches (masks, each branch skipped when no lane
/// takes it).
#[test]
fn divergent_if_with_loops() {
    for dev in devices() {
        let s = Stream::new(&dev).unwrap();
        let n = 300usize;
        let data: Vec<i32> = (0..n as i32).map(|i| i * 3 - 50).collect();
        let cnt: Vec<i32> = (0..n as i32).map(|i| i % 7).collect();
        let (d, c) = (upload(&s, &data), upload(&s, &cnt));
        let args = KernelArgs::new().write(&d).read(&c).scalar(n as i32);
        s.launch(
            &kernel(&dev, "branch_loops"),
            LaunchConfig::new(3, 128),
            args,
        )
        .unwrap();
        let want: Vec<i32> = (0..n)
            .map(|i| {
                let mut x = data[i];
                if i % 3 == 0 {
                    x += (0..cnt[i]).sum::<i32>();
                } else {
                    for k in 0..3 {
                        x = x * 2 - k;
                    }
                }
                x
            })
            .collect();
        assert_eq!(download(&s, &d), want, "{dev:?}");
    }
}

/// What the compiler does not cover runs as fibers, with the reason and the line.
#[test]
fn a_barrier_in_divergent_code_falls_back_to_fibers() {
    let dev = Device::host().unwrap();
    let k = Kernel::new("divergent_barrier")
        .cuda_source(SRC, "divergent_barrier")
        .build();
    match k.host_path(&dev).unwrap() {
        Some(HostPath::Fibers { reason }) => {
            assert!(
                forced_fibers()
                    || reason.contains("barrier inside a divergent") && reason.contains("line "),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let closure = Kernel::new("c")
        .host(|_, _| {})
        .cuda_source(SRC, "k1_compute")
        .build();
    if std::env::var("CUEFLOW_HOST_KERNELS").is_err() {
        assert_eq!(
            closure.host_path(&dev).unwrap(),
            None,
            "a closure runs, not CUDA C"
        );
    }
}

/// The same checks with every kernel forced to fibers (a second run of this binary).
#[test]
fn lanes_and_fibers_agree() {
    if forced_fibers() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--test-threads=2", "--skip", "lanes_and_fibers_agree"])
        .env("CUEFLOW_HOST_CUDA_C_PATH", "fibers")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("12 passed"), "{text}");
}

/// Which kernels of the built-ins, the test suites and the sample ports take the lanes, and
/// why the others do not (printed as the table of `docs/host-cuda-c.md`): every built-in and
/// at least 80 % of the sample ports' kernels take the lanes.
#[test]
fn coverage_of_the_builtins_and_the_sample_ports() {
    if forced_fibers() {
        return;
    }
    let dev = Device::host().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = vec![
        (
            "builtins.cu".to_string(),
            cueflow::kernels::BUILTINS_CU.to_string(),
        ),
        ("tests/common/lanes_kernels.cu".to_string(), SRC.to_string()),
    ];
    let samples = format!("{root}/../cueflow-samples/kernels");
    let mut names: Vec<_> = std::fs::read_dir(&samples)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    for p in names {
        let text = std::fs::read_to_string(&p).unwrap();
        files.push((
            format!("samples/{}", p.file_name().unwrap().to_string_lossy()),
            text,
        ));
    }
    let (mut sample_total, mut sample_lanes) = (0, 0);
    for (file, text) in &files {
        let src: &'static str = Box::leak(text.clone().into_boxed_str());
        for e in kernel_entries(text) {
            let opts = cueflow::CompileOptions::new()
                .header("cueflow_conditional.h", cueflow::CONDITIONAL_CUDA_H);
            let k = Kernel::new(e.as_str())
                .cuda_source(src, &e)
                .cuda_options(opts)
                .build();
            let path = k.host_path(&dev).unwrap().unwrap();
            println!("| {file} | `{e}` | {path} |");
            if file.starts_with("builtins") {
                assert_eq!(path, HostPath::Lanes, "built-in {e}");
            }
            if file.starts_with("samples/") {
                sample_total += 1;
                sample_lanes += (path == HostPath::Lanes) as usize;
            }
        }
    }
    println!("sample ports: {sample_lanes} of {sample_total} kernels take the lanes");
    assert!(
        sample_lanes * 5 >= sample_total * 4,
        "{sample_lanes} of {sample_total}"
    );
}

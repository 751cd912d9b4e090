//! Built-in kernels, on every backend: the classic first kernels (fill, scale, saxpy), an iterative compute kernel whose cost is a parameter (to balance compute
//! against copies in the pipeline), and small tools for tests and benchmarks (an empty kernel,
//! a timed spin, flags shared between streams, a deliberate fault).
//!
//! The CUDA versions live in `builtins.cu`; the host versions below compute bit-identical
//! results (same operations in the same order; a fused multiply-add only where both fuse, as
//! `__fmaf_rn` and `f32::mul_add`, each one operation with one rounding).

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use crate::api::kernel::{Kernel, KernelArgs, LaunchConfig};
use crate::api::memory::DeviceBuffer;
use crate::api::stream::Stream;
use crate::error::Result;

/// CUDA C source of every built-in kernel.
pub const BUILTINS_CU: &str = crate::builtins::BUILTINS_CU;

/// Threads per block used by the element-wise helpers.
pub const BLOCK: u32 = 256;

/// Multiplier and addend of one step of [`compute`]: `x = fma(x, 0.999, 0.001)` (one rounding).
pub const COMPUTE_STEP: (f32, f32) = (0.999, 0.001);

fn builtin(entry: &str) -> crate::api::kernel::KernelBuilder {
    Kernel::new(entry).cuda_source(BUILTINS_CU, entry)
}

/// `cf_empty()`: does nothing (launch-overhead benchmarks).
pub static EMPTY: LazyLock<Kernel> = LazyLock::new(|| builtin("cf_empty").host(|_, _| {}).build());

/// `cf_fill_f32(dst, value, n)`: `dst[i] = value`.
pub static FILL_F32: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_fill_f32")
        .host(|_, a| {
            let v: f32 = a.scalar(1);
            a.tile_mut::<f32>(0).fill(v);
        })
        .build()
});

/// `cf_scale_f32(data, factor, n)`: `data[i] *= factor`.
pub static SCALE_F32: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_scale_f32")
        .host(|_, a| {
            let f: f32 = a.scalar(1);
            for x in a.tile_mut::<f32>(0) {
                *x *= f;
            }
        })
        .build()
});

/// `cf_saxpy_f32(y, x, a, n)`: `y[i] = fma(a, x[i], y[i])`.
pub static SAXPY_F32: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_saxpy_f32")
        .host(|ctx, args| {
            let a: f32 = args.scalar(2);
            if args.aliased_by(1).is_some() {
                // x and y are one buffer (KC4): y = a * y + y, element by element.
                for y in args.in_place::<f32>(1, 0) {
                    *y = a.mul_add(*y, *y);
                }
                return;
            }
            let x = args.input::<f32>(1);
            let lo = ctx.thread_range().start as usize;
            for (k, y) in args.tile_mut::<f32>(0).iter_mut().enumerate() {
                *y = a.mul_add(x[lo + k], *y);
            }
        })
        .build()
});

/// `cf_compute_f32(data, iters, n)`: `iters` times `x = fma(x, 0.999, 0.001)` per element.
pub static COMPUTE_F32: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_compute_f32")
        .host(|_, a| {
            let iters: u32 = a.scalar(1);
            compute_tile(a.tile_mut::<f32>(0), iters);
        })
        .build()
});

/// `iters` compute steps on every element of `tile`, each one fused multiply-add with one
/// rounding (`__fmaf_rn` in `builtins.cu`), so the bits equal the CUDA kernel's. Steps outside,
/// elements inside: the inner loop vectorizes, and each element still sees the same operations
/// in the same order. Where the CPU has the FMA instruction (detected at run time) the loop is
/// compiled for it; elsewhere `f32::mul_add` is the C library's `fmaf`, slower but the same bits.
fn compute_tile(tile: &mut [f32], iters: u32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2") {
        // SAFETY: `compute_tile_fma` only needs the FMA and AVX2 instructions, which the CPU
        // was just detected to have.
        return unsafe { compute_tile_fma(tile, iters) };
    }
    compute_steps(tile, iters);
}

/// [`compute_tile`]'s loop compiled with the FMA and AVX2 instructions.
///
/// # Safety
/// The CPU must have FMA and AVX2 (`is_x86_feature_detected!`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma,avx2")]
unsafe fn compute_tile_fma(tile: &mut [f32], iters: u32) {
    compute_steps(tile, iters);
}

/// The compute steps themselves; inlined into each caller so that the FMA build of
/// [`compute_tile_fma`] turns `mul_add` into the instruction.
#[inline(always)]
fn compute_steps(tile: &mut [f32], iters: u32) {
    let (m, c) = COMPUTE_STEP;
    for _ in 0..iters {
        for x in tile.iter_mut() {
            *x = x.mul_add(m, c);
        }
    }
}

/// `cf_spin_ns(ns)`: each block busy-waits `ns` nanoseconds.
pub static SPIN_NS: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_spin_ns")
        .host(|_, a| {
            let ns: u64 = a.scalar(0);
            let t = Instant::now();
            while t.elapsed() < Duration::from_nanos(ns) {
                std::hint::spin_loop();
            }
        })
        .build()
});

/// `cf_wait_flag(flag, value, timeout_ns)`: waits until `flag[0] == value`; faults on timeout.
pub static WAIT_FLAG: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_wait_flag")
        .host(|_, a| {
            let flag = &a.atomics_u32(0)[0];
            let value: u32 = a.scalar(1);
            let timeout = Duration::from_nanos(a.scalar::<u64>(2));
            let t = Instant::now();
            while flag.load(std::sync::atomic::Ordering::Acquire) != value {
                assert!(
                    t.elapsed() < timeout,
                    "cf_wait_flag: flag never became {value} within {timeout:?}"
                );
                std::thread::yield_now();
            }
        })
        .build()
});

/// `cf_set_flag(flag, value)`: `flag[0] = value`.
pub static SET_FLAG: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_set_flag")
        .host(|ctx, a| {
            if ctx.linear_block == 0 {
                let v: u32 = a.scalar(1);
                a.atomics_u32(0)[0].store(v, std::sync::atomic::Ordering::Release);
            }
        })
        .build()
});

/// `cf_fault(addr)`: writes to an invalid address; the device becomes poisoned (KN2).
pub static FAULT: LazyLock<Kernel> = LazyLock::new(|| {
    builtin("cf_fault")
        .host(|_, a| {
            let addr: u64 = a.scalar(0);
            panic!("illegal address: write to {addr:#x}");
        })
        .build()
});

/// Launch the empty kernel (one block of one thread).
#[track_caller]
pub fn empty(s: &Stream) -> Result<()> {
    s.launch(&EMPTY, LaunchConfig::new(1, 1), KernelArgs::new())
}

/// Fill `buf` with `value`.
#[track_caller]
pub fn fill(s: &Stream, buf: &DeviceBuffer<f32>, value: f32) -> Result<()> {
    s.launch(
        &FILL_F32,
        LaunchConfig::for_elements(buf.len(), BLOCK),
        KernelArgs::new()
            .write(buf)
            .scalar(value)
            .scalar(buf.len() as u64),
    )
}

/// Multiply every element of `buf` by `factor`.
#[track_caller]
pub fn scale(s: &Stream, buf: &DeviceBuffer<f32>, factor: f32) -> Result<()> {
    s.launch(
        &SCALE_F32,
        LaunchConfig::for_elements(buf.len(), BLOCK),
        KernelArgs::new()
            .write(buf)
            .scalar(factor)
            .scalar(buf.len() as u64),
    )
}

/// `y = a * x + y` (fused), element-wise. `x` and `y` must have equal lengths.
#[track_caller]
pub fn saxpy(s: &Stream, a: f32, x: &DeviceBuffer<f32>, y: &DeviceBuffer<f32>) -> Result<()> {
    if x.len() != y.len() {
        return Err(crate::error::Error::InvalidArgument {
            kernel: "cf_saxpy_f32".into(),
            why: format!("x has {} elements but y has {}", x.len(), y.len()),
        });
    }
    let (xr, yr) = (x.byte_range(), y.byte_range());
    if x.overlaps(y) && xr != yr {
        return Err(crate::error::Error::InvalidArgument {
            kernel: "cf_saxpy_f32".into(),
            why: format!(
                "x (bytes {:?}) and y (bytes {:?}) overlap without being the same elements: \
                 threads would read what other threads write",
                xr, yr
            ),
        });
    }
    s.launch(
        &SAXPY_F32,
        LaunchConfig::for_elements(y.len(), BLOCK),
        KernelArgs::new()
            .write(y)
            .read(x)
            .scalar(a)
            .scalar(y.len() as u64),
    )
}

/// Apply `iters` steps of `x = fma(x, 0.999, 0.001)` to every element: cost scales with `iters`.
#[track_caller]
pub fn compute(s: &Stream, buf: &DeviceBuffer<f32>, iters: u32) -> Result<()> {
    s.launch(
        &COMPUTE_F32,
        LaunchConfig::for_elements(buf.len(), BLOCK),
        KernelArgs::new()
            .write(buf)
            .scalar(iters)
            .scalar(buf.len() as u64),
    )
}

/// The host-side reference of [`compute`] for one element.
pub fn compute_reference(mut x: f32, iters: u32) -> f32 {
    let (m, c) = COMPUTE_STEP;
    for _ in 0..iters {
        x = x.mul_add(m, c);
    }
    x
}

/// A kernel of `blocks` blocks that each busy-wait `duration` (one thread per block).
#[track_caller]
pub fn spin(s: &Stream, duration: Duration, blocks: u32) -> Result<()> {
    s.launch(
        &SPIN_NS,
        LaunchConfig::new(blocks.max(1), 1),
        KernelArgs::new().scalar(duration.as_nanos() as u64),
    )
}

/// A kernel that waits until `flag[0] == value`, and faults after `timeout`.
#[track_caller]
pub fn wait_flag(
    s: &Stream,
    flag: &DeviceBuffer<u32>,
    value: u32,
    timeout: Duration,
) -> Result<()> {
    s.launch(
        &WAIT_FLAG,
        LaunchConfig::new(1, 32),
        KernelArgs::new()
            .atomic(flag)
            .scalar(value)
            .scalar(timeout.as_nanos() as u64),
    )
}

/// A kernel that sets `flag[0] = value`.
#[track_caller]
pub fn set_flag(s: &Stream, flag: &DeviceBuffer<u32>, value: u32) -> Result<()> {
    s.launch(
        &SET_FLAG,
        LaunchConfig::new(1, 32),
        KernelArgs::new().atomic(flag).scalar(value),
    )
}

/// A kernel that faults (illegal address), poisoning the device (KN2).
#[track_caller]
pub fn fault(s: &Stream) -> Result<()> {
    s.launch(
        &FAULT,
        LaunchConfig::new(1, 1),
        KernelArgs::new().scalar(0x10u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host kernel's loop (FMA instruction where the CPU has it) and the scalar reference
    /// (`f32::mul_add`, the C library's `fmaf` without the instruction) agree bit for bit, and
    /// both differ from the unfused multiply-then-add for some inputs (so FMA is really used).
    #[test]
    fn compute_tile_matches_reference_bit_for_bit() {
        let input: Vec<f32> = (0..4099)
            .map(|i| (i % 1000) as f32 * 0.001 + (i / 1000) as f32 * 1.7e-3)
            .collect();
        for iters in [1, 2, 7, 64] {
            let mut tile = input.clone();
            compute_tile(&mut tile, iters);
            let mut plain = input.clone();
            compute_steps(&mut plain, iters);
            for (i, &x) in input.iter().enumerate() {
                let want = compute_reference(x, iters);
                assert_eq!(
                    tile[i].to_bits(),
                    want.to_bits(),
                    "element {i}, {iters} steps"
                );
                assert_eq!(
                    plain[i].to_bits(),
                    want.to_bits(),
                    "element {i}, {iters} steps"
                );
            }
        }
        let (m, c) = COMPUTE_STEP;
        let unfused = |mut x: f32| {
            for _ in 0..7 {
                x = x * m + c;
            }
            x
        };
        assert!(input
            .iter()
            .any(|&x| unfused(x).to_bits() != compute_reference(x, 7).to_bits()));
    }
}

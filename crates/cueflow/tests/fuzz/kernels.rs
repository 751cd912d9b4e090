//! The kernels of the fuzzer's programs: the built-in ones (fill, scale, saxpy), and a few
//! CUDA C kernels given only as source — the host backend compiles them with its C compiler
//! (HK1), once per process and cached on disk (KC3) — among them the kernels that set the
//! conditions of conditional nodes (GR9).
//!
//! Every kernel uses one floating-point operation per result (no contraction is possible), so
//! the bits are the same on the host backend, on a GPU and in the model.

use std::sync::LazyLock;

use cueflow::{kernels, CompileOptions, Kernel, LaunchConfig, CONDITIONAL_CUDA_H};

use crate::program::{Loc, Work};

/// The CUDA C kernels. Buffers first, then scalars, as the launches below pass them.
pub const FUZZ_CU: &str = r#"
#include "cueflow_conditional.h"
extern "C" __global__ void fz_add(float* dst, const float* src, float c, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] + c;
}
extern "C" __global__ void fz_reverse(float* dst, const float* src, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[n - 1 - i];
}
// Blocks of 16 threads; n is a multiple of 16.
extern "C" __global__ void fz_block_reverse(float* dst, const float* src, unsigned n) {
  __shared__ float tile[16];
  unsigned t = threadIdx.x, i = blockIdx.x * 16 + t;
  tile[t] = src[i];
  __syncthreads();
  dst[i] = tile[15 - t];
}
extern "C" __global__ void fz_prefix(float* dst, unsigned n) {
  for (unsigned i = 1; i < n; ++i) dst[i] = dst[i] + dst[i - 1];
}
extern "C" __global__ void fz_cond_const(cudaGraphConditionalHandle h, unsigned v) {
  cudaGraphSetConditional(h, v);
}
// The condition from x[0]: 1 when positive (if, if/else, while); for a switch 0, 1, 2 or 5
// (no body) by range. NaN compares false everywhere: 0, or 5 for a switch.
extern "C" __global__ void fz_cond_from(const float* x, cudaGraphConditionalHandle h,
                                        unsigned sw) {
  float v = x[0];
  unsigned c = sw ? (v <= 0.0f ? 0u : v <= 2.0f ? 1u : v <= 4.0f ? 2u : 5u)
                  : (v > 0.0f ? 1u : 0u);
  cudaGraphSetConditional(h, c);
}
extern "C" __global__ void fz_while_step(unsigned* count, cudaGraphConditionalHandle h,
                                         unsigned limit) {
  unsigned c = ++count[0];
  cudaGraphSetConditional(h, c < limit ? 1u : 0u);
}
"#;

fn c_kernel(name: &str) -> Kernel {
    Kernel::new(name)
        .cuda_source(FUZZ_CU, name)
        .cuda_options(CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H))
        .build()
}

pub static ADD: LazyLock<Kernel> = LazyLock::new(|| c_kernel("fz_add"));
pub static REVERSE: LazyLock<Kernel> = LazyLock::new(|| c_kernel("fz_reverse"));
pub static BLOCK_REVERSE: LazyLock<Kernel> = LazyLock::new(|| c_kernel("fz_block_reverse"));
pub static PREFIX: LazyLock<Kernel> = LazyLock::new(|| c_kernel("fz_prefix"));
pub static COND_CONST: LazyLock<Kernel> = LazyLock::new(|| c_kernel("fz_cond_const"));
pub static COND_FROM: LazyLock<Kernel> = LazyLock::new(|| c_kernel("fz_cond_from"));
pub static WHILE_STEP: LazyLock<Kernel> = LazyLock::new(|| c_kernel("fz_while_step"));

/// A scalar kernel parameter.
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    F32(f32),
    U32(u32),
    U64(u64),
}

/// A kernel launch of a [`Work`]: the kernel, its shape, its buffers (written first, then
/// read) and its scalars, in parameter order.
pub struct KLaunch {
    pub kernel: &'static Kernel,
    pub cfg: LaunchConfig,
    pub bufs: Vec<(Loc, bool)>,
    pub scalars: Vec<Scalar>,
}

/// The launch of `w`, if it is a kernel.
pub fn launch_of(w: &Work) -> Option<KLaunch> {
    let elems = |l: Loc| LaunchConfig::for_elements(l.len(), kernels::BLOCK);
    let small = |l: Loc| LaunchConfig::for_elements(l.len(), 16);
    let n64 = |l: Loc| Scalar::U64(l.len() as u64);
    let n32 = |l: Loc| Scalar::U32(l.len() as u32);
    let k = |kernel: &'static Kernel, cfg, bufs, scalars| {
        Some(KLaunch {
            kernel,
            cfg,
            bufs,
            scalars,
        })
    };
    match *w {
        Work::Fill { dst, v } => k(
            &kernels::FILL_F32,
            elems(dst),
            vec![(dst, true)],
            vec![Scalar::F32(v as f32), n64(dst)],
        ),
        Work::Scale { dst, f } => k(
            &kernels::SCALE_F32,
            elems(dst),
            vec![(dst, true)],
            vec![Scalar::F32(f), n64(dst)],
        ),
        Work::Saxpy { a, x, y } => k(
            &kernels::SAXPY_F32,
            elems(y),
            vec![(y, true), (x, false)],
            vec![Scalar::F32(a), n64(y)],
        ),
        Work::AddC { dst, src, c } => k(
            &ADD,
            small(dst),
            vec![(dst, true), (src, false)],
            vec![Scalar::F32(c as f32), n32(dst)],
        ),
        Work::Reverse { dst, src } => k(
            &REVERSE,
            small(dst),
            vec![(dst, true), (src, false)],
            vec![n32(dst)],
        ),
        Work::BlockReverse { dst, src } => k(
            &BLOCK_REVERSE,
            LaunchConfig::new((dst.len() / 16) as u32, 16),
            vec![(dst, true), (src, false)],
            vec![n32(dst)],
        ),
        Work::Prefix { dst } => k(
            &PREFIX,
            LaunchConfig::new(1, 1),
            vec![(dst, true)],
            vec![n32(dst)],
        ),
        _ => None,
    }
}

/// The condition value `fz_cond_from` derives from `x` (`switch`: for a switch node).
pub fn cond_from(x: f32, switch: bool) -> u32 {
    if switch {
        if x <= 0.0 {
            0
        } else if x <= 2.0 {
            1
        } else if x <= 4.0 {
            2
        } else {
            5
        }
    } else {
        (x > 0.0) as u32
    }
}

//! The shape of the generated code for what makes it fast (the behaviour is tested in
//! `tests/cuda_c_lanes.rs`, against values computed independently, on both paths).

use super::plan;

const K1: &str =
    "extern \"C\" __global__ void k1(float* data, unsigned iters, unsigned long long n)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = data[i];
    for (unsigned k = 0; k < iters; ++k) x = __fmaf_rn(x, 0.999f, 0.001f);
    data[i] = x;
}";

const K4: &str = "extern \"C\" __global__ void k4(const float* in, float* out, unsigned iters, unsigned long long n)
{
    __shared__ float w[32];
    const unsigned t = threadIdx.x;
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + t;
    float x = i < n ? in[i] : 0.0f;
    for (unsigned k = 0; k < iters; ++k) x = __fmaf_rn(x, 0.999f, 0.001f);
    for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
    if ((t & 31) == 0) w[t >> 5] = x;
    __syncthreads();
    if (t < 32) {
        x = t < blockDim.x / 32 ? w[t] : 0.0f;
        if (t == 0) out[blockIdx.x] = x;
    }
}";

fn code(src: &str, entry: &str) -> String {
    let code = plan(src, entry, entry, &format!("&{entry}")).code;
    assert!(code.contains("CUEFLOW_LANES_ENTRY"), "{code}");
    code
}

/// The global index is recomputed in the thread loop that stores through it (an affine
/// index: a contiguous masked store), not read back from an array (a scalar store per lane).
#[test]
fn a_per_thread_index_is_recomputed() {
    let c = code(K1, "k1");
    assert!(!c.contains(" i_a"), "{c}");
    assert!(
        c.contains("i = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x);"),
        "{c}"
    );
    // The same in K4, through the copy of the thread index.
    let c = code(K4, "k4");
    assert!(!c.contains(" i_a"), "{c}");
}

/// Values of a chunk kept in a block-sized array (live across the barrier) go through a
/// chunk-sized copy for the chunk's run, which the compiler keeps in registers across the
/// uniform loop; the chunk's range facts let it see `cf_t0 + i` does not wrap.
#[test]
fn a_chunk_works_on_chunk_sized_copies() {
    let c = code(K4, "k4");
    let arr = c
        .lines()
        .find_map(|l| l.strip_suffix("[CF_MAXT];"))
        .and_then(|l| l.split_whitespace().last())
        .expect("a block-sized array")
        .to_string();
    assert!(c.contains(&format!("{arr}_c[CF_W];")), "{c}");
    assert!(
        c.contains(&format!("{arr}_c[cf_i] = ({arr} + cf_t0)[cf_i];")),
        "{c}"
    );
    assert!(
        c.contains(&format!("({arr} + cf_t0)[cf_i] = {arr}_c[cf_i];")),
        "{c}"
    );
    assert!(
        c.contains("if (cf_t0 >= CF_MAXT || cf_w > CF_W) __builtin_unreachable();"),
        "{c}"
    );
    assert!(
        c.contains("if (cf_n > CF_MAXT) __builtin_unreachable();"),
        "{c}"
    );
}

/// What is not recomputed: a value read from memory, one that divides by a variable, one
/// reading a name a local hides, one assigned again.
#[test]
fn only_per_thread_constants_are_recomputed() {
    let src = "extern \"C\" __global__ void f(const int* in, int* out, int n, int d)
{
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const int a = in[g];
    const int q = g / d;
    int m = g + 1;
    m += 2;
    __syncthreads();
    { int n = 2; const int h = g + n; __syncthreads(); out[g] = a + q + m + h; }
}";
    let c = code(src, "f");
    for kept in ["a_", "q_", "m_", "h_"] {
        assert!(
            c.contains(&format!(" {kept}")),
            "{kept} is kept in an array: {c}"
        );
    }
    assert!(!c.contains(" g_"), "{c}");
}

/// A call of a simple function of the block's indices (the built-ins' `cf_global_index`) is
/// recomputed through its lane clone; one that divides by its argument is not.
#[test]
fn simple_index_functions_are_recomputed() {
    let src = "static __device__ inline unsigned long long gidx()
{
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ inline int part(int a, int b) { return a / b; }
extern \"C\" __global__ void f(float* data, int d, unsigned iters, unsigned long long n)
{
    const unsigned long long i = gidx();
    const int p = part((int)threadIdx.x, d);
    if (i >= n) return;
    float x = data[i];
    for (unsigned k = 0; k < iters; ++k) x = __fmaf_rn(x, 0.999f, 0.001f);
    data[i] = x + p;
}";
    let c = code(src, "f");
    assert!(!c.contains(" i_a"), "{c}");
    assert!(c.contains("i = (gidx__cfl(threadIdx));"), "{c}");
    assert!(c.contains(" p_a"), "{c}");
}

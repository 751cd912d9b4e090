// Hand-vectorized AVX2+FMA references of the four kernels of tests/common/lanes_kernels.cu
// (from the project's research note on SIMT on SIMD: the same per-element operation order).
// The cuda_c_lanes example compiles this at run time with the machine's C++ compiler.
#include <stdint.h>
#include <math.h>
typedef unsigned long long ull;
#define BS 256
// (b) hand-vectorized AVX2+FMA versions of the same kernels (same per-element operation order).
#include <immintrin.h>
#include <string.h>
static const __m256 M = _mm256_set1_ps(0.999f), C = _mm256_set1_ps(0.001f);

// K1, the Rust closure's shape: tile = block, steps outside, elements inside (load/fma/store).
extern "C" void k1_closure(float* data, unsigned iters, ull n, unsigned nblocks) {
    for (unsigned b = 0; b < nblocks; ++b) {
        float* tile = data + (ull)b * BS;
        ull len = n - (ull)b * BS; if (len > BS) len = BS;
        if (len == BS) {
            for (unsigned k = 0; k < iters; ++k)
                for (unsigned j = 0; j < BS; j += 32) {
                    __m256 a0 = _mm256_loadu_ps(tile + j), a1 = _mm256_loadu_ps(tile + j + 8);
                    __m256 a2 = _mm256_loadu_ps(tile + j + 16), a3 = _mm256_loadu_ps(tile + j + 24);
                    _mm256_storeu_ps(tile + j, _mm256_fmadd_ps(a0, M, C));
                    _mm256_storeu_ps(tile + j + 8, _mm256_fmadd_ps(a1, M, C));
                    _mm256_storeu_ps(tile + j + 16, _mm256_fmadd_ps(a2, M, C));
                    _mm256_storeu_ps(tile + j + 24, _mm256_fmadd_ps(a3, M, C));
                }
        } else {
            for (unsigned k = 0; k < iters; ++k) for (ull j = 0; j < len; ++j) tile[j] = fmaf(tile[j], 0.999f, 0.001f);
        }
    }
}
// K1 register-blocked: 64 elements (8 ymm) in registers, steps inside: the FMA-throughput ceiling.
extern "C" void k1_reg(float* data, unsigned iters, ull n, unsigned nblocks) {
    ull total = (ull)nblocks * BS; if (total > n) total = n;
    ull j = 0;
    for (; j + 64 <= total; j += 64) {
        __m256 a[8];
        for (int q = 0; q < 8; ++q) a[q] = _mm256_loadu_ps(data + j + 8 * q);
        for (unsigned k = 0; k < iters; ++k)
            for (int q = 0; q < 8; ++q) a[q] = _mm256_fmadd_ps(a[q], M, C);
        for (int q = 0; q < 8; ++q) _mm256_storeu_ps(data + j + 8 * q, a[q]);
    }
    for (; j < total; ++j) { float x = data[j]; for (unsigned k = 0; k < iters; ++k) x = fmaf(x, 0.999f, 0.001f); data[j] = x; }
}
// K2: masked lanes, 32 lanes (4 ymm) at a time, loop to the max trip count of the 32.
extern "C" void k2_hand(float* data, const unsigned* cnt, ull n, unsigned nblocks) {
    ull total = (ull)nblocks * BS; if (total > n) total = n;
    const __m256 M2 = _mm256_set1_ps(1.001f), C2 = _mm256_set1_ps(0.002f), H = _mm256_set1_ps(0.5f);
    ull j = 0;
    for (; j + 32 <= total; j += 32) {
        __m256 x[4]; __m256i c[4]; unsigned mx = 0;
        for (int q = 0; q < 4; ++q) {
            x[q] = _mm256_loadu_ps(data + j + 8 * q);
            c[q] = _mm256_loadu_si256((const __m256i*)(cnt + j + 8 * q));
        }
        for (int q = 0; q < 32; ++q) mx = cnt[j + q] > mx ? cnt[j + q] : mx;
        for (unsigned k = 0; k < mx; ++k) {
            __m256i kk = _mm256_set1_epi32((int)k);
            for (int q = 0; q < 4; ++q) {
                __m256 act = _mm256_castsi256_ps(_mm256_cmpgt_epi32(c[q], kk)); // cnt < 2^31
                __m256 gt = _mm256_cmp_ps(x[q], H, _CMP_GT_OQ);
                __m256 y = _mm256_blendv_ps(_mm256_fmadd_ps(x[q], M2, C2), _mm256_fmadd_ps(x[q], M, C), gt);
                x[q] = _mm256_blendv_ps(x[q], y, act);
            }
        }
        for (int q = 0; q < 4; ++q) _mm256_storeu_ps(data + j + 8 * q, x[q]);
    }
    for (; j < total; ++j) {
        float x = data[j];
        for (unsigned k = 0; k < cnt[j]; ++k) x = x > 0.5f ? fmaf(x, 0.999f, 0.001f) : fmaf(x, 1.001f, 0.002f);
        data[j] = x;
    }
}
static inline void compute_block(const float* in, float* s, unsigned iters, ull base, ull n) {
    for (unsigned j = 0; j < BS; j += 64) {
        __m256 a[8];
        if (base + j + 64 <= n) for (int q = 0; q < 8; ++q) a[q] = _mm256_loadu_ps(in + base + j + 8 * q);
        else { float tmp[64]; for (int q = 0; q < 64; ++q) tmp[q] = base + j + q < n ? in[base + j + q] : 0.0f;
               for (int q = 0; q < 8; ++q) a[q] = _mm256_loadu_ps(tmp + 8 * q); }
        for (unsigned k = 0; k < iters; ++k)
            for (int q = 0; q < 8; ++q) a[q] = _mm256_fmadd_ps(a[q], M, C);
        for (int q = 0; q < 8; ++q) _mm256_storeu_ps(s + j + 8 * q, a[q]);
    }
}
// K3: compute in registers, then the same tree as the kernel (vector adds of halves; scalar for st < 8).
extern "C" void k3_hand(const float* in, float* out, unsigned iters, ull n, unsigned nblocks) {
    alignas(32) float s[BS];
    for (unsigned b = 0; b < nblocks; ++b) {
        compute_block(in, s, iters, (ull)b * BS, n);
        for (unsigned st = BS / 2; st >= 8; st >>= 1)
            for (unsigned j = 0; j < st; j += 8)
                _mm256_store_ps(s + j, _mm256_add_ps(_mm256_load_ps(s + j), _mm256_load_ps(s + j + st)));
        for (unsigned st = 4; st > 0; st >>= 1) for (unsigned t = 0; t < st; ++t) s[t] += s[t + st];
        out[b] = s[0];
    }
}
// K4: same as K3 but the shuffle tree: per warp v[l] += v[l+off] for off = 16..1, lane 0 kept.
extern "C" void k4_hand(const float* in, float* out, unsigned iters, ull n, unsigned nblocks) {
    alignas(32) float s[BS];
    for (unsigned b = 0; b < nblocks; ++b) {
        compute_block(in, s, iters, (ull)b * BS, n);
        float w[8];
        for (int wp = 0; wp < 8; ++wp) {
            float* v = s + 32 * wp;
            __m256 a0 = _mm256_add_ps(_mm256_load_ps(v), _mm256_load_ps(v + 16));
            __m256 a1 = _mm256_add_ps(_mm256_load_ps(v + 8), _mm256_load_ps(v + 24));
            __m256 a = _mm256_add_ps(a0, a1);                      // off = 8
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); // off = 4
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));                 // off = 2
            h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));             // off = 1
            w[wp] = _mm_cvtss_f32(h);
        }
        // second stage: lanes 8..31 are 0; off=16 and 8 add zeros
        __m256 a = _mm256_loadu_ps(w);
        a = _mm256_add_ps(a, _mm256_setzero_ps()); a = _mm256_add_ps(a, _mm256_setzero_ps());
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        out[b] = _mm_cvtss_f32(h);
    }
}

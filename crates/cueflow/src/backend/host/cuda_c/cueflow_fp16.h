// cueflow host prelude: half and bfloat16 types (cuda_fp16.h, cuda_bf16.h) for the CPU.
// Conversions from float round to nearest even, as __float2half / __float2bfloat16 do; half
// arithmetic is done in float and rounded once to half, which gives the IEEE half result for
// + - * / (float has more than twice half's precision); __hfma rounds through double.
#ifndef CUEFLOW_HOST_FP16_H
#define CUEFLOW_HOST_FP16_H

struct __half {
    _Float16 v;
    __half() = default;
    __half(float f) : v((_Float16)f) {}
    __half(double f) : v((_Float16)(float)f) {}
    __half(int i) : v((_Float16)(float)i) {}
    operator float() const { return (float)v; }
};
struct __align__(4) __half2 {
    __half x, y;
};
typedef __half half;
typedef __half2 half2;
static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return (float)h.v; }
static inline __half __int2half_rn(int i) { return __half((float)i); }
static inline int __half2int_rn(__half h) { return (int)nearbyintf((float)h.v); }
static inline unsigned short __half_as_ushort(__half h) { unsigned short u; memcpy(&u, &h, 2); return u; }
static inline __half __ushort_as_half(unsigned short u) { __half h; memcpy(&h, &u, 2); return h; }
static inline short __half_as_short(__half h) { short u; memcpy(&u, &h, 2); return u; }
static inline __half __short_as_half(short u) { __half h; memcpy(&h, &u, 2); return h; }
static inline __half __hadd(__half a, __half b) { return __half((float)a + (float)b); }
static inline __half __hsub(__half a, __half b) { return __half((float)a - (float)b); }
static inline __half __hmul(__half a, __half b) { return __half((float)a * (float)b); }
static inline __half __hdiv(__half a, __half b) { return __half((float)a / (float)b); }
static inline __half __hneg(__half a) { return __half(-(float)a); }
static inline __half __habs(__half a) { return __half(fabsf((float)a)); }
static inline __half __hfma(__half a, __half b, __half c)
{
    return __half((float)__builtin_fma((double)(float)a, (double)(float)b, (double)(float)c));
}
static inline bool __heq(__half a, __half b) { return (float)a == (float)b; }
static inline bool __hne(__half a, __half b) { return (float)a != (float)b; }
static inline bool __hlt(__half a, __half b) { return (float)a < (float)b; }
static inline bool __hle(__half a, __half b) { return (float)a <= (float)b; }
static inline bool __hgt(__half a, __half b) { return (float)a > (float)b; }
static inline bool __hge(__half a, __half b) { return (float)a >= (float)b; }
static inline bool __hisnan(__half a) { return (float)a != (float)a; }
static inline __half hsqrt(__half a) { return __half(sqrtf((float)a)); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
static inline __half2 __float2half2_rn(float f) { return __half2{__half(f), __half(f)}; }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
static inline __half2 __float22half2_rn(float2 f) { return __half2{__half(f.x), __half(f.y)}; }
static inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }
static inline __half2 __hadd2(__half2 a, __half2 b) { return __half2{__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
static inline __half2 __hsub2(__half2 a, __half2 b) { return __half2{__hsub(a.x, b.x), __hsub(a.y, b.y)}; }
static inline __half2 __hmul2(__half2 a, __half2 b) { return __half2{__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c)
{
    return __half2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}

struct __nv_bfloat16 {
    unsigned short bits;
};
typedef __nv_bfloat16 nv_bfloat16;
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline __nv_bfloat16 __float2bfloat16(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (unsigned short)((u >> 16) | 0x40); // quiet NaN
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even
    r.bits = (unsigned short)(u >> 16);
    return r;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 b)
{
    unsigned u = (unsigned)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b)
{
    return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}
static inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b)
{
    return __float2bfloat16(__bfloat162float(a) * __bfloat162float(b));
}

#endif

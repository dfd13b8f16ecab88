/* What the GGUF block kernels (linear_gguf.c, linear_gguf_k.c, gguf_k23.c, gguf_half.c,
 * gguf_decode.c, linear_gguf_f32.c) share: the formats, the f16 reader, the K-quant scale
 * unpacking and bit shifts, the unsigned x signed byte dot product, a horizontal sum, and
 * the entries between the files. */
#ifndef TANDEM_GGUF_COMMON_H
#define TANDEM_GGUF_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tandem_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define GGUF_SIMD 1
#else
#define GGUF_SIMD 0
#endif

#define QK 32    /* values per block of x (and of Q8_0 / Q4_0 / Q4_1) */
#define QK_K 256 /* values per K-quant super-block */

enum {
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    BF16 = 30
};

/* Whether ``type`` is a K-quant (super-blocks of 256 values), a 16-bit float (F16, BF16:
 * one value a "block", x kept in fp32), or else a format of 32-value blocks */
static inline int is_kquant(int type)
{
    return type == Q2_K || type == Q3_K || type == Q4_K || type == Q5_K || type == Q6_K;
}

static inline int is_half(int type) { return type == F16 || type == BF16; }

/* Values per block of ``type``: 256, 1 or 32 */
static inline int64_t block_values(int type)
{
    return is_kquant(type) ? QK_K : is_half(type) ? 1 : QK;
}

static inline float half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
#if GGUF_SIMD
    return _cvtsh_ss(h);
#else
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const float v = e == 0    ? ldexpf((float)m, -24)
                    : e == 31 ? (m ? NAN : INFINITY)
                              : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
#endif
}

/* The 6-bit scale and min of K-quant sub-block j (0..7) from the 12 packed bytes. */
static inline void scale_min(const uint8_t *p, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = p[j] & 63;
        *m = p[j + 4] & 63;
    } else {
        *sc = (p[j + 4] & 15) | ((p[j - 4] >> 6) << 4);
        *m = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
    }
}

/* Where element i of block b lies in a row of x quantized for the 4/5-bit blocks (nb
 * blocks): blocks in pairs, a pair stored as [b0 0-15][b1 0-15][b0 16-31][b1 16-31] so
 * that the two blocks' low and high nibbles meet x in one register each
 * (linear_gguf_rows.c); an odd last block as it is. */
static inline int64_t paired(int64_t b, int i, int64_t nb)
{
    if ((b | 1) >= nb)
        return b * QK + i;
    return (b & ~(int64_t)1) * QK + i / 16 * 32 + (b & 1) * 16 + i % 16;
}

/* A bf16 value as fp32: its 16 bits are the float's top half */
static inline float bf16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    const uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

#if GGUF_SIMD
/* 8 int32 sums of 4 adjacent u * s byte products (lane i: bytes 4i .. 4i + 3) */
static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

static inline float hsum(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* v shifted left by n (right by -n) in 16-bit lanes: a K-quant's high-bit bytes moved so
 * that the bit wanted lands on one bit of each byte (linear_gguf_k.c, gguf_k23.h) */
static inline __m256i up(__m256i v, int n)
{
    return n > 0 ? _mm256_slli_epi16(v, n) : n < 0 ? _mm256_srli_epi16(v, -n) : v;
}
#endif

#if GGUF_SIMD
/* 32 bytes q (as 8-bit ints, signed when ``sgn``) -> o[i] = d[h] * q[i] + m[h], h = i / 16:
 * a block's codes widened to fp32, one multiply-add per eight values (gguf_decode.c,
 * gguf_k23.c) */
static inline __attribute__((always_inline)) void bytes_to_f32(__m256i q, int sgn,
                                                               const float d[2],
                                                               const float m[2], float *o)
{
    const __m128i half[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    for (int h = 0; h < 2; h++) {
        const __m256 dv = _mm256_set1_ps(d[h]), mv = _mm256_set1_ps(m[h]);
        const __m128i lo = half[h], hi = _mm_unpackhi_epi64(lo, lo);
        const __m256i a = sgn ? _mm256_cvtepi8_epi32(lo) : _mm256_cvtepu8_epi32(lo);
        const __m256i b = sgn ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi);
        _mm256_storeu_ps(o + 16 * h, _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(a), mv));
        _mm256_storeu_ps(o + 16 * h + 8, _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(b), mv));
    }
}
#endif

/* One weight row of K values in its blocks of ``type`` -> out[0..K-1] fp32 (gguf_decode.c) */
__attribute__((visibility("hidden"))) void tandem_gguf_decode_row(int type, const uint8_t *w,
                                                                 int64_t K, float *out);

/* n <= 8 weight rows of 32-value blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; w + i * row)
 * against R <= 4 rows of the quantized x (xq [R, K], 4/5-bit blocks in the paired layout;
 * xd, xs [R, K / 32]): out[r * ldo + i] (linear_gguf_rows.c, linear_gguf_q8.c). */
__attribute__((visibility("hidden"))) void
tandem_gguf_rows(int type, int R, const uint8_t *w, int n, int64_t row, const int8_t *xq,
                 const float *xd, const float *xs, int64_t K, float *out, int64_t ldo);

/* W K-quant weight rows (w + v * row; K / 256 super-blocks of ``type``, Q2_K to Q6_K)
 * against R rows of the quantized x (xq [R, K], xd, xs and xh [R, K / 32]): out[r * ldo +
 * v]. W is 1 (R <= 4) or, for Q4_K to Q6_K, 2 (R <= 2) (linear_gguf_k.c). */
__attribute__((visibility("hidden"))) void
tandem_gguf_k_rows(int type, int R, int W, const uint8_t *w, int64_t row, const int8_t *xq,
                   const float *xd, const float *xs, const float *xh, int64_t K, float *out,
                   int64_t ldo);

/* One Q2_K / Q3_K row of K values -> out[0..K-1] fp32 (gguf_k23.c) */
__attribute__((visibility("hidden"))) void tandem_gguf_k23_decode_row(int type, const uint8_t *w,
                                                                     int64_t K, float *out);

/* n <= 8 F16 / BF16 weight rows (w + i * row) against R <= 4 rows of x kept in fp32
 * (x [R, K]): out[r * ldo + i] (gguf_half.c) */
__attribute__((visibility("hidden"))) void tandem_gguf_half_rows(int type, int R,
                                                                const uint8_t *w, int n,
                                                                int64_t row, const float *x,
                                                                int64_t K, float *out,
                                                                int64_t ldo);

/* One F16 / BF16 row of K values -> out[0..K-1] fp32 (gguf_half.c) */
__attribute__((visibility("hidden"))) void tandem_gguf_half_decode_row(int type,
                                                                      const uint8_t *w,
                                                                      int64_t K, float *out);

#endif

/* What the vector rows of the 32-value blocks share (linear_gguf_rows.c: Q4_0, Q4_1, Q5_0,
 * Q5_1; linear_gguf_q8.c: Q8_0): the block sizes, the prefetch distance, the gathered f16
 * scales, the pair-folding of int32 sums and the band's last sums. linear_gguf_rows.c
 * describes how the loops spend their instructions.
 */
#ifndef TANDEM_GGUF_ROWS_H
#define TANDEM_GGUF_ROWS_H

#include "gguf_common.h"

#if GGUF_SIMD
#define RB 4
/* weights are prefetched this many bytes ahead: the hardware prefetcher alone leaves the
 * row loop waiting on memory part of the time (one thread, 1-2 KB: 10-25% faster) */
#define AHEAD 2048
#define BLOCK_BYTES(t)                                                                         \
    ((t) == Q8_0 ? 34 : (t) == Q4_0 ? 18 : (t) == Q4_1 ? 20 : (t) == Q5_0 ? 22 : 24)

/* the halves at p, p + bb, p + 2 bb, p + 3 bb as one 64-bit word */
static inline uint64_t halves4(const uint8_t *p, int64_t bb)
{
    uint16_t a, b, c, d;
    memcpy(&a, p, 2);
    memcpy(&b, p + bb, 2);
    memcpy(&c, p + 2 * bb, 2);
    memcpy(&d, p + 3 * bb, 2);
    return (uint64_t)a | (uint64_t)b << 16 | (uint64_t)c << 32 | (uint64_t)d << 48;
}

/* The f16 values at p, p + bb, p + 2 bb, p + 3 bb (four blocks' scales) as fp32: d0-d3 in
 * both halves */
static inline __attribute__((always_inline)) __m256 halves4x2(const uint8_t *p,
                                                              int64_t bb)
{
    const __m128i h = _mm_cvtsi64_si128((long long)halves4(p, bb));
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(h, h));
}

/* The prefetch of a step of four blocks (block b on, bb bytes each) of W weight rows
 * (w + u * row): as many bytes as the step reads, AHEAD on, swept from the last row at
 * the pace of all W (linear_gguf_k.c's) */
static inline __attribute__((always_inline)) void prefetch4(const uint8_t *w, int W,
                                                            int64_t row, int64_t b,
                                                            int64_t bb)
{
    for (int64_t o = 0; o < W * 4 * bb; o += 64)
        _mm_prefetch((const char *)w + (W - 1) * row + W * b * bb + AHEAD + o, _MM_HINT_T0);
}

/* Two 8-lane int32 vectors a, b -> per 4-lane half [a0+a2, b0+b2, a1+a3, b1+b3]: folding
 * (a, c) and (b, d), then the two results, leaves lane j of each half with block j's
 * partial sum, so one conversion and one multiply-add take four blocks. */
static inline __m256i fold(__m256i a, __m256i b)
{
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}

/* The scale vector of blocks b .. b + 3 of a row of x (d8: their weight scales d0-d3 in
 * both halves): [d0 xd0 .. d3 xd3] in both halves. */
static inline __m256 scales4(__m256 d8, const float *xd)
{
    return _mm256_mul_ps(d8, _mm256_broadcast_ps((const __m128 *)xd));
}

/* The f16 values at p and p + bb as fp32 in lanes 0-1 of both halves (a pair's scales) */
static inline __m256 halves2(const uint8_t *p, int64_t bb)
{
    uint16_t d0, d1;
    memcpy(&d0, p, 2);
    memcpy(&d1, p + bb, 2);
    const __m128i h = _mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16));
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(h, h));
}

/* the two floats at p in lanes 0-1, lanes 2-3 zero */
static inline __m128 two_floats(const float *p)
{
    return _mm_castpd_ps(_mm_load_sd((const double *)p));
}

/* eight vectors -> one: lane i the sum of v[i]'s lanes */
static inline __m256 sum8(const __m256 *v)
{
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

/* A band's row vectors v[r][0..n-1] (lanes summing to out[r * ldo + i]) -> out */
static inline __attribute__((always_inline)) void band_out(int R, __m256 v[][8], int n,
                                                           float *out, int64_t ldo)
{
    for (int r = 0; r < R; r++) {
        for (int i = n; i < 8; i++)
            v[r][i] = _mm256_setzero_ps();
        const __m256 sums = sum8(v[r]);
        if (n == 8) {
            _mm256_storeu_ps(out + r * ldo, sums);
        } else {
            float keep[8];
            _mm256_storeu_ps(keep, sums);
            memcpy(out + r * ldo, keep, sizeof(float) * (size_t)n);
        }
    }
}

/* Q8_0 weight rows against R rows of x, as tandem_gguf_rows (linear_gguf_q8.c) */
__attribute__((visibility("hidden"))) void tandem_gguf_q8_rows(int R, const uint8_t *w, int n,
                                                              int64_t row, const int8_t *xq,
                                                              const float *xd, int64_t K,
                                                              float *out, int64_t ldo);
#endif

#endif

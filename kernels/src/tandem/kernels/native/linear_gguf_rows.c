/* The 32-value block rows of linear_gguf.c (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): one weight row
 * against up to four rows of the quantized x (xq, xd, xs as there).
 *
 * At decode a layer is 10-100 us of streamed weight bytes, and a 4-bit block is 18-24
 * bytes: the loop must spend only a few vector instructions on a block, or it, not the
 * memory, sets the pace. So blocks go four at a time:
 *   - the four f16 scales are gathered with integer loads into one 64-bit word (integer
 *     ports, idle here), converted once, times the four xd at once: one scale vector;
 *   - 4/5-bit blocks go in pairs. x's 4/5-bit layout (linear_gguf.c) stores a pair of
 *     blocks as [b0 0-15][b1 0-15][b0 16-31][b1 16-31], so the nibbles of two blocks,
 *     loaded into one register, are a low-nibble and a high-nibble vector that meet x
 *     directly; their byte products are added in int16 (at most 2 * 2 * 31 * 127, no
 *     saturation) and widened once: lanes 0-3 block b0, 4-7 block b1;
 *   - Q8_0's four int32 product vectors are folded into one (lane j: block j % 4), so a
 *     conversion and a multiply-add serve four blocks;
 *   - the offset terms (Q4_0, Q5_0: -8 or -16 * d, Q4_1, Q5_1: m, times xs) take four
 *     blocks in one 4-lane multiply-add and are summed once per row.
 * Each row of x runs the same instructions in the same order whatever the row count, so
 * a row's result does not depend on its batch. Blocks past a multiple of four take the
 * same sums one pair or block at a time. Without AVX2, linear_gguf_plain.c.
 */
#include "tandem_kernels.h"
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

/* 0x10 in byte j where bit j % 8 of byte ``from[j]`` of hb's 128-bit half is set, else 0 */
static inline __m256i sixteens(__m256i hb, __m256i from)
{
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i got = _mm256_and_si256(_mm256_shuffle_epi8(hb, from), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(got, bit), _mm256_set1_epi8(0x10));
}

/* The unsigned codes of two 4/5-bit blocks at p0, p1 (their d first): lo = elements 0-15
 * of each (lanes: block 0, block 1), hi = elements 16-31. */
static inline __attribute__((always_inline)) void codes2(int type, const uint8_t *p0,
                                                         const uint8_t *p1, __m256i *lo,
                                                         __m256i *hi)
{
    const int five = type == Q5_0 || type == Q5_1, at = (type == Q4_0 || type == Q5_0) ? 2 : 4;
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i raw = _mm256_loadu2_m128i((const __m128i *)(p1 + at + 4 * five),
                                            (const __m128i *)(p0 + at + 4 * five));
    *lo = _mm256_and_si256(raw, low);
    *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
    if (five) { /* bit j of a block's hb -> 0x10 in its element j */
        int32_t h0, h1;
        memcpy(&h0, p0 + at, 4);
        memcpy(&h1, p1 + at, 4);
        const __m256i hb =
            _mm256_blend_epi32(_mm256_set1_epi32(h0), _mm256_set1_epi32(h1), 0xF0);
        const long long b0 = 0, b1 = 0x0101010101010101LL;
        *lo = _mm256_or_si256(*lo, sixteens(hb, _mm256_setr_epi64x(b0, b1, b0, b1)));
        const __m256i b23 = _mm256_setr_epi64x(2 * b1, 3 * b1, 2 * b1, 3 * b1);
        *hi = _mm256_or_si256(*hi, sixteens(hb, b23));
    }
}

/* int32 sums of a pair's byte products: lanes 0-3 block 0, 4-7 block 1 */
static inline __m256i dot2(__m256i lo, __m256i hi, const int8_t *x)
{
    const __m256i a = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)x));
    const __m256i b = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x + 32)));
    return _mm256_madd_epi16(_mm256_add_epi16(a, b), _mm256_set1_epi16(1));
}

/* int32 sums of one Q8_0 block's products (8 lanes) */
static inline __m256i dot8(const uint8_t *blk, const int8_t *x)
{
    const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m256i xv = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x), w);
    return dot_u8s8(_mm256_sign_epi8(w, w), xv);
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

/* One weight row against R rows of x: v[r], whose lanes sum to the row's result. */
static inline __attribute__((always_inline)) void row_simd(int type, int R, const uint8_t *w,
                                                           int64_t nb, const int8_t *xq,
                                                           const float *xd, const float *xs,
                                                           int64_t K, __m256 *v)
{
    const int64_t bb = BLOCK_BYTES(type);
    const int sym = type == Q4_0 || type == Q5_0 || type == Q8_0, q8 = type == Q8_0;
    __m256 acc[RB][2];
    __m128 extra[RB];
    for (int r = 0; r < R; r++) {
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        extra[r] = _mm_setzero_ps();
    }
    const __m256i pick01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i pick23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const uint8_t *p = w + b * bb;
        for (int64_t o = 0; o < 4 * bb; o += 64) /* this step's bytes, AHEAD on */
            _mm_prefetch((const char *)p + AHEAD + o, _MM_HINT_T0);
        const __m128i h = _mm_cvtsi64_si128((long long)halves4(p, bb));
        const __m256 d8 = _mm256_cvtph_ps(_mm_unpacklo_epi64(h, h)); /* d0-d3, twice */
        if (q8) {
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + r * K + b * QK;
                const __m256i f = fold(fold(dot8(p, x), dot8(p + 2 * bb, x + 2 * QK)),
                                       fold(dot8(p + bb, x + QK), dot8(p + 3 * bb, x + 3 * QK)));
                acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), scales4(d8, xd + r * nb + b),
                                            acc[r][0]);
            }
            continue;
        }
        const __m128 m4 = sym ? _mm256_castps256_ps128(d8)
                              : _mm_cvtph_ps(_mm_cvtsi64_si128((long long)halves4(p + 2, bb)));
        __m256i lo0, hi0, lo1, hi1;
        codes2(type, p, p + bb, &lo0, &hi0);
        codes2(type, p + 2 * bb, p + 3 * bb, &lo1, &hi1);
        for (int r = 0; r < R; r++) {
            const int8_t *x = xq + r * K + b * QK;
            const __m256 s = scales4(d8, xd + r * nb + b);
            acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot2(lo0, hi0, x)),
                                        _mm256_permutevar_ps(s, pick01), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot2(lo1, hi1, x + 2 * QK)),
                                        _mm256_permutevar_ps(s, pick23), acc[r][1]);
            extra[r] = _mm_fmadd_ps(m4, _mm_loadu_ps(xs + r * nb + b), extra[r]);
        }
    }
    if (b + 2 <= nb) { /* a pair left: the same sums, two blocks wide */
        const uint8_t *p = w + b * bb;
        uint16_t d0, d1;
        memcpy(&d0, p, 2);
        memcpy(&d1, p + bb, 2);
        const __m128i h = _mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16));
        const __m256 d8 = _mm256_cvtph_ps(_mm_unpacklo_epi64(h, h));
        __m128 m4 = _mm256_castps256_ps128(d8);
        __m256i lo = _mm256_setzero_si256(), hi = lo;
        if (!q8) {
            codes2(type, p, p + bb, &lo, &hi);
            if (!sym) {
                memcpy(&d0, p + 2, 2);
                memcpy(&d1, p + 2 + bb, 2);
                m4 = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16)));
            }
        }
        for (int r = 0; r < R; r++) {
            const int8_t *x = xq + r * K + b * QK;
            const __m128 xd2 = _mm_castpd_ps(_mm_load_sd((const double *)(xd + r * nb + b)));
            const __m256 s = _mm256_mul_ps(d8, _mm256_set_m128(xd2, xd2)); /* as scales4 */
            if (q8) {
                const __m256i f = fold(dot8(p, x), dot8(p + bb, x + QK)); /* b0 b1 b0 b1 */
                acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), _mm256_permute_ps(s, 0x44),
                                            acc[r][0]);
                continue;
            }
            const __m128 xs2 = _mm_castpd_ps(_mm_load_sd((const double *)(xs + r * nb + b)));
            acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot2(lo, hi, x)),
                                        _mm256_permutevar_ps(s, pick01), acc[r][0]);
            extra[r] = _mm_fmadd_ps(m4, xs2, extra[r]);
        }
        b += 2;
    }
    if (b < nb) { /* an odd last block, stored as it is */
        const uint8_t *p = w + b * bb;
        const float d = half(p), m = sym ? d : half(p + 2);
        __m256i u = _mm256_setzero_si256();
        if (!q8) {
            __m256i lo, hi;
            codes2(type, p, p, &lo, &hi); /* both halves this block */
            u = _mm256_permute2x128_si256(lo, hi, 0x20);
        }
        for (int r = 0; r < R; r++) {
            const int8_t *x = xq + r * K + b * QK;
            const __m256i dot =
                q8 ? dot8(p, x) : dot_u8s8(u, _mm256_loadu_si256((const __m256i *)x));
            const __m256 s = _mm256_set1_ps(d * xd[r * nb + b]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, acc[r][1]);
            extra[r] = _mm_add_ss(extra[r], _mm_set_ss(m * xs[r * nb + b]));
        }
    }
    const __m256 off = _mm256_set1_ps(type == Q4_0 ? -8.0f : type == Q5_0 ? -16.0f : 1.0f);
    for (int r = 0; r < R; r++) {
        const __m256 e = q8 ? _mm256_setzero_ps() : _mm256_zextps128_ps256(extra[r]);
        v[r] = _mm256_fmadd_ps(off, e, _mm256_add_ps(acc[r][0], acc[r][1]));
    }
}

/* eight vectors -> one: lane i the sum of v[i]'s lanes */
static inline __m256 sum8(const __m256 *v)
{
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

/* Weight rows w + i * row (i < n <= 8) against R rows of x: out[r * ldo + i]. */
static inline __attribute__((always_inline)) void band_simd(int type, int R, const uint8_t *w,
                                                            int n, int64_t row,
                                                            const int8_t *xq, const float *xd,
                                                            const float *xs, int64_t K,
                                                            float *out, int64_t ldo)
{
    __m256 v[RB][8], t[RB];
    for (int i = 0; i < n; i++) {
        row_simd(type, R, w + i * row, K / QK, xq, xd, xs, K, t);
        for (int r = 0; r < R; r++)
            v[r][i] = t[r];
    }
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
#define CASE(T, R)                                                                             \
    case (T) * 8 + (R):                                                                        \
        band_simd((T), (R), w, n, row, xq, xd, xs, K, out, ldo);                               \
        return;
#define CASES(T) CASE(T, 1) CASE(T, 2) CASE(T, 3) CASE(T, 4)

void tandem_gguf_rows(int type, int R, const uint8_t *w, int n, int64_t row, const int8_t *xq,
                      const float *xd, const float *xs, int64_t K, float *out, int64_t ldo)
{
    switch (type * 8 + R) {
        CASES(Q4_0)
        CASES(Q4_1)
        CASES(Q5_0)
        CASES(Q5_1)
        CASES(Q8_0)
    default:
        return;
    }
}
#endif

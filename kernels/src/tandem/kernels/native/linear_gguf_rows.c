/* The 4/5-bit block rows of linear_gguf.c (Q4_0, Q4_1, Q5_0, Q5_1; Q8_0's in
 * linear_gguf_q8.c): W weight rows (one, or two where x has at most two rows) against up
 * to four rows of the quantized x (xq, xd, xs as there).
 *
 * At decode a layer is 10-100 us of streamed weight bytes, and a 4-bit block is 18-24
 * bytes: the loop must spend only a few vector instructions on a block, or it, not the
 * memory, sets the pace. So blocks go four at a time:
 *   - the four f16 scales are gathered with integer loads into one 64-bit word (integer
 *     ports, idle here), converted once, times the four xd at once: one scale vector;
 *   - blocks go in pairs. x's 4/5-bit layout (linear_gguf.c) stores a pair of blocks as
 *     [b0 0-15][b1 0-15][b0 16-31][b1 16-31], so the nibbles of two blocks, loaded into
 *     one register, are a low-nibble and a high-nibble vector that meet x directly; their
 *     byte products are added in int16 (at most 2 * 2 * 31 * 127, no saturation) and
 *     widened once: lanes 0-3 block b0, 4-7 block b1;
 *   - the offset terms (Q4_0, Q5_0: -8 or -16 * d, Q4_1, Q5_1: m, times xs) take four
 *     blocks in one 4-lane multiply-add and are summed once per row.
 * Two weight rows at a time at decode: a row's step is a dependent run (unpack, the 5th
 * bits, byte products, convert, multiply-add), and the second row's independent run fills
 * the vector units while the first one's waits. Each weight row and row of x runs the
 * same instructions in the same order whatever W and the row count, so a row's result
 * does not depend on its batch. Blocks past a multiple of four take the same sums one
 * pair or block at a time. Without AVX2, linear_gguf_plain.c.
 */
#include "tandem_kernels.h"
#include "gguf_rows.h"

#if GGUF_SIMD
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

/* W weight rows (w + u * row) against R rows of x: v[u * R + r], whose lanes sum to the
 * result; the prefetch sweeps from the last row at the pace of all W (linear_gguf_k.c) */
static inline __attribute__((always_inline)) void
row_simd(int type, int R, int W, const uint8_t *w, int64_t row, int64_t nb, const int8_t *xq,
         const float *xd, const float *xs, int64_t K, __m256 *v)
{
    const int64_t bb = BLOCK_BYTES(type);
    const int sym = type == Q4_0 || type == Q5_0;
    __m256 acc[2 * RB][2];
    __m128 extra[2 * RB];
    for (int t = 0; t < W * R; t++) {
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
        extra[t] = _mm_setzero_ps();
    }
    const __m256i pick01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i pick23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        prefetch4(w, W, row, b, bb);
        for (int u = 0; u < W; u++) {
            const uint8_t *p = w + u * row + b * bb;
            const __m256 d8 = halves4x2(p, bb); /* d0-d3, twice */
            const __m128 m4 = sym ? _mm256_castps256_ps128(d8)
                                  : _mm_cvtph_ps(_mm_cvtsi64_si128((long long)halves4(p + 2, bb)));
            __m256i lo0, hi0, lo1, hi1;
            codes2(type, p, p + bb, &lo0, &hi0);
            codes2(type, p + 2 * bb, p + 3 * bb, &lo1, &hi1);
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + r * K + b * QK;
                const __m256 s = scales4(d8, xd + r * nb + b);
                const int t = u * R + r;
                acc[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot2(lo0, hi0, x)),
                                            _mm256_permutevar_ps(s, pick01), acc[t][0]);
                acc[t][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot2(lo1, hi1, x + 2 * QK)),
                                            _mm256_permutevar_ps(s, pick23), acc[t][1]);
                extra[t] = _mm_fmadd_ps(m4, _mm_loadu_ps(xs + r * nb + b), extra[t]);
            }
        }
    }
    for (int u = 0; u < W; u++) {
        const uint8_t *p = w + u * row + b * bb;
        if (b + 2 <= nb) { /* a pair left: the same sums, two blocks wide */
            const __m256 d8 = halves2(p, bb);
            const __m128 m4 = sym ? _mm256_castps256_ps128(d8)
                                  : _mm256_castps256_ps128(halves2(p + 2, bb));
            __m256i lo, hi;
            codes2(type, p, p + bb, &lo, &hi);
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + r * K + b * QK;
                const __m128 xd2 = two_floats(xd + r * nb + b);
                const __m256 s = _mm256_mul_ps(d8, _mm256_set_m128(xd2, xd2)); /* scales4 */
                const int t = u * R + r;
                acc[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot2(lo, hi, x)),
                                            _mm256_permutevar_ps(s, pick01), acc[t][0]);
                extra[t] = _mm_fmadd_ps(m4, two_floats(xs + r * nb + b), extra[t]);
            }
        }
        const int64_t e = b + 2 <= nb ? b + 2 : b;
        if (e < nb) { /* an odd last block, stored as it is */
            const uint8_t *q = p + (e - b) * bb;
            const float d = half(q), m = sym ? d : half(q + 2);
            __m256i lo, hi;
            codes2(type, q, q, &lo, &hi); /* both halves this block */
            const __m256i codes = _mm256_permute2x128_si256(lo, hi, 0x20);
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + r * K + e * QK;
                const __m256i dot = dot_u8s8(codes, _mm256_loadu_si256((const __m256i *)x));
                const __m256 s = _mm256_set1_ps(d * xd[r * nb + e]);
                const int t = u * R + r;
                acc[t][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, acc[t][1]);
                extra[t] = _mm_add_ss(extra[t], _mm_set_ss(m * xs[r * nb + e]));
            }
        }
    }
    const __m256 off = _mm256_set1_ps(type == Q4_0 ? -8.0f : type == Q5_0 ? -16.0f : 1.0f);
    for (int t = 0; t < W * R; t++)
        v[t] = _mm256_fmadd_ps(off, _mm256_zextps128_ps256(extra[t]),
                               _mm256_add_ps(acc[t][0], acc[t][1]));
}

/* Weight rows w + i * row (i < n <= 8) against R rows of x: out[r * ldo + i]. */
static inline __attribute__((always_inline)) void band_simd(int type, int R, const uint8_t *w,
                                                            int n, int64_t row,
                                                            const int8_t *xq, const float *xd,
                                                            const float *xs, int64_t K,
                                                            float *out, int64_t ldo)
{
    __m256 v[RB][8], t[2 * RB];
    for (int i = 0; i < n;) {
        const int W = R <= 2 && i + 2 <= n ? 2 : 1;
        if (W == 2)
            row_simd(type, R, 2, w + i * row, row, K / QK, xq, xd, xs, K, t);
        else
            row_simd(type, R, 1, w + i * row, row, K / QK, xq, xd, xs, K, t);
        for (int u = 0; u < W; u++)
            for (int r = 0; r < R; r++)
                v[r][i + u] = t[u * R + r];
        i += W;
    }
    band_out(R, v, n, out, ldo);
}
#define CASE(T, R)                                                                             \
    case (T) * 8 + (R):                                                                        \
        band_simd((T), (R), w, n, row, xq, xd, xs, K, out, ldo);                               \
        return;
#define CASES(T) CASE(T, 1) CASE(T, 2) CASE(T, 3) CASE(T, 4)

void tandem_gguf_rows(int type, int R, const uint8_t *w, int n, int64_t row, const int8_t *xq,
                      const float *xd, const float *xs, int64_t K, float *out, int64_t ldo)
{
    if (type == Q8_0) {
        tandem_gguf_q8_rows(R, w, n, row, xq, xd, K, out, ldo);
        return;
    }
    switch (type * 8 + R) {
        CASES(Q4_0)
        CASES(Q4_1)
        CASES(Q5_0)
        CASES(Q5_1)
    default:
        return;
    }
}
#endif

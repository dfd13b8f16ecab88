/* The Q8_0 rows of linear_gguf.c: W weight rows (one, or two where x has at most two
 * rows) against up to four rows of the quantized x (xq, xd as there), blocks four at a
 * time as linear_gguf_rows.c describes: the four f16 scales gathered into one word and
 * converted once, the four blocks' int32 product vectors folded into one (lane j: block
 * j % 4), so one conversion and one multiply-add serve four blocks. A weight row's sums
 * run in the same order whatever W and the row count of x.
 */
#include "tandem_kernels.h"
#include "gguf_rows.h"

#if GGUF_SIMD
/* int32 sums of one Q8_0 block's products (8 lanes) */
static inline __m256i dot8(const uint8_t *blk, const int8_t *x)
{
    const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m256i xv = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x), w);
    return dot_u8s8(_mm256_sign_epi8(w, w), xv);
}

/* W weight rows (w + u * row) against R rows of x: v[u * R + r], whose lanes sum to the
 * result. Two rows: while one row's dependent run (products, fold, convert, multiply-add)
 * waits, the other's fills the vector units; the prefetch sweeps from the last row at the
 * pace of all W, as linear_gguf_k.c's. */
static inline __attribute__((always_inline)) void row_q8(int R, int W, const uint8_t *w,
                                                         int64_t row, int64_t nb,
                                                         const int8_t *xq, const float *xd,
                                                         int64_t K, __m256 *v)
{
    const int64_t bb = BLOCK_BYTES(Q8_0);
    __m256 acc[2 * RB][2];
    for (int t = 0; t < W * R; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        prefetch4(w, W, row, b, bb);
        for (int u = 0; u < W; u++) {
            const uint8_t *p = w + u * row + b * bb;
            const __m256 d8 = halves4x2(p, bb); /* d0-d3, twice */
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + r * K + b * QK;
                const __m256i f = fold(fold(dot8(p, x), dot8(p + 2 * bb, x + 2 * QK)),
                                       fold(dot8(p + bb, x + QK), dot8(p + 3 * bb, x + 3 * QK)));
                __m256 *a = &acc[u * R + r][0];
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), scales4(d8, xd + r * nb + b), *a);
            }
        }
    }
    for (int u = 0; u < W; u++) {
        const uint8_t *p = w + u * row + b * bb;
        if (b + 2 <= nb) { /* a pair left: the same sums, two blocks wide */
            const __m256 d8 = halves2(p, bb);
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + r * K + b * QK;
                const __m128 xd2 = two_floats(xd + r * nb + b);
                const __m256 s = _mm256_mul_ps(d8, _mm256_set_m128(xd2, xd2)); /* scales4 */
                const __m256i f = fold(dot8(p, x), dot8(p + bb, x + QK)); /* b0 b1 b0 b1 */
                __m256 *a = &acc[u * R + r][0];
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), _mm256_permute_ps(s, 0x44), *a);
            }
        }
        const int64_t e = b + 2 <= nb ? b + 2 : b;
        if (e < nb) { /* an odd last block */
            const float d = half(p + (e - b) * bb);
            for (int r = 0; r < R; r++) {
                const __m256i dot = dot8(p + (e - b) * bb, xq + r * K + e * QK);
                const __m256 s = _mm256_set1_ps(d * xd[r * nb + e]);
                __m256 *a = &acc[u * R + r][1];
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, *a);
            }
        }
    }
    for (int t = 0; t < W * R; t++) /* + 1 * 0: the sums' last step as the 4/5-bit rows' */
        v[t] = _mm256_fmadd_ps(_mm256_set1_ps(1.0f), _mm256_setzero_ps(),
                               _mm256_add_ps(acc[t][0], acc[t][1]));
}

/* Weight rows w + i * row (i < n <= 8) against R rows of x: out[r * ldo + i]. */
static inline __attribute__((always_inline)) void band_q8(int R, const uint8_t *w, int n,
                                                          int64_t row, const int8_t *xq,
                                                          const float *xd, int64_t K,
                                                          float *out, int64_t ldo)
{
    __m256 v[RB][8], t[2 * RB];
    const int64_t nb = K / QK;
    for (int i = 0; i < n;) {
        const int W = R <= 2 && i + 2 <= n ? 2 : 1;
        if (W == 2)
            row_q8(R, 2, w + i * row, row, nb, xq, xd, K, t);
        else
            row_q8(R, 1, w + i * row, row, nb, xq, xd, K, t);
        for (int u = 0; u < W; u++)
            for (int r = 0; r < R; r++)
                v[r][i + u] = t[u * R + r];
        i += W;
    }
    band_out(R, v, n, out, ldo);
}

void tandem_gguf_q8_rows(int R, const uint8_t *w, int n, int64_t row, const int8_t *xq,
                         const float *xd, int64_t K, float *out, int64_t ldo)
{
    switch (R) {
    case 1: band_q8(1, w, n, row, xq, xd, K, out, ldo); return;
    case 2: band_q8(2, w, n, row, xq, xd, K, out, ldo); return;
    case 3: band_q8(3, w, n, row, xq, xd, K, out, ldo); return;
    case 4: band_q8(4, w, n, row, xq, xd, K, out, ldo); return;
    default: return;
    }
}
#endif

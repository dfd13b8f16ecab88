/* The K-quant rows of linear_gguf.c: one weight row of K / 256 super-blocks against up to
 * four rows of x, quantized as there (int8 per 32 values: xq, scale xd, xs = xd * sum(q)),
 * or two weight rows against one or two rows of x (decode). One row driver takes every
 * K-quant, a super-block at a time, each format with its own super-block dot product:
 * Q4_K, Q5_K and Q6_K's here, Q2_K and Q3_K's in gguf_k23.h (one weight row at a time).
 *
 *   Q4_K (12, 144 bytes): f16 d, f16 dmin, 12 bytes of 6-bit scales sc[8] / mins m[8],
 *         128 bytes of nibbles; byte 32c + l: element l of sub-block 2c (low nibble) and
 *         of sub-block 2c + 1 (high nibble). value = d * sc * q - dmin * m
 *   Q5_K (13, 176 bytes): as Q4_K with 32 bytes of high bits after the scales; bit s of
 *         byte l is bit 4 of element l of sub-block s
 *   Q6_K (14, 210 bytes): 128 bytes of low nibbles, 64 of 2-bit pairs, int8 sc[16] (one
 *         per 16 values), f16 d; value = d * sc * (q - 32)
 *
 * A Q4_K / Q5_K sub-block of 32 is exactly one block of x, so its dot product is
 *   d * sc * xd * sum(q * xq) - dmin * m * xs
 * and the mins of a super-block meet the 8 xs in one vector multiply-add. A Q6_K block of
 * 32 values holds two scales: the byte products' pair sums (int16, the first 16 values in
 * the low 128 bits) are widened by a multiply with their int8 scale instead of with 1
 * (at most 2 * 63 * 127 * 128 * 2, exact in int32 and in fp32), so one float scale,
 * d * xd, is left per block; the unsigned q (0..63) goes into the byte product, and the
 * -32 offset is paid once per super-block from x's block sums (xh: the first 16 values',
 * xs - xh: the last 16's), as Q4_K pays its mins.
 *
 * Two weight rows at a time: at decode a row's super-block is a short run of dependent
 * vector work (unpack, byte products, convert, multiply-add) that leaves the vector units
 * idle part of the time; a second row's independent run fills them (one thread, weights
 * in L2: Q4_K 18.6 -> 20.3 GB/s; streamed from memory, with the prefetch of k_row, 16 ->
 * 19 GB/s). With four rows of x the four x rows already give that independence.
 */
#include "tandem_kernels.h"
#include "gguf_common.h"
#include "gguf_k23.h"

#if GGUF_SIMD
#define RB 4

/* Bytes of a super-block of ``type`` (a K-quant) */
static inline int64_t super_bytes(int type)
{
    switch (type) {
    case Q2_K: return 84;
    case Q3_K: return 110;
    case Q4_K: return 144;
    case Q5_K: return 176;
    default: return 210; /* Q6_K */
    }
}

/* A Q4_K / Q5_K super-block's d * sc (*sv) and -dmin * m (*mv) of its 8 sub-blocks */
static inline __attribute__((always_inline)) void q45_scales(const uint8_t *blk, __m256 *sv,
                                                              __m256 *mv)
{
    /* the 8 scales and 8 mins as bytes, four at a time (see scale_min) */
    uint32_t a, b, c;
    memcpy(&a, blk + 4, 4);
    memcpy(&b, blk + 8, 4);
    memcpy(&c, blk + 12, 4);
    const uint64_t sc8 = (uint64_t)(a & 0x3F3F3F3Fu) |
                         (uint64_t)((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)) << 32;
    const uint64_t mn8 = (uint64_t)(b & 0x3F3F3F3Fu) |
                         (uint64_t)(((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u)) << 32;
    const __m256i sc32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8));
    const __m256i mn32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn8));
    *sv = _mm256_mul_ps(_mm256_set1_ps(half(blk)), _mm256_cvtepi32_ps(sc32));
    *mv = _mm256_mul_ps(_mm256_set1_ps(-half(blk + 2)), _mm256_cvtepi32_ps(mn32));
}

/* A Q4_K / Q5_K super-block (index s) of W weight rows (blk + v * row) against R rows of
 * x: weight row v and x row r add into acc[v * R + r] (and acc2, extra). */
static inline __attribute__((always_inline)) void
super_q45(int five, int R, int W, const uint8_t *blk, int64_t row, int64_t s, const int8_t *xq,
          const float *xd, const float *xs, int64_t K, __m256 *acc, __m256 *acc2, __m256 *extra)
{
    const int64_t nb = K / QK, b0 = s * 8;
    float coef[RB][8];
    for (int v = 0; v < W; v++) {
        __m256 sv, mv;
        q45_scales(blk + v * row, &sv, &mv);
        for (int r = 0; r < R; r++) {
            const int t = v * R + r;
            extra[t] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(xs + r * nb + b0), extra[t]);
            _mm256_storeu_ps(coef[t], _mm256_mul_ps(sv, _mm256_loadu_ps(xd + r * nb + b0)));
        }
    }
    const __m256i low = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    for (int c = 0; c < 4; c++) {
        for (int v = 0; v < W; v++) {
            const uint8_t *w = blk + v * row;
            const uint8_t *qs = w + (five ? 48 : 16) + 32 * c;
            const __m256i raw = _mm256_loadu_si256((const __m256i *)qs);
            __m256i u0 = _mm256_and_si256(raw, low);
            __m256i u1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            if (five) { /* bit 2c, 2c + 1 of each high-bit byte -> bit 4 (a 16-bit shift
                         * by at most 4 moves no other byte's bit to bit 4) */
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 16));
                u0 = _mm256_or_si256(u0, _mm256_and_si256(up(qh, 4 - 2 * c), bit4));
                u1 = _mm256_or_si256(u1, _mm256_and_si256(up(qh, 3 - 2 * c), bit4));
            }
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + r * K + (b0 + 2 * c) * QK;
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)x);
                const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + QK));
                const int t = v * R + r;
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(u0, x0)),
                                         _mm256_set1_ps(coef[t][2 * c]), acc[t]);
                acc2[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(u1, x1)),
                                          _mm256_set1_ps(coef[t][2 * c + 1]), acc2[t]);
            }
        }
    }
}

/* A Q6_K super-block's offsets against R rows of x's block sums into extra[t0 + r]
 * (-32 * d * sum over blocks j of sc[2j] * (first 16 of x) + sc[2j + 1] * (last 16)), and
 * its d * xd per block of 32 into coef[t0 + r] */
static inline __attribute__((always_inline)) void
q6_offsets(int R, int t0, const uint8_t *blk, const float *xd, const float *xs, const float *xh,
           int64_t nb, __m256 *extra, float coef[][8])
{
    const float d = half(blk + 208);
    const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m128i eo = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blk + 192)), split);
    const __m256 bias = _mm256_set1_ps(-32.0f * d);
    const __m256i odd32 = _mm256_cvtepi8_epi32(_mm_srli_si128(eo, 8));
    const __m256 odd = _mm256_mul_ps(bias, _mm256_cvtepi32_ps(odd32));
    const __m256 even = _mm256_mul_ps(bias, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eo)));
    const __m256 diff = _mm256_sub_ps(even, odd);
    for (int r = 0; r < R; r++) {
        __m256 *e = extra + t0 + r;
        *e = _mm256_fmadd_ps(odd, _mm256_loadu_ps(xs + r * nb), *e);
        *e = _mm256_fmadd_ps(diff, _mm256_loadu_ps(xh + r * nb), *e);
        const __m256 dx = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(xd + r * nb));
        _mm256_storeu_ps(coef[t0 + r], dx);
    }
}
/* A Q6_K super-block (index s) of W weight rows against R rows of x, as super_q45 */
static inline __attribute__((always_inline)) void
super_q6(int R, int W, const uint8_t *blk, int64_t row, int64_t s, const int8_t *xq,
         const float *xd, const float *xs, const float *xh, int64_t K, __m256 *acc, __m256 *acc2,
         __m256 *extra)
{
    const int64_t nb = K / QK, b0 = s * 8;
    float coef[RB][8]; /* d * xd of each block of 32 */
    for (int v = 0; v < W; v++)
        q6_offsets(R, v * R, blk + v * row, xd + b0, xs + b0, xh + b0, nb, extra, coef);
    const __m256i low = _mm256_set1_epi8(0x0F), high = _mm256_set1_epi8(0x30);
    for (int n = 0; n < 2; n++) {
        for (int v = 0; v < W; v++) {
            const uint8_t *w = blk + v * row, *ql = w + 64 * n;
            /* this half's 8 scales as int16, in both 128-bit lanes: block g takes scale 2g
             * in its values 0-15 (low lane) and 2g + 1 in 16-31, multiplied in as integers */
            const __m256i sc16 = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(w + 192 + 8 * n))));
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * n));
            for (int g = 0; g < 4; g++) {
                const __m256i nib = g % 2 ? l1 : l0;
                const __m256i lo4 = g < 2 ? _mm256_and_si256(nib, low)
                                          : _mm256_and_si256(_mm256_srli_epi16(nib, 4), low);
                /* bits 2g, 2g + 1 of each qh byte -> bits 4, 5 (16-bit shifts: what
                 * crosses a byte lands outside 0x30) */
                const __m256i hs = g < 2   ? _mm256_slli_epi16(qh, 4 - 2 * g)
                                   : g == 2 ? qh
                                            : _mm256_srli_epi16(qh, 2);
                const __m256i q6 = _mm256_or_si256(lo4, _mm256_and_si256(hs, high));
                const char i0 = (char)(4 * g), i1 = (char)(4 * g + 1), j0 = (char)(4 * g + 2),
                           j1 = (char)(4 * g + 3);
                const __m256i scale = _mm256_shuffle_epi8(
                    sc16, _mm256_setr_epi8(i0, i1, i0, i1, i0, i1, i0, i1, i0, i1, i0, i1, i0, i1,
                                           i0, i1, j0, j1, j0, j1, j0, j1, j0, j1, j0, j1, j0, j1,
                                           j0, j1, j0, j1));
                const int64_t b = b0 + 4 * n + g;
                for (int r = 0; r < R; r++) {
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + r * K + b * QK));
                    const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(q6, x), scale);
                    __m256 *into = g % 2 ? acc2 : acc;
                    const int t = v * R + r;
                    into[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                              _mm256_set1_ps(coef[t][4 * n + g]), into[t]);
                }
            }
        }
    }
}

/* W weight rows (w + v * row) against R rows of x: out[r * ldo + v] */
static inline __attribute__((always_inline)) void
k_row(int type, int R, int W, const uint8_t *w, int64_t row, const int8_t *xq, const float *xd,
      const float *xs, const float *xh, int64_t K, float *out, int64_t ldo)
{
    __m256 acc[RB], acc2[RB], extra[RB]; /* two chains of adds, so none waits long */
    for (int r = 0; r < RB; r++)
        acc[r] = acc2[r] = extra[r] = _mm256_setzero_ps();
    const int64_t bb = super_bytes(type);
    for (int64_t s = 0; s < K / QK_K; s++) {
        /* 2 KB ahead (as linear_gguf_rows.c) in one sweep from the last row at the pace
         * of all W: it reaches the next rows before their turn (W = 2: each row apart
         * at its own place left the loop waiting on memory twice as long) */
        for (int64_t o = 0; o < W * bb; o += 64)
            _mm_prefetch((const char *)w + (W - 1) * row + W * s * bb + 2048 + o, _MM_HINT_T0);
        if (type == Q6_K)
            super_q6(R, W, w + s * bb, row, s, xq, xd, xs, xh, K, acc, acc2, extra);
        else if (type == Q4_K || type == Q5_K)
            super_q45(type == Q5_K, R, W, w + s * bb, row, s, xq, xd, xs, K, acc, acc2, extra);
        else
            super_k23(type, R, w + s * bb, s, xq, xd, xs, xh, K, acc, acc2, extra);
    }
    for (int v = 0; v < W; v++)
        for (int r = 0; r < R; r++) {
            const int t = v * R + r;
            out[r * ldo + v] = hsum(_mm256_add_ps(_mm256_add_ps(acc[t], acc2[t]), extra[t]));
        }
}
#define KCASE(T, R, W)                                                                         \
    case ((T) * 8 + (R)) * 2 + (W) - 1:                                                        \
        k_row((T), (R), (W), w, row, xq, xd, xs, xh, K, out, ldo);                             \
        return;
#define KCASES(T) KCASE(T, 1, 1) KCASE(T, 2, 1) KCASE(T, 3, 1) KCASE(T, 4, 1)
#define KPAIRS(T) KCASE(T, 1, 2) KCASE(T, 2, 2)

void tandem_gguf_k_rows(int type, int R, int W, const uint8_t *w, int64_t row, const int8_t *xq,
                        const float *xd, const float *xs, const float *xh, int64_t K, float *out,
                        int64_t ldo)
{
    switch ((type * 8 + R) * 2 + W - 1) {
        KCASES(Q2_K)
        KCASES(Q3_K)
        KCASES(Q4_K)
        KCASES(Q5_K)
        KCASES(Q6_K)
        KPAIRS(Q4_K)
        KPAIRS(Q5_K)
        KPAIRS(Q6_K)
    default:
        return;
    }
}
#endif

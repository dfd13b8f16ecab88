/* The 2- and 3-bit K-quants, Q2_K (type 10, 84 bytes a super-block of 256) and Q3_K (11,
 * 110 bytes): their codes and scales, and a super-block's dot product with the quantized x
 * of linear_gguf.c (linear_gguf_k.c runs the rows; gguf_k23.c decodes rows to fp32).
 *
 *   Q2_K: scales[16] (low nibble sc, high nibble m), qs[64], f16 d, f16 dmin
 *         value = d * sc * q - dmin * m, q in 0..3
 *   Q3_K: hmask[32], qs[64], scales[12] (6 bits each), f16 d
 *         value = d * (s - 32) * (q - 4), q in 0..7
 * Value 128 h + 32 g + l (h < 2, g < 4, l < 32) takes bits 2g, 2g + 1 of qs[32 h + l] as
 * its low two bits; Q3_K's value 32 j + l takes bit j of hmask[l] as its third. Sub-block j
 * (of 16 values) of Q3_K has its low four scale bits in the low nibble of byte j (j < 8) or
 * the high nibble of byte j - 8, its top two in bits 2 (j / 4) .. of byte 8 + j % 4
 * (tandem.kernels.gguf_kquants_low has the same in torch).
 *
 * Both are 16 sub-blocks of 16 with an integer scale c_j and an offset o_j each: a value is
 * d * c_j * u + o_j with an unsigned code u (Q2_K: c = sc, o = -dmin * m; Q3_K: c = s - 32,
 * o = -4 d c). A block b of 32 of x meets sub-blocks 2b and 2b + 1, so its dot product is
 *   d * xd_b * (c_2b * sum(u xq, first 16) + c_2b+1 * sum(u xq, last 16))
 *     + o_2b * xh_b + o_2b+1 * (xs_b - xh_b)
 * (xh_b: xd_b times the sum of the block's first 16 codes). As Q6_K in linear_gguf_k.c the
 * byte products' pair sums (int16, at most 2 * 7 * 127) are widened by a multiply with
 * their sub-block's c (|c| <= 32: sums well inside int32), one fp32 multiply-add a block,
 * and the offsets of eight blocks take two 8-lane multiply-adds per row of x.
 */
#ifndef TANDEM_GGUF_K23_H
#define TANDEM_GGUF_K23_H

#include "gguf_common.h"

/* c_j and o_j of the 16 sub-blocks of a super-block */
static inline void sub_scales(int type, const uint8_t *blk, int c[16], float o[16])
{
    if (type == Q2_K) {
        const float dmin = half(blk + 82);
        for (int j = 0; j < 16; j++) {
            c[j] = blk[j] & 15;
            o[j] = -dmin * (float)(blk[j] >> 4);
        }
        return;
    }
    const float d = half(blk + 108);
    const uint8_t *s = blk + 96;
    for (int j = 0; j < 16; j++) {
        const int low = (s[j % 8] >> (4 * (j / 8))) & 15;
        c[j] = (low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        o[j] = -4.0f * d * (float)c[j];
    }
}

static inline float scale_d(int type, const uint8_t *blk)
{
    return half(blk + (type == Q2_K ? 80 : 108));
}

#if GGUF_SIMD
/* The unsigned codes of block b (0..7) of a super-block: 32 bytes */
static inline __attribute__((always_inline)) __m256i codes(int type, const uint8_t *blk, int b)
{
    const uint8_t *qs = blk + (type == Q2_K ? 16 : 32) + 32 * (b / 4);
    const __m256i raw = _mm256_loadu_si256((const __m256i *)qs);
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * (b % 4)), _mm256_set1_epi8(3));
    if (type == Q2_K)
        return low;
    /* bit b of each hmask byte -> bit 2 (a 16-bit shift by at most 5 moves no other
     * byte's bit to bit 2) */
    const __m256i hm = _mm256_loadu_si256((const __m256i *)blk);
    return _mm256_or_si256(low, _mm256_and_si256(up(hm, 2 - b), _mm256_set1_epi8(4)));
}

/* The 16 c_j as int8, and the 16 o_j split into even j (lane b: o_2b) and odd */
static inline __attribute__((always_inline)) __m128i vec_scales(int type, const uint8_t *blk,
                                                                __m256 *even, __m256 *odd)
{
    const __m128i nib = _mm_set1_epi8(15);
    __m128i c, ofs;
    float f;
    if (type == Q2_K) {
        const __m128i v = _mm_loadu_si128((const __m128i *)blk);
        c = _mm_and_si128(v, nib);
        ofs = _mm_and_si128(_mm_srli_epi16(v, 4), nib);
        f = -half(blk + 82);
    } else {
        const __m128i a = _mm_loadl_epi64((const __m128i *)(blk + 96));
        const __m128i lo4 = _mm_unpacklo_epi64(_mm_and_si128(a, nib),
                                               _mm_and_si128(_mm_srli_epi16(a, 4), nib));
        uint32_t t;
        memcpy(&t, blk + 104, 4);
        const __m128i top = _mm_and_si128(_mm_setr_epi32((int)t, (int)(t >> 2), (int)(t >> 4),
                                                         (int)(t >> 6)),
                                          _mm_set1_epi8(3));
        c = _mm_sub_epi8(_mm_or_si128(lo4, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
        ofs = c;
        f = -4.0f * half(blk + 108);
    }
    const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m128i eo = _mm_shuffle_epi8(ofs, split);
    const __m256 fv = _mm256_set1_ps(f);
    *even = _mm256_mul_ps(fv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eo)));
    *odd = _mm256_mul_ps(fv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(eo, 8))));
    return c;
}

/* One super-block (index s) against R <= 4 rows of x (linear_gguf_k.c's row driver) */
static inline __attribute__((always_inline)) void super_k23(int type, int R, const uint8_t *blk,
                                                            int64_t s, const int8_t *xq,
                                                            const float *xd, const float *xs,
                                                            const float *xh, int64_t K, __m256 *acc,
                                                            __m256 *acc2, __m256 *extra)
{
    const int64_t nb = K / QK, b0 = s * 8;
    __m256 even, odd;
    /* lane b of c16 as 32 bits: the pair c_2b, c_2b+1 */
    const __m256i c16 = _mm256_cvtepi8_epi16(vec_scales(type, blk, &even, &odd));
    const __m256 diff = _mm256_sub_ps(even, odd);
    float coef[4][8]; /* d * xd of each block */
    const __m256 d = _mm256_set1_ps(scale_d(type, blk));
    for (int r = 0; r < R; r++) {
        extra[r] = _mm256_fmadd_ps(odd, _mm256_loadu_ps(xs + r * nb + b0), extra[r]);
        extra[r] = _mm256_fmadd_ps(diff, _mm256_loadu_ps(xh + r * nb + b0), extra[r]);
        _mm256_storeu_ps(coef[r], _mm256_mul_ps(d, _mm256_loadu_ps(xd + r * nb + b0)));
    }
    /* c_2b in the low 128 bits' int16 lanes, c_2b+1 in the high ones */
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2,
                                          3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    /* whole unrolled (b a constant in every shift and index): the accumulators stay in
     * registers, even blocks adding into acc and odd ones into acc2 */
#pragma GCC unroll 8
    for (int b = 0; b < 8; b++) {
        const __m256i u = codes(type, blk, b);
        const __m256i pair = _mm256_permutevar8x32_epi32(c16, _mm256_set1_epi32(b));
        const __m256i scale = _mm256_shuffle_epi8(pair, pick);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + r * K + (b0 + b) * QK));
            const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), scale);
            const __m256 f = _mm256_cvtepi32_ps(dot), c = _mm256_set1_ps(coef[r][b]);
            if (b % 2)
                acc2[r] = _mm256_fmadd_ps(f, c, acc2[r]);
            else
                acc[r] = _mm256_fmadd_ps(f, c, acc[r]);
        }
    }
}
#else
/* The unsigned code of element i (0..255) of a super-block */
static inline int code23(int type, const uint8_t *blk, int i)
{
    const int h = i / 128, g = i % 128 / 32, l = i % 32;
    const int low = (blk[(type == Q2_K ? 16 : 32) + 32 * h + l] >> (2 * g)) & 3;
    return type == Q2_K ? low : low | (((blk[l] >> (i / 32)) & 1) << 2);
}

/* Block b (0..7, 32 values) of a super-block against the 32 codes x of a block of x, its
 * scale xd, code sum xs and first-16 sum xh (linear_gguf_k.c's plain C rows) */
static inline float block_k23(int type, const uint8_t *blk, int b, const int8_t *x, float xd,
                              float xs, float xh)
{
    int c[16];
    float o[16];
    sub_scales(type, blk, c, o);
    int32_t sum0 = 0, sum1 = 0;
    for (int i = 0; i < 16; i++) {
        sum0 += code23(type, blk, 32 * b + i) * x[i];
        sum1 += code23(type, blk, 32 * b + 16 + i) * x[16 + i];
    }
    return scale_d(type, blk) * xd * (float)(c[2 * b] * sum0 + c[2 * b + 1] * sum1) +
           o[2 * b] * xh + o[2 * b + 1] * (xs - xh);
}
#endif

#endif

/* GGUF weight rows decoded to fp32, for the prefill path (linear_gguf_f32.c): the values
 * as the reference (gguf_blocks.dequantize) defines them, block by block.
 *
 * Written as plain loops of fixed length over a block's bytes, which the compiler turns
 * into vector code (-O3 -march=native): a row costs a fraction of a cycle per value, small
 * beside the fp32 products it then feeds (M of them per value at prefill).
 */
#include "gguf_common.h"

/* One block of 32 of Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 -> o[0..31] */
static inline __attribute__((always_inline)) void block32(int type, const uint8_t *blk, float *o)
{
    const float d = half(blk);
    if (type == Q8_0) {
        const int8_t *q = (const int8_t *)(blk + 2);
        for (int i = 0; i < QK; i++)
            o[i] = d * (float)q[i];
        return;
    }
    const int five = type == Q5_0 || type == Q5_1, sym = type == Q4_0 || type == Q5_0;
    const int at = sym ? 2 : 4; /* after d (and m) */
    const float m = sym ? (five ? -16.0f : -8.0f) * d : half(blk + 2);
    const uint8_t *nib = blk + at + 4 * five;
    uint32_t hb = 0;
    if (five)
        memcpy(&hb, blk + at, 4);
    for (int i = 0; i < QK / 2; i++) {
        const int lo = (nib[i] & 0x0F) | (int)((hb >> i) & 1) << 4;
        const int hi = (nib[i] >> 4) | (int)((hb >> (i + QK / 2)) & 1) << 4;
        o[i] = d * (float)lo + m;
        o[i + QK / 2] = d * (float)hi + m;
    }
}

/* One Q4_K / Q5_K super-block of 256 -> o[0..255]: sub-block j is
 * d * sc[j] * q - dmin * m[j], q from byte 32 * (j / 2) + l (low nibble for even j) */
static inline void super_q45(int five, const uint8_t *blk, float *o)
{
    const float d = half(blk), dmin = half(blk + 2);
    const uint8_t *qh = blk + 16, *qs = blk + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        scale_min(blk + 4, j, &sc, &mn);
        const float a = d * (float)sc, c = -dmin * (float)mn;
        const uint8_t *q = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> shift) & 0x0F;
            if (five)
                v |= ((qh[l] >> j) & 1) << 4;
            o[32 * j + l] = a * (float)v + c;
        }
    }
}

/* One Q6_K super-block of 256 -> o[0..255]: element 128 n + 32 g + l takes its low four
 * bits from ql[64 n + 32 (g & 1) + l] (high nibble for g >= 2), its top two from bits
 * 2g, 2g + 1 of qh[32 n + l]; value d * sc[i / 16] * (q - 32) */
static inline void super_q6(const uint8_t *blk, float *o)
{
    const int8_t *sc = (const int8_t *)(blk + 192);
    const float d = half(blk + 208);
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = blk + 64 * n, *qh = blk + 128 + 32 * n;
        for (int g = 0; g < 4; g++) {
            const uint8_t *lo = ql + 32 * (g & 1);
            const int shift = g < 2 ? 0 : 4;
            const float a0 = d * (float)sc[8 * n + 2 * g], a1 = d * (float)sc[8 * n + 2 * g + 1];
            float *out = o + 128 * n + 32 * g;
            for (int l = 0; l < 32; l++) {
                const int q = (((lo[l] >> shift) & 0x0F) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
                out[l] = (l < 16 ? a0 : a1) * (float)q;
            }
        }
    }
}

/* A row of blocks of 32; inlined with a constant type, so each format gets its own loop */
static inline __attribute__((always_inline)) void row32(int type, int64_t bb, const uint8_t *w,
                                                         int64_t K, float *out)
{
    for (int64_t b = 0; b < K / QK; b++)
        block32(type, w + b * bb, out + b * QK);
}

void tandem_gguf_decode_row(int type, const uint8_t *w, int64_t K, float *out)
{
    switch (type) {
    case Q4_K:
    case Q5_K:
    case Q6_K: {
        const int64_t bb = type == Q4_K ? 144 : type == Q5_K ? 176 : 210;
        for (int64_t s = 0; s < K / QK_K; s++) {
            if (type == Q6_K)
                super_q6(w + s * bb, out + s * QK_K);
            else
                super_q45(type == Q5_K, w + s * bb, out + s * QK_K);
        }
        return;
    }
    case Q8_0: row32(Q8_0, 34, w, K, out); return;
    case Q4_0: row32(Q4_0, 18, w, K, out); return;
    case Q4_1: row32(Q4_1, 20, w, K, out); return;
    case Q5_0: row32(Q5_0, 22, w, K, out); return;
    case Q5_1: row32(Q5_1, 24, w, K, out); return;
    default: return;
    }
}

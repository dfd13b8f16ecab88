/* GGUF weight rows decoded to fp32, for the prefill path (linear_gguf_f32.c): the values
 * as the reference (gguf_blocks.dequantize) defines them, block by block.
 *
 * With AVX2 a block's codes are unpacked to 32 bytes (as linear_gguf.c / linear_gguf_k.c
 * unpack them) and widened to fp32 with one multiply-add per eight values: a fraction of
 * a cycle per value, small beside the M fp32 products each value then feeds. Plain loops
 * of the same meaning elsewhere. Q2_K / Q3_K rows are decoded in gguf_k23.c, F16 / BF16
 * rows widened in gguf_half.c; tandem_gguf_decode_row takes every format.
 */
#include "tandem_kernels.h"
#include "gguf_common.h"

#if GGUF_SIMD
/* One block of 32 of Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 -> o[0..31]: the codes as 32 bytes
 * (as linear_gguf.c unpacks them), then widened to fp32 */
static inline __attribute__((always_inline)) void block32(int type, const uint8_t *blk,
                                                          float *o)
{
    const float d = half(blk);
    if (type == Q8_0) {
        const float dd[2] = {d, d}, zero[2] = {0.0f, 0.0f};
        bytes_to_f32(_mm256_loadu_si256((const __m256i *)(blk + 2)), 1, dd, zero, o);
        return;
    }
    const int five = type == Q5_0 || type == Q5_1, sym = type == Q4_0 || type == Q5_0;
    const int at = sym ? 2 : 4; /* after d (and m) */
    const float m = sym ? (five ? -16.0f : -8.0f) * d : half(blk + 2);
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i raw = _mm_loadu_si128((const __m128i *)(blk + at + 4 * five));
    __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low),
                                 _mm_and_si128(raw, low));
    if (five) { /* bit j of hb -> 0x10 in byte j: byte j takes hb's byte j / 8 */
        uint32_t hb;
        memcpy(&hb, blk + at, 4);
        const __m256i spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32((int)hb), _mm256_setr_epi64x(0, 0x0101010101010101LL,
                                                           0x0202020202020202LL,
                                                           0x0303030303030303LL));
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        u = _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
    }
    const float dd[2] = {d, d}, mm[2] = {m, m};
    bytes_to_f32(u, 0, dd, mm, o);
}

/* One Q4_K / Q5_K super-block of 256 -> o[0..255] (as the plain loops below) */
static inline __attribute__((always_inline)) void super_q45(int five, const uint8_t *blk,
                                                            float *o)
{
    const float d = half(blk), dmin = half(blk + 2);
    const __m256i low = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
    const uint8_t *qs = blk + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        scale_min(blk + 4, j, &sc, &mn);
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2)));
        __m256i u = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, low);
        if (five) /* bit j of each high-bit byte -> bit 4 */
            u = _mm256_or_si256(
                u, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), one), 4));
        const float a[2] = {d * (float)sc, d * (float)sc}, c[2] = {-dmin * mn, -dmin * mn};
        bytes_to_f32(u, 0, a, c, o + 32 * j);
    }
}

/* One Q6_K super-block of 256 -> o[0..255] (as the plain loops below) */
static inline void super_q6(const uint8_t *blk, float *o)
{
    const int8_t *sc = (const int8_t *)(blk + 192);
    const float d = half(blk + 208);
    const __m256i low = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; n++) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n));
        for (int g = 0; g < 4; g++) {
            const __m256i raw =
                _mm256_loadu_si256((const __m256i *)(blk + 64 * n + 32 * (g & 1)));
            const __m256i lo4 = _mm256_and_si256(g < 2 ? raw : _mm256_srli_epi16(raw, 4), low);
            const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), three);
            const __m256i q = _mm256_or_si256(lo4, _mm256_slli_epi16(hi2, 4));
            const float a[2] = {d * (float)sc[8 * n + 2 * g], d * (float)sc[8 * n + 2 * g + 1]};
            const float c[2] = {-32.0f * a[0], -32.0f * a[1]};
            bytes_to_f32(q, 0, a, c, o + 128 * n + 32 * g);
        }
    }
}
#else
/* One block of 32 of Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 -> o[0..31] */
static inline void block32(int type, const uint8_t *blk, float *o)
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

#endif

/* A row of blocks of 32; inlined with a constant type, so each format gets its own loop */
static inline __attribute__((always_inline)) void row32(int type, int64_t bb, const uint8_t *w,
                                                         int64_t K, float *out)
{
    for (int64_t b = 0; b < K / QK; b++)
        block32(type, w + b * bb, out + b * QK);
}

/* A row of K-quant super-blocks; as row32 */
static inline __attribute__((always_inline)) void row256(int type, int64_t bb, const uint8_t *w,
                                                          int64_t K, float *out)
{
    for (int64_t s = 0; s < K / QK_K; s++) {
        if (type == Q6_K)
            super_q6(w + s * bb, out + s * QK_K);
        else
            super_q45(type == Q5_K, w + s * bb, out + s * QK_K);
    }
}

void tandem_gguf_decode_row(int type, const uint8_t *w, int64_t K, float *out)
{
    switch (type) {
    case Q8_0: row32(Q8_0, 34, w, K, out); return;
    case Q4_0: row32(Q4_0, 18, w, K, out); return;
    case Q4_1: row32(Q4_1, 20, w, K, out); return;
    case Q5_0: row32(Q5_0, 22, w, K, out); return;
    case Q5_1: row32(Q5_1, 24, w, K, out); return;
    case Q4_K: row256(Q4_K, 144, w, K, out); return;
    case Q5_K: row256(Q5_K, 176, w, K, out); return;
    case Q6_K: row256(Q6_K, 210, w, K, out); return;
    case Q2_K:
    case Q3_K: tandem_gguf_k23_decode_row(type, w, K, out); return;
    case F16:
    case BF16: tandem_gguf_half_decode_row(type, w, K, out); return;
    default: return;
    }
}

/* Rows ``index`` (n of them, each < the weight's rows) of a weight in ``type`` blocks,
   row_bytes apart, decoded into out: [n, K] (an embedding lookup). */
void tandem_gguf_decode_rows(int type, const uint8_t *w, int64_t row_bytes, const int64_t *index,
                             int64_t n, int64_t K, float *out)
{
#pragma omp parallel for schedule(static) if (n * K > 262144)
    for (int64_t i = 0; i < n; i++)
        tandem_gguf_decode_row(type, w + index[i] * row_bytes, K, out + i * K);
}

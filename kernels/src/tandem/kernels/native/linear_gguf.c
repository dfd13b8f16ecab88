/* Linear layers on GGUF block-quantized weights, kept in their blocks: out = x @ W^T.
 *
 * A weight row of K values is K / 32 blocks, stored as the GGUF file stores them:
 *   Q8_0 (type 8): f16 d, int8 q[32]          value = d * q
 *   Q4_0 (type 2): f16 d, uint8 nib[16]       value = d * (n - 8)
 *   Q4_1 (type 3): f16 d, f16 m, uint8 nib[16] value = d * n + m
 *   Q5_0 (type 6): f16 d, uint32 hb, nib[16]  value = d * (q - 16)
 *   Q5_1 (type 7): f16 d, f16 m, hb, nib[16]  value = d * q + m
 * where element j < 16 of a 4-bit block is the low nibble of byte j and element j >= 16
 * the high nibble of byte j - 16; a 5-bit q adds 16 * (bit j of hb, little-endian).
 *
 * x is quantized per row and per 32-block to int8 (xd = amax / 127, q = round(x / xd)),
 * with xs = xd * sum(q) per block, so a block's dot product is an integer one:
 *   Q8_0: wd * xd * sum(wq * xq)
 *   Q4_0: wd * xd * sum(n * xq) - 8 * wd * xs
 *   Q4_1: wd * xd * sum(n * xq) + wm * xs  (Q5_0, Q5_1 as Q4_0, Q4_1, with 16 for 8)
 * The integer sums use unsigned x signed byte products (AVX2 maddubs, or VNNI's dpbusd
 * where the compiler targets AVX-512 VNNI), the same sums in plain C elsewhere.
 *
 * The K-quants (Q4_K, Q5_K, Q6_K: super-blocks of 256) are in linear_gguf_k.c; they share
 * the quantized x and the work split.
 *
 * Work split: threads take bands of output channels; within a band each weight block is
 * unpacked once and used for up to four rows of x, so the weights stream once per call
 * at every batch size. From linear_gguf.PREFILL_ROWS rows the caller takes
 * linear_gguf_f32.c instead (weights decoded to fp32 once, then fp32 products).
 */
#include <stdlib.h>

#include "gguf_common.h"

#define RB 4   /* rows of x per weight block */
#define BAND 8 /* output channels per unit of work */

int64_t tandem_gguf_block_bytes(int type)
{
    switch (type) {
    case Q8_0: return 34;
    case Q4_0: return 18;
    case Q4_1: return 20;
    case Q5_0: return 22;
    case Q5_1: return 24;
    case Q4_K: return 144;
    case Q5_K: return 176;
    case Q6_K: return 210;
    default: return -1;
    }
}

/* x [M, K] -> q [M, K] int8, d, s and h [M, K / 32] (h: d * the sum of a block's first
 * 16 q, for Q6_K's scales of 16) */
static void quantize_x(const float *x, int64_t M, int64_t K, int8_t *q, float *d, float *s,
                       float *h)
{
    const int64_t nb = K / QK;
#pragma omp parallel for schedule(static) if (M > 1)
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < nb; b++) {
            const float *v = x + m * K + b * QK;
            int8_t *o = q + m * K + b * QK;
            float amax = 0.0f;
            for (int i = 0; i < QK; i++)
                amax = fmaxf(amax, fabsf(v[i]));
            const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            int sum = 0, first = 0;
            for (int i = 0; i < QK; i++) {
                const int r = (int)lrintf(v[i] * inv);
                o[i] = (int8_t)r;
                sum += r;
                first += i < QK / 2 ? r : 0;
            }
            d[m * nb + b] = scale;
            s[m * nb + b] = scale * (float)sum;
            h[m * nb + b] = scale * (float)first;
        }
    }
}

#if GGUF_SIMD
/* Block b of a weight row against R rows of x, into acc[r] and extra[r]. */
static inline __attribute__((always_inline)) void block(int type, int R, const uint8_t *blk,
                                                         int64_t b, const int8_t *xq,
                                                         const float *xd, const float *xs,
                                                         int64_t K, __m256 *acc, __m256 *extra)
{
    const float wd = half(blk);
    __m256i u; /* the weights as unsigned bytes (Q8_0: their magnitudes) */
    __m256i sgn = _mm256_setzero_si256();
    float wm = 0.0f;
    if (type == Q8_0) {
        sgn = _mm256_loadu_si256((const __m256i *)(blk + 2));
        u = _mm256_sign_epi8(sgn, sgn);
    } else {
        const int five = type == Q5_0 || type == Q5_1, sym = type == Q4_0 || type == Q5_0;
        const int at = sym ? 2 : 4; /* after d (and m) */
        const __m128i low = _mm_set1_epi8(0x0F);
        wm = sym ? (five ? -16.0f : -8.0f) * wd : half(blk + 2);
        const __m128i raw = _mm_loadu_si128((const __m128i *)(blk + at + 4 * five));
        const __m128i lo = _mm_and_si128(raw, low);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
        u = _mm256_set_m128i(hi, lo);
        if (five) { /* bit j of hb -> 0x10 in byte j: byte j takes hb's byte j / 8 */
            uint32_t hb;
            memcpy(&hb, blk + at, 4);
            const __m256i spread = _mm256_shuffle_epi8(
                _mm256_set1_epi32((int)hb),
                _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                   0x0303030303030303LL));
            const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
            const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
            u = _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
        }
    }
    const int64_t nb = K / QK;
    for (int r = 0; r < R; r++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + r * K + b * QK));
        if (type == Q8_0)
            xv = _mm256_sign_epi8(xv, sgn);
        const __m256 dot = _mm256_cvtepi32_ps(dot_u8s8(u, xv));
        acc[r] = _mm256_fmadd_ps(dot, _mm256_set1_ps(wd * xd[r * nb + b]), acc[r]);
        if (type != Q8_0) /* lane 0 only: the block's offset term */
            extra[r] = _mm256_fmadd_ps(_mm256_set1_ps(wm), _mm256_set1_ps(xs[r * nb + b]),
                                       extra[r]);
    }
}

/* One weight row against R rows of x: out[r * ldo] for r < R. Inlined with constant
 * type and R, so each format and row count gets its own loop with registers only; two
 * sets of accumulators take alternate blocks, so no add waits on the one before. */
static inline __attribute__((always_inline)) void row_dot(int type, const uint8_t *w,
                                                           int64_t nb, const int8_t *xq,
                                                           const float *xd, const float *xs,
                                                           int64_t K, int R, float *out,
                                                           int64_t ldo)
{
    __m256 acc[2][RB], extra[2][RB];
    for (int r = 0; r < RB; r++) {
        acc[0][r] = acc[1][r] = extra[0][r] = extra[1][r] = _mm256_setzero_ps();
    }
    const int64_t bb = type == Q8_0   ? 34
                       : type == Q4_0 ? 18
                       : type == Q4_1 ? 20
                       : type == Q5_0 ? 22
                                      : 24;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        block(type, R, w + b * bb, b, xq, xd, xs, K, acc[0], extra[0]);
        block(type, R, w + (b + 1) * bb, b + 1, xq, xd, xs, K, acc[1], extra[1]);
    }
    if (b < nb)
        block(type, R, w + b * bb, b, xq, xd, xs, K, acc[0], extra[0]);
    for (int r = 0; r < R; r++) {
        const __m256 e = _mm256_add_ps(extra[0][r], extra[1][r]);
        out[r * ldo] = hsum(_mm256_add_ps(acc[0][r], acc[1][r])) + _mm_cvtss_f32(_mm256_castps256_ps128(e));
    }
}
#else
static inline void row_dot(int type, const uint8_t *w, int64_t nb, const int8_t *xq, const float *xd,
                    const float *xs, int64_t K, int R, float *out, int64_t ldo)
{
    const int64_t bb = tandem_gguf_block_bytes(type);
    for (int r = 0; r < R; r++) {
        float total = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + b * bb;
            const int8_t *xv = xq + r * K + b * QK;
            const float wd = half(blk), d = xd[r * (K / QK) + b], s = xs[r * (K / QK) + b];
            int32_t sum = 0;
            if (type == Q8_0) {
                const int8_t *q = (const int8_t *)(blk + 2);
                for (int i = 0; i < QK; i++)
                    sum += q[i] * xv[i];
                total += wd * d * (float)sum;
                continue;
            }
            const int five = type == Q5_0 || type == Q5_1, sym = type == Q4_0 || type == Q5_0;
            const int at = sym ? 2 : 4;
            const uint8_t *nib = blk + at + 4 * five;
            uint32_t hb = 0;
            if (five)
                memcpy(&hb, blk + at, 4);
            for (int i = 0; i < QK / 2; i++) {
                const int q0 = (nib[i] & 0x0F) | (int)((hb >> i) & 1) << 4;
                const int q1 = (nib[i] >> 4) | (int)((hb >> (i + QK / 2)) & 1) << 4;
                sum += q0 * xv[i] + q1 * xv[i + QK / 2];
            }
            const float wm = sym ? (five ? -16.0f : -8.0f) * wd : half(blk + 2);
            total += wd * d * (float)sum + wm * s;
        }
        out[r * ldo] = total;
    }
}
#endif

#define CASE(T, R)                                                                             \
    case (T) * 8 + (R):                                                                        \
        row_dot((T), w, nb, xq, xd, xs, K, (R), out, ldo);                                     \
        return;
#define CASES(T) CASE(T, 1) CASE(T, 2) CASE(T, 3) CASE(T, 4)

static void dispatch(int type, int R, const uint8_t *w, int64_t nb, const int8_t *xq,
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

int tandem_linear_gguf_simd(void) { return GGUF_SIMD; }

/* out [M, N] = x [M, K] @ W^T, W: N rows of K / 32 blocks of ``type`` (K / 256 of a
 * K-quant). 0, or -1 when the type is unknown, K is not a multiple of the block, or
 * scratch memory is short. */
int tandem_linear_gguf(int type, const float *x, int64_t M, int64_t K, const uint8_t *w,
                       int64_t N, float *out)
{
    const int64_t bb = tandem_gguf_block_bytes(type);
    const int kq = type == Q4_K || type == Q5_K || type == Q6_K;
    if (bb < 0 || K % (kq ? QK_K : QK) != 0 || M < 0 || N < 0)
        return -1;
    const int64_t nb = K / QK, row = K / (kq ? QK_K : QK) * bb;
    /* the quantized x: this thread's scratch, kept between calls (grown as needed) */
    static __thread void *scratch = NULL;
    static __thread size_t have = 0;
    const size_t need = (size_t)(M * K) + 3 * sizeof(float) * (size_t)(M * nb) + 64;
    if (need > have) {
        free(scratch);
        scratch = malloc(need);
        have = scratch ? need : 0;
        if (!scratch)
            return -1;
    }
    float *xd = (float *)scratch, *xs = xd + M * nb, *xh = xs + M * nb;
    int8_t *xq = (int8_t *)(xh + M * nb);
    quantize_x(x, M, K, xq, xd, xs, xh);
    const int64_t bands = (N + BAND - 1) / BAND;
#pragma omp parallel for schedule(static)
    for (int64_t band = 0; band < bands; band++) {
        const int64_t n0 = band * BAND, n1 = n0 + BAND < N ? n0 + BAND : N;
        for (int64_t m = 0; m < M; m += RB) {
            const int R = (int)(M - m < RB ? M - m : RB);
            const int8_t *q = xq + m * K;
            const float *d = xd + m * nb, *s = xs + m * nb, *h = xh + m * nb;
            for (int64_t n = n0; n < n1; n++) {
                if (kq)
                    tandem_gguf_k_rows(type, R, w + n * row, q, d, s, h, K, out + m * N + n, N);
                else
                    dispatch(type, R, w + n * row, nb, q, d, s, K, out + m * N + n, N);
            }
        }
    }
    return 0;
}

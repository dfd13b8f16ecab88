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
 * The K-quants (Q2_K to Q6_K: super-blocks of 256) are in linear_gguf_k.c (Q2_K and Q3_K's
 * blocks in gguf_k23.h); they share the quantized x and the work split. F16 and BF16 rows
 * (gguf_half.c) share the work split only: x stays in fp32 for them.
 *
 * Work split: threads take bands of output channels; within a band each weight block is
 * unpacked once and used for up to four rows of x, so the weights stream once per call
 * at every batch size. From linear_gguf.PREFILL_ROWS rows the caller takes
 * linear_gguf_f32.c instead (weights decoded to fp32 once, then fp32 products).
 */
#include <omp.h>
#include <stdlib.h>

#include "tandem_kernels.h"
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
    case Q2_K: return 84;
    case Q3_K: return 110;
    case F16:
    case BF16: return 2;
    default: return -1;
    }
}

/* One block of 32 values of x -> 32 int8 codes at lo (values 0-15) and hi (16-31); *d
 * the scale, *sum and *first the sums of all and of the first 16 codes. lrintf and the
 * vector conversion both round half to even, so either gives the same codes. */
static inline void quantize_block(const float *v, int8_t *lo, int8_t *hi, float *d, int *sum,
                                  int *first)
{
#if GGUF_SIMD
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 f[4], amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        f[i] = _mm256_loadu_ps(v + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, f[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float top = _mm_cvtss_f32(m), inv = top > 0.0f ? 127.0f / top : 0.0f;
    __m256i q[4];
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(f[i], _mm256_set1_ps(inv)));
    const __m256i s01 = _mm256_add_epi32(q[0], q[1]), s23 = _mm256_add_epi32(q[2], q[3]);
    /* packs work per 128-bit half: [0-3 8-11 | 4-7 12-15] -> 0-15 after the permute */
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm_storeu_si128((__m128i *)lo, _mm256_castsi256_si128(b));
    _mm_storeu_si128((__m128i *)hi, _mm256_extracti128_si256(b, 1));
    int t[8];
    _mm256_storeu_si256((__m256i *)t, s01);
    *first = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    _mm256_storeu_si256((__m256i *)t, s23);
    *sum = *first + t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    *d = top / 127.0f;
#else
    float amax = 0.0f;
    for (int i = 0; i < QK; i++)
        amax = fmaxf(amax, fabsf(v[i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int all = 0, half16 = 0;
    for (int i = 0; i < QK; i++) {
        const int r = (int)lrintf(v[i] * inv);
        (i < QK / 2 ? lo : hi - QK / 2)[i] = (int8_t)r;
        all += r;
        half16 += i < QK / 2 ? r : 0;
    }
    *sum = all;
    *first = half16;
    *d = amax / 127.0f;
#endif
}

/* x [M, K] -> q [M, K] int8, d, s and h [M, K / 32] (h: d * the sum of a block's first
 * 16 q, for Q6_K's scales of 16); ``pairs``: q in the paired layout of the 4/5-bit
 * blocks (gguf_common.h), else block by block. */
static void quantize_x(const float *x, int64_t M, int64_t K, int pairs, int8_t *q, float *d,
                       float *s, float *h)
{
    const int64_t nb = K / QK;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < nb; b++) {
            int8_t *o = q + m * K;
            int sum, first;
            float scale;
            quantize_block(x + m * K + b * QK, o + (pairs ? paired(b, 0, nb) : b * QK),
                           o + (pairs ? paired(b, 16, nb) : b * QK + 16), &scale, &sum, &first);
            d[m * nb + b] = scale;
            s[m * nb + b] = scale * (float)sum;
            h[m * nb + b] = scale * (float)first;
        }
    }
}

int tandem_linear_gguf_simd(void) { return GGUF_SIMD; }

/* F16 / BF16: out [M, N] = x @ W^T with x as it is, in the same bands as the blocks */
static void linear_half(int type, const float *x, int64_t M, int64_t K, const uint8_t *w,
                        int64_t N, float *out)
{
    const int64_t bands = (N + BAND - 1) / BAND, row = 2 * K;
    const int64_t chunk = bands / (4 * (int64_t)omp_get_max_threads()) + 1;
#pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t band = 0; band < bands; band++) {
        const int64_t n0 = band * BAND, n1 = n0 + BAND < N ? n0 + BAND : N;
        for (int64_t m = 0; m < M; m += RB) {
            const int R = (int)(M - m < RB ? M - m : RB);
            tandem_gguf_half_rows(type, R, w + n0 * row, (int)(n1 - n0), row, x + m * K, K,
                                  out + m * N + n0, N);
        }
    }
}

/* out [M, N] = x [M, K] @ W^T, W: N rows of K / 32 blocks of ``type`` (K / 256 of a
 * K-quant, K 16-bit values of F16 / BF16). 0, or -1 when the type is unknown, K is not a
 * multiple of the block, or scratch memory is short. */
int tandem_linear_gguf(int type, const float *x, int64_t M, int64_t K, const uint8_t *w,
                       int64_t N, float *out)
{
    const int64_t bb = tandem_gguf_block_bytes(type);
    const int kq = is_kquant(type);
    if (bb < 0 || K % block_values(type) != 0 || M < 0 || N < 0)
        return -1;
    if (is_half(type)) {
        linear_half(type, x, M, K, w, N, out);
        return 0;
    }
    const int64_t nb = K / QK, row = K / block_values(type) * bb;
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
    quantize_x(x, M, K, !kq && type != Q8_0, xq, xd, xs, xh);
    const int64_t bands = (N + BAND - 1) / BAND;
    /* a few runs of bands per thread, handed out in turn: a thread slowed by a busy core
     * takes fewer, and each run is still one long stream of weight rows */
    const int64_t chunk = bands / (4 * (int64_t)omp_get_max_threads()) + 1;
#pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t band = 0; band < bands; band++) {
        const int64_t n0 = band * BAND, n1 = n0 + BAND < N ? n0 + BAND : N;
        for (int64_t m = 0; m < M; m += RB) {
            const int R = (int)(M - m < RB ? M - m : RB);
            const int8_t *q = xq + m * K;
            const float *d = xd + m * nb, *s = xs + m * nb, *h = xh + m * nb;
            if (!kq) {
                tandem_gguf_rows(type, R, w + n0 * row, (int)(n1 - n0), row, q, d, s, K,
                                 out + m * N + n0, N);
                continue;
            }
            /* two weight rows at a time where R <= 2 (Q4_K to Q6_K): the second row's
             * sums fill the vector units while the first one's wait */
            const int two = R <= 2 && type >= Q4_K;
            for (int64_t n = n0; n < n1;) {
                const int W = two && n + 2 <= n1 ? 2 : 1;
                tandem_gguf_k_rows(type, R, W, w + n * row, row, q, d, s, h, K,
                                   out + m * N + n, N);
                n += W;
            }
        }
    }
    return 0;
}

/* int8 linear layer in one call: per-token quantization of x, a VNNI matmul against a
 * weight packed once, the rescale (and bias) in the matmul's epilogue, and the outlier
 * channels in float32.
 *
 * Weight layout (made once by tandem.kernels.ops.linear.Int8Weight): N padded to a
 * multiple of 32, K to a multiple of 4; packed[n / 16][k / 4][n % 16][k % 4] int8, so
 * one 64-byte load holds four k of sixteen output channels, which is what vpdpbusd
 * multiplies. vpdpbusd takes unsigned x bytes, which is what the quantization gives
 * (quantize.c: x ~= xs * (u - zero), u in 0..255); wsum[n] = sum_k w[n, k] takes each
 * row's zero point back out in the epilogue.
 *
 * Outliers (quantize.c's rule, per entry) quantize to the zero point, so they add nothing
 * to the int8 matmul; the epilogue adds them, each row's few outliers in fp32 times the
 * dequantized weight column of their input channel. Those columns are gathered once per
 * call from the int8 values, where the packed layout puts sixteen channels in one cache
 * line (a float weight [N, K] would take a line per channel).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tandem_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>

#define MR 8  /* rows of x per micro-kernel */
#define NR TANDEM_PACK_CHANNELS /* output channels per micro-kernel: two 16-lane blocks */
#define MB 256 /* rows of x per cache block (its bytes stay in L2 across a row of tiles) */

typedef struct {
    const uint8_t *xq;   /* [M, Kp] u8 */
    const float *xs;     /* [M] row scales */
    const int32_t *zero; /* [M] row zero points */
    const int8_t *w;     /* packed weight */
    const int32_t *wsum; /* [N] */
    const float *ws;     /* [N] channel scales */
    const float *bias;   /* [N] or NULL */
    const int64_t *first; /* [Mp + 1]: row m's outliers are entries first[m]..first[m+1]-1 */
    const int32_t *col;   /* per entry: its column of wo */
    const float *val;     /* per entry: x there */
    const float *wo;      /* [C, Np] the weight at the outliers' channels, zero past N */
    float *out;           /* [M, N] */
    int64_t Kp, N, Np;
} Gemm;

static inline __mmask16 lanes(const Gemm *g, int64_t n)
{
    const int64_t left = g->N - n;
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* (acc - zero[m] * wsum) * xs[m] * ws + bias for channels n..n+15 (0 past N) */
static inline __m512 dequant(const Gemm *g, int64_t m, int64_t n, __m512i acc)
{
    const __mmask16 mask = lanes(g, n);
    const __m512i wsum = _mm512_maskz_loadu_epi32(mask, g->wsum + n);
    const __m512i comp = _mm512_mullo_epi32(_mm512_set1_epi32(g->zero[m]), wsum);
    const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, comp));
    const __m512 o = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(g->xs[m])),
                                   _mm512_maskz_loadu_ps(mask, g->ws + n));
    return g->bias ? _mm512_add_ps(o, _mm512_maskz_loadu_ps(mask, g->bias + n)) : o;
}

static inline void store(const Gemm *g, int64_t m, int64_t n, __m512 f0, __m512 f1)
{
    _mm512_mask_storeu_ps(g->out + m * g->N + n, lanes(g, n), f0);
    _mm512_mask_storeu_ps(g->out + m * g->N + n + 16, lanes(g, n + 16), f1);
}

#define BCAST(r) _mm512_set1_epi32(*(const int32_t *)(x + (r) * kp + k))
#define STEP(r, a0, a1)                                                                        \
    do {                                                                                       \
        const __m512i v = BCAST(r);                                                            \
        a0 = _mm512_dpbusd_epi32(a0, v, b0);                                                   \
        a1 = _mm512_dpbusd_epi32(a1, v, b1);                                                   \
    } while (0)
/* The epilogue of R rows from m0 (R = MR or 1, a constant where inlined): the rescale
 * of the int32 sums c[2r], c[2r+1], each row's outliers in fp32, then the stores of the
 * first ``rows`` rows (the rest are padding of a tail of M). */
static inline __attribute__((always_inline)) void
finish(const Gemm *g, int64_t m0, int64_t n0, const int R, int64_t rows, const __m512i *c)
{
    __m512 f[2 * MR];
    for (int r = 0; r < R; r++) {
        f[2 * r] = dequant(g, m0 + r, n0, c[2 * r]);
        f[2 * r + 1] = dequant(g, m0 + r, n0 + 16, c[2 * r + 1]);
    }
    for (int r = 0; r < R; r++)
        for (int64_t e = g->first[m0 + r]; e < g->first[m0 + r + 1]; e++) {
            const float *w = g->wo + g->col[e] * g->Np + n0;
            const __m512 v = _mm512_set1_ps(g->val[e]);
            f[2 * r] = _mm512_fmadd_ps(v, _mm512_loadu_ps(w), f[2 * r]);
            f[2 * r + 1] = _mm512_fmadd_ps(v, _mm512_loadu_ps(w + 16), f[2 * r + 1]);
        }
    for (int r = 0; r < R && r < rows; r++)
        store(g, m0 + r, n0, f[2 * r], f[2 * r + 1]);
}

/* MR rows of x from m0 against NR channels from n0: sixteen accumulators in registers,
 * written to acc at the end. Kept apart from the epilogue (noinline): with both in one
 * function GCC spills accumulators inside the k loop. */
static __attribute__((noinline)) void dot8(const Gemm *g, int64_t m0, int64_t n0,
                                           __m512i acc[16])
{
    /* the lines of the next tile of channels, which this thread takes next: fetched
     * during this one, so that the weight streams from memory behind the matmul */
    const int64_t ahead = n0 + NR < g->Np ? 2 * g->Kp * 16 : 0;
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
            c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00,
            c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    const int64_t kp = g->Kp;
    const int8_t *w0 = g->w + (n0 / 16) * kp * 16;
    const int8_t *w1 = w0 + kp * 16;
    const uint8_t *x = g->xq + m0 * kp;
    for (int64_t k = 0; k < kp; k += 4) {
        const __m512i b0 = _mm512_loadu_si512((const void *)(w0 + k * 16));
        const __m512i b1 = _mm512_loadu_si512((const void *)(w1 + k * 16));
        _mm_prefetch((const char *)(w0 + ahead + k * 16), _MM_HINT_T1);
        _mm_prefetch((const char *)(w1 + ahead + k * 16), _MM_HINT_T1);
        STEP(0, c00, c01);
        STEP(1, c10, c11);
        STEP(2, c20, c21);
        STEP(3, c30, c31);
        STEP(4, c40, c41);
        STEP(5, c50, c51);
        STEP(6, c60, c61);
        STEP(7, c70, c71);
    }
    acc[0] = c00, acc[1] = c01, acc[2] = c10, acc[3] = c11, acc[4] = c20, acc[5] = c21;
    acc[6] = c30, acc[7] = c31, acc[8] = c40, acc[9] = c41, acc[10] = c50, acc[11] = c51;
    acc[12] = c60, acc[13] = c61, acc[14] = c70, acc[15] = c71;
}

/* dot8 and its epilogue; ``rows`` < MR for a padded tail of M */
static void tile8(const Gemm *g, int64_t m0, int64_t n0, int64_t rows)
{
    __m512i c[2 * MR];
    dot8(g, m0, n0, c);
    finish(g, m0, n0, MR, rows, c);
}

/* one row of x (the tails of M) */
static void tile1(const Gemm *g, int64_t m0, int64_t n0)
{
    __m512i c00 = _mm512_setzero_si512(), c01 = c00;
    const int64_t kp = g->Kp;
    const int8_t *w0 = g->w + (n0 / 16) * kp * 16;
    const int8_t *w1 = w0 + kp * 16;
    const uint8_t *x = g->xq + m0 * kp;
    for (int64_t k = 0; k < kp; k += 4) {
        const __m512i b0 = _mm512_loadu_si512((const void *)(w0 + k * 16));
        const __m512i b1 = _mm512_loadu_si512((const void *)(w1 + k * 16));
        STEP(0, c00, c01);
    }
    const __m512i c[2] = {c00, c01};
    finish(g, m0, n0, 1, 1, c);
}

static void tiles(const Gemm *g, int64_t m0, int64_t m1, int64_t n0)
{
    int64_t m = m0;
    for (; m + MR <= m1; m += MR)
        tile8(g, m, n0, MR);
    if (m1 - m >= MR / 2) /* a padded tile costs less than four single rows */
        tile8(g, m, n0, m1 - m);
    else
        for (; m < m1; m++)
            tile1(g, m, n0);
}

/* row m's outliers (|x| above its bound; the exact complement of quantize.c's kept test)
 * into col (their channels, for now) and val, in channel order */
static void row_outliers(const float *r, int64_t K, float bound, int32_t *col, float *val)
{
    const __m512 b = _mm512_set1_ps(bound);
    int64_t e = 0;
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = K - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (K - k)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(t, r + k);
        unsigned hit = _mm512_mask_cmp_ps_mask(t, _mm512_abs_ps(x), b, _CMP_NLE_UQ);
        for (; hit; hit &= hit - 1, e++) {
            const int i = __builtin_ctz(hit);
            col[e] = (int32_t)(k + i);
            val[e] = r[k + i];
        }
    }
}

/* The outliers of every row as entries (first, col, val), col numbering the distinct
 * channels 0..C-1; cols: [K] those channels. Returns C, or -1 when out of memory. */
static int64_t gather_outliers(const float *x, int64_t M, int64_t K, const float *bound,
                               const int64_t *first, int32_t *col, float *val, int64_t *cols)
{
    const int64_t total = first[M];
#pragma omp parallel for schedule(static) if (M * K > 262144)
    for (int64_t m = 0; m < M; m++)
        if (first[m + 1] > first[m])
            row_outliers(x + m * K, K, bound[m], col + first[m], val + first[m]);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)K + 64);
    if (!slot)
        return -1;
    for (int64_t k = 0; k < K; k++)
        slot[k] = -1;
    int64_t C = 0;
    for (int64_t e = 0; e < total; e++) {
        if (slot[col[e]] < 0) {
            slot[col[e]] = (int32_t)C;
            cols[C++] = col[e];
        }
        col[e] = slot[col[e]];
    }
    free(slot);
    return C;
}

/* x: [M, K] fp32; packed/wsum/ws/bias as above (N output channels, K padded to Kp).
 * out: [M, N] fp32.
 * Returns the number of outliers, or -1 when scratch memory could not be had. */
int64_t tandem_linear_i8(const float *x, int64_t M, int64_t K, const int8_t *packed,
                         const int32_t *wsum, const float *ws, const float *bias, int64_t N,
                         int64_t Kp, float rel, float *out)
{
    const int64_t Np = (N + NR - 1) / NR * NR;
    const int64_t Mp = (M + MR - 1) / MR * MR; /* rows past M: padding for tile8 */
    uint8_t *xq = calloc((size_t)(Mp * Kp) + 64, 1);
    float *xs = calloc((size_t)Mp + 16, sizeof(float));
    int32_t *zero = calloc((size_t)Mp + 16, sizeof(int32_t));
    float *bound = malloc(sizeof(float) * (size_t)M + 64);
    int32_t *count = malloc(sizeof(int32_t) * (size_t)M + 64);
    int64_t *first = malloc(sizeof(int64_t) * (size_t)(Mp + 1) + 64);
    int64_t *cols = malloc(sizeof(int64_t) * (size_t)K + 64);
    int32_t *col = NULL;
    float *val = NULL, *wo = NULL;
    int64_t total = -1;
    if (!xq || !xs || !zero || !bound || !count || !first || !cols)
        goto done;
    total = tandem_quantize_rows_u8(x, M, K, rel, xq, Kp, 0, xs, zero, bound, count);
    first[0] = 0;
    for (int64_t m = 0; m < Mp; m++)
        first[m + 1] = first[m] + (m < M ? count[m] : 0);
    if (total) { /* the entries, and the weight's columns at their channels: [C, Np] */
        col = malloc(sizeof(int32_t) * (size_t)total + 64);
        val = malloc(sizeof(float) * (size_t)total + 64);
        const int64_t C = col && val ? gather_outliers(x, M, K, bound, first, col, val, cols) : -1;
        wo = C >= 0 ? malloc(sizeof(float) * (size_t)(C * Np) + 64) : NULL;
        if (!wo) {
            total = -1;
            goto done;
        }
#pragma omp parallel for schedule(static) if (N * C > 65536)
        for (int64_t n = 0; n < Np; n++) {
            const int8_t *block = packed + (n / 16) * Kp * 16 + (n % 16) * 4;
            for (int64_t j = 0; j < C; j++)
                wo[j * Np + n] = n < N ? block[(cols[j] / 4) * 64 + cols[j] % 4] * ws[n] : 0.0f;
        }
    }
    const Gemm g = {xq, xs, zero, packed, wsum, ws, bias, first, col, val, wo, out, Kp, N, Np};
    const int64_t tiles_n = Np / NR, blocks_m = (M + MB - 1) / MB;
#pragma omp parallel for schedule(static) if (M * N * K > 262144)
    for (int64_t t = 0; t < tiles_n * blocks_m; t++) {
        const int64_t m0 = (t / tiles_n) * MB;
        const int64_t m1 = m0 + MB < M ? m0 + MB : M;
        tiles(&g, m0, m1, (t % tiles_n) * NR);
    }
done:
    free(xq), free(xs), free(zero), free(bound), free(count), free(first), free(cols);
    free(col), free(val), free(wo);
    return total;
}

int tandem_linear_i8_available(void) { return 1; }

#else /* no AVX-512 VNNI: the caller takes torch's int8 matmul */

int64_t tandem_linear_i8(const float *x, int64_t M, int64_t K, const int8_t *packed,
                         const int32_t *wsum, const float *ws, const float *bias, int64_t N,
                         int64_t Kp, float rel, float *out)
{
    (void)x, (void)M, (void)K, (void)packed, (void)wsum, (void)ws, (void)bias;
    (void)N, (void)Kp, (void)rel, (void)out;
    return -2;
}

int tandem_linear_i8_available(void) { return 0; }

#endif

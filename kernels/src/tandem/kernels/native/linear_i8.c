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
 * Outlier columns (quantize.c's rule) quantize to the zero point, so they add nothing to
 * the matmul; they are added in fp32 from the float weight after it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int64_t tandem_quantize_rows_u8(const float *x, int64_t M, int64_t K, float rel, uint8_t *q,
                                int64_t ldq, int flip, float *scale, int32_t *zero,
                                uint8_t *outlier);

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>

#define MR 8  /* rows of x per micro-kernel */
#define NR 32 /* output channels per micro-kernel: two 16-lane blocks */
#define MB 256 /* rows of x per cache block (its bytes stay in L2 across a row of tiles) */

typedef struct {
    const uint8_t *xq;   /* [M, Kp] u8 */
    const float *xs;     /* [M] row scales */
    const int32_t *zero; /* [M] row zero points */
    const int8_t *w;     /* packed weight */
    const int32_t *wsum; /* [N] */
    const float *ws;   /* [N] channel scales */
    const float *bias; /* [N] or NULL */
    float *out;        /* [M, N] */
    int64_t Kp, N;
} Gemm;

/* out[m, n0..n0+31] = (acc - zero[m] * wsum) * xs[m] * ws + bias, lanes past N left alone */
static inline void store_row(const Gemm *g, int64_t m, int64_t n0, __m512i a0, __m512i a1)
{
    const __m512i acc[2] = {a0, a1};
    for (int h = 0; h < 2; h++) {
        const int64_t n = n0 + 16 * h;
        if (n >= g->N)
            break;
        const int64_t left = g->N - n;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        const __m512i wsum = _mm512_maskz_loadu_epi32(mask, g->wsum + n);
        const __m512i comp = _mm512_mullo_epi32(_mm512_set1_epi32(g->zero[m]), wsum);
        const __m512 ws = _mm512_maskz_loadu_ps(mask, g->ws + n);
        const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[h], comp));
        __m512 o = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(g->xs[m])), ws);
        if (g->bias)
            o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(mask, g->bias + n));
        _mm512_mask_storeu_ps(g->out + m * g->N + n, mask, o);
    }
}

#define BCAST(r) _mm512_set1_epi32(*(const int32_t *)(x + (r) * kp + k))
#define STEP(r, a0, a1)                                                                        \
    do {                                                                                       \
        const __m512i v = BCAST(r);                                                            \
        a0 = _mm512_dpbusd_epi32(a0, v, b0);                                                   \
        a1 = _mm512_dpbusd_epi32(a1, v, b1);                                                   \
    } while (0)

/* MR rows of x from m0 against NR channels from n0: sixteen accumulators in registers */
static void tile8(const Gemm *g, int64_t m0, int64_t n0)
{
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
        STEP(0, c00, c01);
        STEP(1, c10, c11);
        STEP(2, c20, c21);
        STEP(3, c30, c31);
        STEP(4, c40, c41);
        STEP(5, c50, c51);
        STEP(6, c60, c61);
        STEP(7, c70, c71);
    }
    store_row(g, m0 + 0, n0, c00, c01);
    store_row(g, m0 + 1, n0, c10, c11);
    store_row(g, m0 + 2, n0, c20, c21);
    store_row(g, m0 + 3, n0, c30, c31);
    store_row(g, m0 + 4, n0, c40, c41);
    store_row(g, m0 + 5, n0, c50, c51);
    store_row(g, m0 + 6, n0, c60, c61);
    store_row(g, m0 + 7, n0, c70, c71);
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
    store_row(g, m0, n0, c00, c01);
}

static void tiles(const Gemm *g, int64_t m0, int64_t m1, int64_t n0)
{
    int64_t m = m0;
    for (; m + MR <= m1; m += MR)
        tile8(g, m, n0);
    for (; m < m1; m++)
        tile1(g, m, n0);
}

/* out[m, n] += sum_j x[m, cols[j]] * w[n, cols[j]]: the outlier columns in fp32.
 * Sixteen channels at a time: their weights at the C columns are gathered into a
 * [C, 16] tile (w is [N, K], so a channel's C values lie in one row), then every row
 * of x adds its C values times the tile. */
static void add_outliers(const float *x, int64_t M, int64_t K, const float *w, int64_t N,
                         const int64_t *cols, int64_t C, float *out)
{
#pragma omp parallel for schedule(static) if (M * N * C > 262144)
    for (int64_t n0 = 0; n0 < N; n0 += 16) {
        const int64_t left = N - n0;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        float *tile = malloc(sizeof(float) * 16 * (size_t)C + 64);
        if (!tile) /* out of memory for a few KB: the lanes fall back to scalar sums */
            for (int64_t n = n0; n < n0 + 16 && n < N; n++)
                for (int64_t m = 0; m < M; m++)
                    for (int64_t j = 0; j < C; j++)
                        out[m * N + n] += x[m * K + cols[j]] * w[n * K + cols[j]];
        else {
            for (int64_t j = 0; j < C; j++)
                for (int64_t l = 0; l < 16; l++)
                    tile[j * 16 + l] = n0 + l < N ? w[(n0 + l) * K + cols[j]] : 0.0f;
            for (int64_t m = 0; m < M; m++) {
                __m512 acc = _mm512_maskz_loadu_ps(mask, out + m * N + n0);
                for (int64_t j = 0; j < C; j++)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + cols[j]]),
                                          _mm512_loadu_ps(tile + j * 16), acc);
                _mm512_mask_storeu_ps(out + m * N + n0, mask, acc);
            }
            free(tile);
        }
    }
}

/* x: [M, K] fp32; packed/wsum/ws/bias as above (N output channels, K padded to Kp);
 * w: [N, K] fp32, the float weight, for the outlier columns. out: [M, N] fp32.
 * Returns the number of outlier columns, or -1 when scratch memory could not be had. */
int64_t tandem_linear_i8(const float *x, int64_t M, int64_t K, const int8_t *packed,
                         const int32_t *wsum, const float *ws, const float *bias, const float *w,
                         int64_t N, int64_t Kp, float rel, float *out)
{
    uint8_t *xq = malloc((size_t)(M * Kp) + 64);
    float *xs = malloc(sizeof(float) * (size_t)M + 64);
    int32_t *zero = malloc(sizeof(int32_t) * (size_t)M + 64);
    uint8_t *outlier = malloc((size_t)K + 64);
    int64_t *cols = malloc(sizeof(int64_t) * (size_t)K + 64);
    int64_t count = -1;
    if (!xq || !xs || !zero || !outlier || !cols)
        goto done;
    count = tandem_quantize_rows_u8(x, M, K, rel, xq, Kp, 0, xs, zero, outlier);
    if (count < 0)
        goto done;
    const Gemm g = {xq, xs, zero, packed, wsum, ws, bias, out, Kp, N};
    const int64_t tiles_n = (N + NR - 1) / NR, blocks_m = (M + MB - 1) / MB;
#pragma omp parallel for schedule(static) if (M * N * K > 262144)
    for (int64_t t = 0; t < tiles_n * blocks_m; t++) {
        const int64_t m0 = (t / tiles_n) * MB;
        const int64_t m1 = m0 + MB < M ? m0 + MB : M;
        tiles(&g, m0, m1, (t % tiles_n) * NR);
    }
    if (count) {
        int64_t c = 0;
        for (int64_t k = 0; k < K; k++)
            if (outlier[k])
                cols[c++] = k;
        add_outliers(x, M, K, w, N, cols, count, out);
    }
done:
    free(xq), free(xs), free(zero), free(outlier), free(cols);
    return count;
}

int tandem_linear_i8_available(void) { return 1; }

#else /* no AVX-512 VNNI: the caller takes torch's int8 matmul */

int64_t tandem_linear_i8(const float *x, int64_t M, int64_t K, const int8_t *packed,
                         const int32_t *wsum, const float *ws, const float *bias, const float *w,
                         int64_t N, int64_t Kp, float rel, float *out)
{
    (void)x, (void)M, (void)K, (void)packed, (void)wsum, (void)ws, (void)bias, (void)w;
    (void)N, (void)Kp, (void)rel, (void)out;
    return -2;
}

int tandem_linear_i8_available(void) { return 0; }

#endif

/* The row kernels of int8 linear layers: per-token quantization before the int8 matmul
 * and the rescale after it, each one pass (the torch versions take 6-8 passes).
 *
 * A column (input channel) holding an activation above the outlier threshold in any row
 * is left out of the quantized rows (its entries become 0): the caller multiplies those
 * columns in float32. The scale of a row is max |x| over its other columns / 127.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* x: [M, K] fp32 -> q: [M, ldq] bytes holding each quantized value plus ``shift`` (0 for
 * int8, 128 for the unsigned bytes of tandem_linear_i8), columns K..ldq-1 holding ``shift``
 * alone; scale: [M]; outlier: [K] (1 = outlier column). Returns the number of outlier
 * columns. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

static inline __mmask16 tail_mask(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* acc[k] = max(acc[k], |r[k]|) */
static void column_max(const float *r, int64_t K, float *acc)
{
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = tail_mask(K - k);
        const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(t, r + k));
        _mm512_mask_storeu_ps(acc + k, t, _mm512_max_ps(_mm512_maskz_loadu_ps(t, acc + k), a));
    }
}

/* one row: its scale (max |x| over kept columns / 127) and its shifted bytes */
static float quantize_row(const float *r, const float *keep, int64_t K, uint8_t *o,
                          int64_t ldq, int shift)
{
    __m512 big16 = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = tail_mask(K - k);
        const __mmask16 kept = _mm512_mask_cmp_ps_mask(
            t, _mm512_maskz_loadu_ps(t, keep + k), _mm512_setzero_ps(), _CMP_NEQ_OQ);
        big16 = _mm512_max_ps(big16, _mm512_abs_ps(_mm512_maskz_loadu_ps(kept, r + k)));
    }
    const float big = _mm512_reduce_max_ps(big16);
    const float s = big > 1e-12f ? big / 127.0f : 1e-12f;
    const __m512 inv = _mm512_set1_ps(1.0f / s), hi = _mm512_set1_ps(127.0f);
    const __m512 lo = _mm512_set1_ps(-127.0f);
    const __m512i bias = _mm512_set1_epi32(shift);
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = tail_mask(K - k);
        const __mmask16 kept = _mm512_mask_cmp_ps_mask(
            t, _mm512_maskz_loadu_ps(t, keep + k), _mm512_setzero_ps(), _CMP_NEQ_OQ);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(kept, r + k), inv);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), bias); /* nearest, even */
        _mm_mask_storeu_epi8(o + k, t, _mm512_cvtepi32_epi8(q));
    }
    for (int64_t k = K; k < ldq; k++)
        o[k] = (uint8_t)shift;
    return s;
}
#else
static void column_max(const float *r, int64_t K, float *acc)
{
    for (int64_t k = 0; k < K; k++)
        acc[k] = fabsf(r[k]) > acc[k] ? fabsf(r[k]) : acc[k];
}

static float quantize_row(const float *r, const float *keep, int64_t K, uint8_t *o,
                          int64_t ldq, int shift)
{
    float big = 0.0f;
    for (int64_t k = 0; k < K; k++)
        if (keep[k] != 0.0f && fabsf(r[k]) > big)
            big = fabsf(r[k]);
    const float s = big > 1e-12f ? big / 127.0f : 1e-12f;
    const float inv = 1.0f / s;
    for (int64_t k = 0; k < K; k++) {
        float v = keep[k] != 0.0f ? nearbyintf(r[k] * inv) : 0.0f;
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        o[k] = (uint8_t)((int)v + shift);
    }
    for (int64_t k = K; k < ldq; k++)
        o[k] = (uint8_t)shift;
    return s;
}
#endif

int64_t tandem_quantize_rows_shifted(const float *x, int64_t M, int64_t K, float threshold,
                                     uint8_t *q, int64_t ldq, int shift, float *scale,
                                     uint8_t *outlier)
{
    /* every loop below is branch-free so that it vectorizes */
    float *keep = malloc(sizeof(float) * (size_t)K + 64); /* 1: quantized, 0: outlier */
    if (!keep)
        return -1;
    for (int64_t k = 0; k < K; k++)
        keep[k] = 0.0f; /* the column's max |x| first */
    for (int64_t m = 0; m < M; m++)
        column_max(x + m * K, K, keep);
    int64_t count = 0;
    for (int64_t k = 0; k < K; k++) {
        outlier[k] = keep[k] > threshold;
        count += outlier[k];
        keep[k] = outlier[k] ? 0.0f : 1.0f;
    }
#pragma omp parallel for schedule(static) if (M * K > 65536)
    for (int64_t m = 0; m < M; m++)
        scale[m] = quantize_row(x + m * K, keep, K, q + m * ldq, ldq, shift);
    free(keep);
    return count;
}

/* x: [M, K] fp32 -> q: [M, K] int8, scale: [M], outlier: [K] (1 = outlier column).
 * Returns the number of outlier columns. */
int64_t tandem_quantize_rows_i8(const float *x, int64_t M, int64_t K, float threshold,
                                int8_t *q, float *scale, uint8_t *outlier)
{
    return tandem_quantize_rows_shifted(x, M, K, threshold, (uint8_t *)q, K, 0, scale, outlier);
}

/* out[m, n] = acc[m, n] * row_scale[m] * col_scale[n] (+ bias[n]); acc: [M, N] int32. */
void tandem_rescale_i32(const int32_t *acc, int64_t M, int64_t N, const float *row_scale,
                        const float *col_scale, const float *bias, float *out)
{
#pragma omp parallel for schedule(static) if (M * N > 65536)
    for (int64_t m = 0; m < M; m++) {
        const int32_t *a = acc + m * N;
        float *o = out + m * N;
        const float s = row_scale[m];
        if (bias) {
#pragma omp simd
            for (int64_t n = 0; n < N; n++)
                o[n] = (float)a[n] * s * col_scale[n] + bias[n];
        } else {
#pragma omp simd
            for (int64_t n = 0; n < N; n++)
                o[n] = (float)a[n] * s * col_scale[n];
        }
    }
}

/* The row kernels of int8 linear layers: per-token quantization before the int8 matmul
 * and the rescale after it, each one pass (the torch versions take 6-8 passes).
 *
 * Outliers: a column (input channel) where some row holds |x| > rel * rms(row) is left out
 * of the quantized rows (its entries quantize to exactly 0): the caller multiplies those
 * columns in float32. The bound is relative so that one rule fits every layer, whatever
 * the scale of its input (a normalized hidden state, or an MLP's product of gates).
 *
 * Rows are quantized asymmetrically: [lo, hi] (the row's range over its kept columns,
 * widened to hold 0) maps onto the 256 byte values, x ~= scale * (u - zero) with u and
 * the zero point in 0..255; 0 maps exactly onto the zero point. Against a symmetric
 * [-max, max] a row whose values lean to one side keeps up to twice the resolution.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* x: [M, K] fp32 -> q: [M, ldq] bytes u ^ flip (flip 0: unsigned u, 0x80: the int8
 * u - 128), columns K..ldq-1 holding the zero point; scale, zero: [M] (zero is the u8
 * zero point); outlier: [K] (1 = outlier column). Returns the number of outlier columns,
 * -1 when scratch memory could not be had. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

static inline __mmask16 tail_mask(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

static float inv_rms(const float *r, int64_t K)
{
    __m512 sq = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(K - k), r + k);
        sq = _mm512_fmadd_ps(v, v, sq);
    }
    const float ms = _mm512_reduce_add_ps(sq) / (float)K;
    return ms > 0.0f ? 1.0f / sqrtf(ms) : 0.0f;
}

/* acc[k] = max(acc[k], |r[k]| * inv) */
static void column_max(const float *r, int64_t K, float inv, float *acc)
{
    const __m512 f = _mm512_set1_ps(inv);
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = tail_mask(K - k);
        const __m512 a = _mm512_mul_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(t, r + k)), f);
        _mm512_mask_storeu_ps(acc + k, t, _mm512_max_ps(_mm512_maskz_loadu_ps(t, acc + k), a));
    }
}

/* one row: its scale and zero point, and its bytes */
static float quantize_row(const float *r, const float *keep, int64_t K, uint8_t *o,
                          int64_t ldq, int flip, int32_t *zero)
{
    __m512 lo16 = _mm512_setzero_ps(), hi16 = lo16;
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = tail_mask(K - k);
        const __mmask16 kept = _mm512_mask_cmp_ps_mask(
            t, _mm512_maskz_loadu_ps(t, keep + k), _mm512_setzero_ps(), _CMP_NEQ_OQ);
        const __m512 v = _mm512_maskz_loadu_ps(kept, r + k);
        lo16 = _mm512_min_ps(lo16, v);
        hi16 = _mm512_max_ps(hi16, v);
    }
    const float lo = _mm512_reduce_min_ps(lo16), hi = _mm512_reduce_max_ps(hi16);
    const float s = hi - lo > 1e-12f ? (hi - lo) / 255.0f : 1e-12f;
    const float inv = 1.0f / s;
    const int z = (int)nearbyintf(-lo * inv); /* in 0..255: lo <= 0 <= hi */
    *zero = z;
    const __m512 vinv = _mm512_set1_ps(inv), zf = _mm512_set1_ps((float)z);
    const __m512 top = _mm512_set1_ps(255.0f), flat = _mm512_setzero_ps();
    const __m512i vflip = _mm512_set1_epi32(flip);
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = tail_mask(K - k);
        const __mmask16 kept = _mm512_mask_cmp_ps_mask(
            t, _mm512_maskz_loadu_ps(t, keep + k), _mm512_setzero_ps(), _CMP_NEQ_OQ);
        /* nearest-even rounding of x / s, then the zero point: an outlier lands on z */
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(kept, r + k), vinv),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, zf), flat), top);
        const __m512i u = _mm512_xor_si512(_mm512_cvtps_epi32(v), vflip);
        _mm_mask_storeu_epi8(o + k, t, _mm512_cvtepi32_epi8(u));
    }
    for (int64_t k = K; k < ldq; k++)
        o[k] = (uint8_t)(z ^ flip);
    return s;
}
#else
static float inv_rms(const float *r, int64_t K)
{
    float sq = 0.0f;
    for (int64_t k = 0; k < K; k++)
        sq += r[k] * r[k];
    const float ms = sq / (float)K;
    return ms > 0.0f ? 1.0f / sqrtf(ms) : 0.0f;
}

static void column_max(const float *r, int64_t K, float inv, float *acc)
{
    for (int64_t k = 0; k < K; k++) {
        const float a = fabsf(r[k]) * inv;
        acc[k] = a > acc[k] ? a : acc[k];
    }
}

static float quantize_row(const float *r, const float *keep, int64_t K, uint8_t *o,
                          int64_t ldq, int flip, int32_t *zero)
{
    float lo = 0.0f, hi = 0.0f;
    for (int64_t k = 0; k < K; k++)
        if (keep[k] != 0.0f) {
            lo = r[k] < lo ? r[k] : lo;
            hi = r[k] > hi ? r[k] : hi;
        }
    const float s = hi - lo > 1e-12f ? (hi - lo) / 255.0f : 1e-12f;
    const float inv = 1.0f / s;
    const int z = (int)nearbyintf(-lo * inv);
    *zero = z;
    for (int64_t k = 0; k < K; k++) {
        float v = (keep[k] != 0.0f ? nearbyintf(r[k] * inv) : 0.0f) + (float)z;
        v = v > 255.0f ? 255.0f : (v < 0.0f ? 0.0f : v);
        o[k] = (uint8_t)((int)v ^ flip);
    }
    for (int64_t k = K; k < ldq; k++)
        o[k] = (uint8_t)(z ^ flip);
    return s;
}
#endif

int64_t tandem_quantize_rows_u8(const float *x, int64_t M, int64_t K, float rel, uint8_t *q,
                                int64_t ldq, int flip, float *scale, int32_t *zero,
                                uint8_t *outlier)
{
    /* every loop below is branch-free so that it vectorizes */
    float *keep = malloc(sizeof(float) * (size_t)K + 64); /* 1: quantized, 0: outlier */
    if (!keep)
        return -1;
    for (int64_t k = 0; k < K; k++)
        keep[k] = 0.0f; /* the column's max |x| / rms(row) first */
    for (int64_t m = 0; m < M; m++)
        column_max(x + m * K, K, inv_rms(x + m * K, K), keep);
    int64_t count = 0;
    for (int64_t k = 0; k < K; k++) {
        outlier[k] = keep[k] > rel;
        count += outlier[k];
        keep[k] = outlier[k] ? 0.0f : 1.0f;
    }
#pragma omp parallel for schedule(static) if (M * K > 65536)
    for (int64_t m = 0; m < M; m++)
        scale[m] = quantize_row(x + m * K, keep, K, q + m * ldq, ldq, flip, zero + m);
    free(keep);
    return count;
}

/* out[m, n] = (acc[m, n] - row_zero[m] * col_sum[n]) * row_scale[m] * col_scale[n]
 * (+ bias[n]); acc: [M, N] int32, col_sum[n] = sum_k w[n, k]. */
void tandem_rescale_i32(const int32_t *acc, int64_t M, int64_t N, const int32_t *row_zero,
                        const int32_t *col_sum, const float *row_scale, const float *col_scale,
                        const float *bias, float *out)
{
#pragma omp parallel for schedule(static) if (M * N > 65536)
    for (int64_t m = 0; m < M; m++) {
        const int32_t *a = acc + m * N;
        const int32_t z = row_zero[m];
        float *o = out + m * N;
        const float s = row_scale[m];
        if (bias) {
#pragma omp simd
            for (int64_t n = 0; n < N; n++)
                o[n] = (float)(a[n] - z * col_sum[n]) * s * col_scale[n] + bias[n];
        } else {
#pragma omp simd
            for (int64_t n = 0; n < N; n++)
                o[n] = (float)(a[n] - z * col_sum[n]) * s * col_scale[n];
        }
    }
}

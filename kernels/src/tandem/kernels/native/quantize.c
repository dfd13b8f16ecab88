/* The row kernels of int8 linear layers: per-token quantization before the int8 matmul
 * and the rescale after it, each one pass (the torch versions take 6-8 passes).
 *
 * Outliers: an entry with |x| > rel * rms(its row) is left out of its quantized row (it
 * quantizes to exactly 0): the caller multiplies those entries in float32. The bound is
 * relative so that one rule fits every layer, whatever the scale of its input (a
 * normalized hidden state, or an MLP's product of gates). It is per entry, not per
 * column: a column that holds an outlier in some token is an ordinary value in most
 * others, and over a prefill of thousands of tokens the union of such columns grew to a
 * quarter of the down projection's inputs, all multiplied in float32.
 *
 * Rows are quantized asymmetrically: [lo, hi] (the row's range over its kept entries,
 * widened to hold 0) maps onto the 256 byte values, x ~= scale * (u - zero) with u and
 * the zero point in 0..255; 0 maps exactly onto the zero point. Against a symmetric
 * [-max, max] a row whose values lean to one side keeps up to twice the resolution.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tandem_kernels.h"

/* x: [M, K] fp32 -> q: [M, ldq] bytes u ^ flip (flip 0: unsigned u, 0x80: the int8
 * u - 128), columns K..ldq-1 holding the zero point; scale, zero: [M] (zero is the u8
 * zero point); bound: [M] rel * rms(row), the entries above it in absolute value being
 * the row's outliers; count: [M] outliers per row. Returns the number of outliers. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

static inline __mmask16 tail_mask(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

static float rms(const float *r, int64_t K)
{
    __m512 sq = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(K - k), r + k);
        sq = _mm512_fmadd_ps(v, v, sq);
    }
    return sqrtf(_mm512_reduce_add_ps(sq) / (float)K);
}

/* one row: its scale and zero point, its bytes and its number of outliers (> bound) */
static float quantize_row(const float *r, float bound, int64_t K, uint8_t *o, int64_t ldq,
                          int flip, int32_t *zero, int32_t *count)
{
    const __m512 b = _mm512_set1_ps(bound);
    __m512 lo16 = _mm512_setzero_ps(), hi16 = lo16;
    int32_t n = 0;
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 t = tail_mask(K - k);
        const __m512 x = _mm512_maskz_loadu_ps(t, r + k);
        const __mmask16 kept = _mm512_mask_cmp_ps_mask(t, _mm512_abs_ps(x), b, _CMP_LE_OQ);
        n += __builtin_popcount((unsigned)(t & ~kept));
        const __m512 v = _mm512_maskz_mov_ps(kept, x);
        lo16 = _mm512_min_ps(lo16, v);
        hi16 = _mm512_max_ps(hi16, v);
    }
    *count = n;
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
        const __m512 x = _mm512_maskz_loadu_ps(t, r + k);
        const __mmask16 kept = _mm512_mask_cmp_ps_mask(t, _mm512_abs_ps(x), b, _CMP_LE_OQ);
        /* nearest-even rounding of x / s, then the zero point: an outlier lands on z */
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_mov_ps(kept, x), vinv),
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
static float rms(const float *r, int64_t K)
{
    float sq = 0.0f;
    for (int64_t k = 0; k < K; k++)
        sq += r[k] * r[k];
    return sqrtf(sq / (float)K);
}

static float quantize_row(const float *r, float bound, int64_t K, uint8_t *o, int64_t ldq,
                          int flip, int32_t *zero, int32_t *count)
{
    float lo = 0.0f, hi = 0.0f;
    int32_t n = 0;
    for (int64_t k = 0; k < K; k++) {
        const int kept = fabsf(r[k]) <= bound;
        n += !kept;
        lo = kept && r[k] < lo ? r[k] : lo;
        hi = kept && r[k] > hi ? r[k] : hi;
    }
    *count = n;
    const float s = hi - lo > 1e-12f ? (hi - lo) / 255.0f : 1e-12f;
    const float inv = 1.0f / s;
    const int z = (int)nearbyintf(-lo * inv);
    *zero = z;
    for (int64_t k = 0; k < K; k++) {
        float v = (fabsf(r[k]) <= bound ? nearbyintf(r[k] * inv) : 0.0f) + (float)z;
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
                                float *bound, int32_t *count)
{
    int64_t total = 0;
#pragma omp parallel for schedule(static) if (M * K > 65536) reduction(+ : total)
    for (int64_t m = 0; m < M; m++) {
        bound[m] = rel * rms(x + m * K, K);
        scale[m] = quantize_row(x + m * K, bound[m], K, q + m * ldq, ldq, flip, zero + m,
                                count + m);
        total += count[m];
    }
    return total;
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

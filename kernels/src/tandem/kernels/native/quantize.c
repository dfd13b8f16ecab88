/* The row kernels of int8 linear layers: per-token quantization before the int8 matmul
 * and the rescale after it, each one pass (the torch versions take 6-8 passes).
 *
 * A column (input channel) holding an activation above the outlier threshold in any row
 * is left out of the quantized rows (its entries become 0): the caller multiplies those
 * columns in float32. The scale of a row is max |x| over its other columns / 127.
 */
#include <math.h>
#include <stdint.h>

/* x: [M, K] fp32 -> q: [M, K] int8, scale: [M], outlier: [K] (1 = outlier column).
 * Returns the number of outlier columns. */
int64_t tandem_quantize_rows_i8(const float *x, int64_t M, int64_t K, float threshold,
                                int8_t *q, float *scale, uint8_t *outlier)
{
    int64_t count = 0;
    for (int64_t k = 0; k < K; k++)
        outlier[k] = 0;
    for (int64_t m = 0; m < M; m++) {
        const float *r = x + m * K;
        for (int64_t k = 0; k < K; k++)
            if (fabsf(r[k]) > threshold)
                outlier[k] = 1;
    }
    for (int64_t k = 0; k < K; k++)
        count += outlier[k];
#pragma omp parallel for schedule(static) if (M * K > 65536)
    for (int64_t m = 0; m < M; m++) {
        const float *r = x + m * K;
        int8_t *o = q + m * K;
        float big = 0.0f;
        if (count) {
            for (int64_t k = 0; k < K; k++)
                if (!outlier[k] && fabsf(r[k]) > big)
                    big = fabsf(r[k]);
        } else {
#pragma omp simd reduction(max : big)
            for (int64_t k = 0; k < K; k++)
                big = fmaxf(big, fabsf(r[k]));
        }
        const float s = big > 1e-12f ? big / 127.0f : 1e-12f;
        const float inv = 1.0f / s;
        scale[m] = s;
#pragma omp simd
        for (int64_t k = 0; k < K; k++) {
            float v = nearbyintf(r[k] * inv);
            v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
            o[k] = (int8_t)v;
        }
        if (count)
            for (int64_t k = 0; k < K; k++)
                if (outlier[k])
                    o[k] = 0;
    }
    return count;
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

/* Row-wise fp32 kernels for CPUs: residual add + RMSNorm, SiLU-and-mul, rotary.
 *
 * Each is one pass over its rows (the plain-torch versions take 3-6 passes with a
 * temporary each), parallel over rows. Contiguous inner dimensions; rotary also takes
 * a row stride, so q and k can be read straight out of the fused qkv projection.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tandem_kernels.h"
#include "fastmath.h"

/* out = (x + residual) / sqrt(mean((x + residual)^2) + eps) * weight, and
 * summed = x + residual (the next residual). residual may be NULL: plain RMSNorm,
 * summed unused. x, residual, out, summed: [T, C]. */
void tandem_add_rms_norm_f32(const float *x, const float *residual, const float *weight,
                             float eps, int64_t T, int64_t C, float *out, float *summed)
{
#pragma omp parallel for schedule(static) if (T * C > 32768)
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * C;
        float *o = out + t * C, *s = residual ? summed + t * C : o;
        float sq = 0.0f;
        if (residual) {
            const float *r = residual + t * C;
#pragma omp simd reduction(+ : sq)
            for (int64_t i = 0; i < C; i++) {
                const float v = xr[i] + r[i];
                s[i] = v;
                sq += v * v;
            }
        } else {
#pragma omp simd reduction(+ : sq)
            for (int64_t i = 0; i < C; i++)
                sq += xr[i] * xr[i];
            s = (float *)xr;
        }
        const float inv = 1.0f / sqrtf(sq / (float)C + eps);
#pragma omp simd
        for (int64_t i = 0; i < C; i++)
            o[i] = s[i] * inv * weight[i];
    }
}

/* The gate of a gated MLP, one element: silu(g) = g sigmoid(g), the sigmoid without
 * overflow; gelu_tanh(g) = g (1 + tanh(y)) / 2 with y = sqrt(2 / pi) (g + 0.044715 g^3),
 * and tanh |y| = (1 - e) / (1 + e), e = e^-2|y| (no libm call: the loop vectorizes; the
 * error is below 1 - tanh's fp32 rounding). */
static inline float silu_gate(float g)
{
    const float e = exp_nonpositive(-fabsf(g));
    const float sig = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    return g * sig;
}

static inline float gelu_tanh_gate(float g)
{
    const float y = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    const float e = exp_nonpositive(-2.0f * fabsf(y));
    const float th = (1.0f - e) / (1.0f + e);
    return 0.5f * g * (1.0f + (y >= 0.0f ? th : -th));
}

/* out[t, i] = GATE(x[t, i]) * x[t, I + i]; x: [T, 2I], out: [T, I]. */
#define GATED_ROWS(GATE)                                                                  \
    _Pragma("omp parallel for schedule(static) if (T * I > 32768)")                       \
    for (int64_t t = 0; t < T; t++) {                                                    \
        const float *g = x + t * 2 * I, *u = g + I;                                       \
        float *o = out + t * I;                                                           \
        _Pragma("omp simd")                                                               \
        for (int64_t i = 0; i < I; i++)                                                   \
            o[i] = GATE(g[i]) * u[i];                                                     \
    }

void tandem_silu_and_mul_f32(const float *x, int64_t T, int64_t I, float *out)
{
    GATED_ROWS(silu_gate)
}

/* GeGLU */
void tandem_gelu_tanh_and_mul_f32(const float *x, int64_t T, int64_t I, float *out)
{
    GATED_ROWS(gelu_tanh_gate)
}

/* Rotate-half rope: for each token t and head h, with c, s the cos and sin halves of
 * cos_sin[positions[t]] ([P, D]): out = (x1 c - x2 s, x2 c + x1 s), x = (x1, x2).
 * x: [T, H, D] whose rows start row_stride floats apart (heads contiguous), out:
 * [T, H, D] contiguous. */
void tandem_rotary_f32(const int64_t *positions, const float *x, int64_t row_stride,
                       const float *cos_sin, int64_t T, int64_t H, int64_t D, float *out)
{
    tandem_rotary_part_f32(positions, x, row_stride, cos_sin, T, H, D, D, out);
}

/* Partial rotary: the rope above on the leading R of each head's D values (the table
 * [P, R]), the other D - R values copied as they are. */
void tandem_rotary_part_f32(const int64_t *positions, const float *x, int64_t row_stride,
                            const float *cos_sin, int64_t T, int64_t H, int64_t D, int64_t R,
                            float *out)
{
    const int64_t half = R / 2;
#pragma omp parallel for schedule(static) if (T * H * D > 32768)
    for (int64_t t = 0; t < T; t++) {
        const float *c = cos_sin + positions[t] * R, *s = c + half;
        for (int64_t h = 0; h < H; h++) {
            const float *x1 = x + t * row_stride + h * D, *x2 = x1 + half;
            float *o1 = out + (t * H + h) * D, *o2 = o1 + half;
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                const float a = x1[i], b = x2[i];
                o1[i] = a * c[i] - b * s[i];
                o2[i] = b * c[i] + a * s[i];
            }
            if (R < D)
                memcpy(o1 + R, x1 + R, (D - R) * sizeof(float));
        }
    }
}

/* Greedy choice with its raw logprob, one pass per row: tokens[b] = the first index of
 * the row's maximum, logprob[b] = -log(sum_i exp(x_i - max)) (that token's
 * log-softmax). x: [B, V]. Returns the number of rows holding a NaN (their outputs are
 * unspecified: the caller takes another path). */
int64_t tandem_greedy_f32(const float *x, int64_t B, int64_t V, int64_t *tokens,
                          float *logprob)
{
    int64_t nans = 0;
#pragma omp parallel for schedule(static) reduction(+ : nans) if (B * V > 65536)
    for (int64_t b = 0; b < B; b++) {
        const float *r = x + b * V;
        /* the maximum in vectors (NaNs counted, never taken), then its first index */
        float best = -INFINITY;
        int64_t arg = 0, bad = 0;
#pragma omp simd reduction(max : best) reduction(+ : bad)
        for (int64_t i = 0; i < V; i++) {
            const float v = r[i];
            bad += v != v;
            best = v > best ? v : best;
        }
        while (arg < V - 1 && !(r[arg] == best))
            arg++;
        float sum = 0.0f;
        if (best > -INFINITY && best < INFINITY) {
#pragma omp simd reduction(+ : sum)
            for (int64_t i = 0; i < V; i++)
                sum += exp_nonpositive(r[i] - best);
        }
        tokens[b] = arg;
        logprob[b] = sum > 0.0f ? -logf(sum) : 0.0f;
        nans += bad != 0 || !(best > -INFINITY && best < INFINITY);
    }
    return nans;
}

/* Multi-head latent attention (DeepSeek's MLA), fp32, for CPUs: the three steps between a
 * layer's projections, shared by the module path and the decode stack so both give the
 * same numbers.
 *
 * The cache keeps one row a token: its normed latent c (R values) then its rotated k_pe
 * (P values), W = R + P in all, the first W / 2 in the K cache and the rest in the V cache
 * ([N, S, 1, W / 2]). kv_b [H (Nq + V), R] holds each head's key rows (Nq of them: the
 * query's non-rotary dims) then its value rows.
 *
 *   query:  q_lat[t, h] = q_nope[t, h] @ kv_b[h, :Nq]            (into the first R of [W])
 *   attend: o_lat[t, h] = softmax(scale * q[t, h] . rows) @ rows[:, :R]
 *   value:  out[t, h V : (h + 1) V] = kv_b[h, Nq:] @ o_lat[t, h]
 *
 * Softmax is online, one cache block at a time (as paged_attention.c's): the block's
 * scores, a rescale of the running sums when the block raises the maximum, then the
 * weighted rows. Each (token, head) is one work item, its sums in a fixed order, so the
 * results do not depend on the thread count (nor, for the products, on how many tokens
 * a call takes).
 */
#include <math.h>
#include <stdint.h>

#include "tandem_kernels.h"
#include "fastmath.h"

/* Tokens whose products share one pass over a head's rows of kv_b (each output's sum is
 * in the same order for any block: the results do not depend on it). */
#define TOKENS 8

void tandem_latent_query_f32(const tandem_latent_shape *shape, const float *q,
                             const float *kv_b, int64_t T, float *out)
{
    const int64_t H = shape->heads, N = shape->nope, P = shape->rope, V = shape->value;
    const int64_t R = shape->rank, W = R + P, blocks = (T + TOKENS - 1) / TOKENS;
#pragma omp parallel for collapse(2) schedule(static) if (T * H * N * R > 262144)
    for (int64_t h = 0; h < H; h++)
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t t0 = b * TOKENS, t1 = t0 + TOKENS < T ? t0 + TOKENS : T;
            const float *w = kv_b + h * (N + V) * R;
            for (int64_t t = t0; t < t1; t++)
                for (int64_t r = 0; r < R; r++)
                    out[(t * H + h) * W + r] = 0.0f;
            for (int64_t i = 0; i < N; i++) { /* a key row, read once for the block's tokens */
                const float *row = w + i * R;
                for (int64_t t = t0; t < t1; t++) {
                    const float a = q[(t * H + h) * (N + P) + i];
                    float *o = out + (t * H + h) * W;
#pragma omp simd
                    for (int64_t r = 0; r < R; r++)
                        o[r] += a * row[r];
                }
            }
        }
}

void tandem_latent_value_f32(const tandem_latent_shape *shape, const float *o_lat,
                             const float *kv_b, int64_t T, float *out)
{
    const int64_t H = shape->heads, N = shape->nope, V = shape->value, R = shape->rank;
    const int64_t blocks = (T + TOKENS - 1) / TOKENS;
#pragma omp parallel for collapse(2) schedule(static) if (T * H * V * R > 262144)
    for (int64_t h = 0; h < H; h++)
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t t0 = b * TOKENS, t1 = t0 + TOKENS < T ? t0 + TOKENS : T;
            const float *w = kv_b + (h * (N + V) + N) * R;
            for (int64_t j = 0; j < V; j++) { /* a value row, read once for the block */
                const float *row = w + j * R;
                for (int64_t t = t0; t < t1; t++) {
                    const float *x = o_lat + (t * H + h) * R;
                    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                    for (int64_t r = 0; r < R; r++)
                        acc += x[r] * row[r];
                    out[(t * H + h) * V + j] = acc;
                }
            }
        }
}

static inline float dot(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

static inline void axpy(float *acc, float w, const float *x, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        acc[i] += w * x[i];
}

/* One query row q [W] over the first L rows of its sequence (table) -> out [R]. */
static void attend_row(const tandem_attention *a, const int32_t *table, int64_t L,
                       const float *q, int64_t R, float *out)
{
    const int64_t half = a->head_dim, S = a->block_size;
    const int64_t lo = R < half ? R : half; /* the latent's values in the K half */
    float score[TANDEM_LATENT_MAX_BLOCK];
    float most = -INFINITY, sum = 0.0f;
    for (int64_t r = 0; r < R; r++)
        out[r] = 0.0f;
    for (int64_t j0 = 0; j0 < L; j0 += S) {
        const int64_t n = L - j0 < S ? L - j0 : S;
        const int64_t base = (int64_t)table[j0 / S] * S * half;
        float top = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float *k = a->k_cache + base + j * half, *v = a->v_cache + base + j * half;
            const float s = (dot(q, k, half) + dot(q + half, v, half)) * a->scale;
            score[j] = s;
            top = s > top ? s : top;
        }
        if (top > most) { /* the block raised the maximum: rescale what is summed */
            const float f = most == -INFINITY ? 0.0f : exp_nonpositive(most - top);
            sum *= f;
            for (int64_t r = 0; r < R; r++)
                out[r] *= f;
            most = top;
        }
        for (int64_t j = 0; j < n; j++) {
            const float e = exp_nonpositive(score[j] - most);
            sum += e;
            axpy(out, e, a->k_cache + base + j * half, lo);
            if (R > half)
                axpy(out + half, e, a->v_cache + base + j * half, R - half);
        }
    }
    const float inv = 1.0f / sum;
    for (int64_t r = 0; r < R; r++)
        out[r] *= inv;
}

int tandem_latent_attend_f32(const tandem_attention *attention, const tandem_step *step,
                             const float *q, int64_t rank, float *out)
{
    const int64_t H = attention->heads, W = 2 * attention->head_dim, T = step->tokens;
    if (attention->block_size > TANDEM_LATENT_MAX_BLOCK || rank > W)
        return -1;
#pragma omp parallel for collapse(2) schedule(static) if (T * H >= 4)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            /* the token's sequence b and the rows it sees: a decode all of them, a
             * prefill's token its causal prefix */
            int64_t b = t, L;
            if (step->cu_seqlens) {
                b = 0;
                while (step->cu_seqlens[b + 1] <= t)
                    b++;
                const int64_t after = step->cu_seqlens[b + 1] - 1 - t;
                L = step->seq_lens[b] - after;
            } else {
                L = step->seq_lens[b];
            }
            const int32_t *table = step->block_tables + b * step->table_width;
            attend_row(attention, table, L, q + (t * H + h) * W, rank,
                       out + (t * H + h) * rank);
        }
    return 0;
}

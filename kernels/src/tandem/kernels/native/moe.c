/* Mixture-of-experts steps shared by the module path (tandem.kernels.ops.moe, on fp32 CPU
 * tensors) and the decode stack's MoE layers (decode_moe.c): softmax routing, the
 * weighted sum of each token's experts and a gated shared expert's share. One kernel for
 * both, so the two paths agree bit for bit. */
#include <stdint.h>

#include "fastmath.h"
#include "tandem_kernels.h"

/* Whether (p, e) comes before (q, f) in the routing order: more probable first, the lower
 * index first among equals. */
static inline int before(float p, int64_t e, float q, int64_t f)
{
    return p > q || (p == q && e < f);
}

void tandem_moe_route_f32(const float *logits, int64_t T, int64_t E, int64_t K, int normalize,
                          float *weights, int64_t *ids)
{
    for (int64_t t = 0; t < T; t++) {
        const float *l = logits + t * E;
        float *w = weights + t * K;
        int64_t *id = ids + t * K;
        float top = l[0];
        for (int64_t e = 1; e < E; e++)
            top = l[e] > top ? l[e] : top;
        float sum = 0.0f;
        for (int64_t e = 0; e < E; e++)
            sum += exp_nonpositive(l[e] - top);
        const float inv = 1.0f / sum;
        /* K passes, each taking the first expert in routing order after the last taken */
        float last_p = 0.0f;
        int64_t last_e = -1;
        for (int64_t k = 0; k < K; k++) {
            float best_p = -1.0f;
            int64_t best_e = -1;
            for (int64_t e = 0; e < E; e++) {
                const float p = exp_nonpositive(l[e] - top) * inv;
                if (last_e >= 0 && !before(last_p, last_e, p, e))
                    continue;
                if (best_e < 0 || before(p, e, best_p, best_e))
                    best_p = p, best_e = e;
            }
            w[k] = best_p;
            id[k] = best_e;
            last_p = best_p, last_e = best_e;
        }
        if (normalize) {
            float chosen = 0.0f;
            for (int64_t k = 0; k < K; k++)
                chosen += w[k];
            for (int64_t k = 0; k < K; k++)
                w[k] /= chosen;
        }
    }
}

void tandem_moe_sum_f32(const float *done, const float *weights, int64_t T, int64_t K, int64_t C,
                        float *out)
{
    for (int64_t t = 0; t < T; t++) {
        float *o = out + t * C;
        const float *w = weights + t * K;
        const float *d = done + t * K * C;
        if (K <= 0) {
            for (int64_t c = 0; c < C; c++)
                o[c] = 0.0f;
            continue;
        }
        for (int64_t c = 0; c < C; c++)
            o[c] = w[0] * d[c];
        for (int64_t k = 1; k < K; k++)
            for (int64_t c = 0; c < C; c++)
                o[c] += w[k] * d[k * C + c];
    }
}

void tandem_moe_gate_add_f32(const float *shared, const float *gate, int64_t T, int64_t C,
                             float *out)
{
    for (int64_t t = 0; t < T; t++) {
        const float g = gate[t];
        const float e = exp_nonpositive(g >= 0.0f ? -g : g); /* e^-|g| */
        const float s = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        for (int64_t c = 0; c < C; c++)
            out[t * C + c] += shared[t * C + c] * s;
    }
}

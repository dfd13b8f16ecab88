/* Mixture-of-experts steps shared by the module path (tandem.kernels.ops.moe, on fp32 CPU
 * tensors) and the decode stack's MoE layers (decode_moe.c): the routing (softmax, or
 * DeepSeek-V3's group-limited sigmoid), the weighted sum of each token's experts and a
 * gated shared expert's share. One kernel for both, so the two paths agree bit for bit;
 * the experts are chosen among equal scores as torch.topk chooses them (topk.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fastmath.h"
#include "tandem_kernels.h"
#include "topk.h"

/* one token's softmax routing: probabilities in q (scratch [E]) */
static void route_softmax(const tandem_moe_routing *r, const float *l, pair *q, float *w,
                          int64_t *ids)
{
    const int64_t E = r->experts, K = r->top_k;
    float top = l[0];
    for (int64_t e = 1; e < E; e++)
        top = l[e] > top ? l[e] : top;
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++)
        sum += q[e].p = exp_nonpositive(l[e] - top);
    for (int64_t e = 0; e < E; e++)
        q[e].p /= sum, q[e].e = e;
    topk_pairs(q, E, K);
    float chosen = 0.0f;
    for (int64_t k = 0; k < K; k++)
        w[k] = q[k].p, ids[k] = q[k].e, chosen += q[k].p;
    if (r->normalize)
        for (int64_t k = 0; k < K; k++)
            w[k] /= chosen;
}

/* a group's worth: the sum of its (up to) two best choice scores c [n] */
static float worth(const float *c, int64_t n)
{
    pair best = {c[0], 0}, next = {-INFINITY, -1};
    for (int64_t i = 1; i < n; i++) {
        const pair v = {c[i], i};
        if (above(&v, &best))
            next = best, best = v;
        else if (next.e < 0 || above(&v, &next))
            next = v;
    }
    return n < 2 ? best.p : best.p + next.p;
}

/* one token's group-limited sigmoid routing: scores in s, the choice's in c, the
 * eligible experts' in q, the groups' worth in g (scratch [E], [E], [E], [G]). The groups
 * kept are those torch.topk keeps of the worths; their experts compete, the others are
 * -inf, and the K best are torch.topk's (in its order). */
static void route_groups(const tandem_moe_routing *r, const float *l, float *s, float *c,
                         pair *q, pair *g, float *w, int64_t *ids)
{
    const int64_t E = r->experts, K = r->top_k, G = r->groups, size = E / G;
    for (int64_t e = 0; e < E; e++) {
        s[e] = sigmoid(l[e]);
        c[e] = r->score_bias == NULL ? s[e] : s[e] + r->score_bias[e];
    }
    for (int64_t j = 0; j < G; j++)
        g[j].p = worth(c + j * size, size), g[j].e = j;
    topk_pairs(g, G, r->group_top);
    for (int64_t e = 0; e < E; e++)
        q[e].p = -INFINITY, q[e].e = e;
    for (int64_t j = 0; j < r->group_top; j++)
        for (int64_t e = g[j].e * size; e < (g[j].e + 1) * size; e++)
            q[e].p = c[e];
    topk_pairs(q, E, K);
    float chosen = 0.0f;
    for (int64_t k = 0; k < K; k++)
        w[k] = s[q[k].e], ids[k] = q[k].e, chosen += w[k];
    for (int64_t k = 0; k < K; k++) {
        if (r->normalize)
            w[k] /= chosen + 1e-20f;
        w[k] *= r->scaling;
    }
}

/* whether the routing is one this kernel takes (tandem_moe_route_f32's bounds) */
static int routes(const tandem_moe_routing *r)
{
    const int64_t E = r->experts, K = r->top_k, G = r->groups;
    if (K < 1 || K > E || K > TANDEM_MOE_MAX_TOP_K || K * TANDEM_MOE_PARTIAL_SORT <= E)
        return 0;
    if (r->scoring == TANDEM_MOE_SOFTMAX)
        return 1;
    return r->scoring == TANDEM_MOE_SIGMOID_GROUPS && G >= 1 && E % G == 0 &&
           r->group_top >= 1 && r->group_top <= G &&
           r->group_top * TANDEM_MOE_PARTIAL_SORT > G;
}

int tandem_moe_route_f32(const tandem_moe_routing *routing, const float *logits, int64_t T,
                         float *weights, int64_t *ids)
{
    /* E < 64 K: pairs and two scores for every expert, pairs for every group (G <= E) */
    pair q[TANDEM_MOE_MAX_TOP_K * TANDEM_MOE_PARTIAL_SORT];
    pair g[TANDEM_MOE_MAX_TOP_K * TANDEM_MOE_PARTIAL_SORT];
    float s[TANDEM_MOE_MAX_TOP_K * TANDEM_MOE_PARTIAL_SORT];
    float c[TANDEM_MOE_MAX_TOP_K * TANDEM_MOE_PARTIAL_SORT];
    const tandem_moe_routing *r = routing;
    if (!routes(r))
        return -1;
    const int64_t E = r->experts, K = r->top_k;
    for (int64_t t = 0; t < T; t++) {
        if (r->scoring == TANDEM_MOE_SOFTMAX)
            route_softmax(r, logits + t * E, q, weights + t * K, ids + t * K);
        else
            route_groups(r, logits + t * E, s, c, q, g, weights + t * K, ids + t * K);
    }
    return 0;
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
        const float s = sigmoid(gate[t]);
        for (int64_t c = 0; c < C; c++)
            out[t * C + c] += shared[t * C + c] * s;
    }
}

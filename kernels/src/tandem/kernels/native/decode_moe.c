/* A decode-stack layer's mixture of experts: the module path's SparseMoE step by step
 * (tandem.core.layers.moe), through the same kernels in the same order, so the numbers are
 * the same. The tokens routed to an expert run through it together, in token order (the
 * module path groups them so), each expert's weight in its own form. */
#include <stdint.h>
#include <string.h>

#include "decode_ops.h"
#include "tandem_kernels.h"

/* rows [n, C] = the tokens routed to expert e, in token order; n returned */
static int64_t gather(const int64_t *ids, int64_t T, int64_t K, int64_t e, const float *x,
                      int64_t C, float *rows)
{
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++)
            if (ids[t * K + k] == e)
                memcpy(rows + n++ * C, x + t * C, C * sizeof(float));
    return n;
}

/* done [t K + k] = y's rows in the order gather took them (the pairs routed to e) */
static void scatter(const int64_t *ids, int64_t T, int64_t K, int64_t e, const float *y,
                    int64_t C, float *done)
{
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++)
            if (ids[t * K + k] == e)
                memcpy(done + (t * K + k) * C, y + n++ * C, C * sizeof(float));
}

int stack_moe(const tandem_layer *ly, int64_t T, int64_t C, const float *x, float *out,
              const stack_scratch *s)
{
    const tandem_moe *m = ly->moe;
    const int64_t E = m->experts, K = m->top_k, I = m->intermediate;
    const int64_t IS = m->shared_intermediate, IM = I > IS ? I : IS;
    uintptr_t at = ((uintptr_t)s->moe + 7) & ~(uintptr_t)7;
    int64_t *ids = (int64_t *)at;
    float *weights = (float *)(ids + T * K);
    float *logits = weights + T * K;
    float *done = logits + T * E;
    float *rows = done + T * K * C;
    float *y = rows + T * C;
    float *gu = y + T * C;
    float *act = gu + T * 2 * IM;
    float *gate = act + T * IM;
    if (stack_linear(&m->router, x, T, logits, s->part) != 0)
        return -1;
    if (tandem_moe_route_f32(logits, T, E, K, (int)m->normalize, weights, ids) != 0)
        return -1;
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = gather(ids, T, K, e, x, C, rows);
        if (n == 0)
            continue;
        if (stack_gated(ly, m->gate_up + e, m->down + e, I, rows, n, gu, act, y, s->part) != 0)
            return -1;
        scatter(ids, T, K, e, y, C, done);
    }
    tandem_moe_sum_f32(done, weights, T, K, C, out);
    if (IS == 0)
        return 0;
    if (stack_gated(ly, &m->shared_gate_up, &m->shared_down, IS, x, T, gu, act, y, s->part) != 0)
        return -1;
    if (!m->shared_gated) {
        stack_add(out, y, T * C);
        return 0;
    }
    if (stack_linear(&m->shared_gate, x, T, gate, s->part) != 0)
        return -1;
    tandem_moe_gate_add_f32(y, gate, T, C, out);
    return 0;
}

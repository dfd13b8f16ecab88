/* A decode-stack layer's mixture of experts: the module path's SparseMoE step by step
 * (tandem.core.layers.moe), through the same kernels in the same order, so the numbers are
 * the same. The tokens routed to an expert run through it together, in token order (the
 * module path groups them so), each expert's weight in its own form. On a tensor-parallel
 * rank only the experts it holds run, and the output is the rank's share. */
#include <stdint.h>
#include <string.h>

#include "decode_ops.h"
#include "tandem_kernels.h"

/* at [n] = the pairs (t K + k) routed to expert e, in token order; n returned */
static int64_t pairs_of(const int64_t *ids, int64_t pairs, int64_t e, int64_t *at)
{
    int64_t n = 0;
    for (int64_t p = 0; p < pairs; p++)
        if (ids[p] == e)
            at[n++] = p;
    return n;
}

int stack_moe(const tandem_layer *ly, int64_t T, int64_t C, const float *x, float *out,
              const stack_scratch *s)
{
    const tandem_moe *m = ly->moe;
    const int64_t E = m->routing.experts, K = m->routing.top_k, I = m->intermediate;
    const int64_t IS = m->shared_intermediate, IM = I > IS ? I : IS;
    uintptr_t start = ((uintptr_t)s->moe + 7) & ~(uintptr_t)7;
    int64_t *ids = (int64_t *)start;
    int64_t *pairs = ids + T * K;
    float *weights = (float *)(pairs + T * K);
    float *logits = weights + T * K;
    float *done = logits + T * E;
    float *rows = done + T * K * C;
    float *y = rows + T * C;
    float *gu = y + T * C;
    float *act = gu + T * 2 * IM;
    float *gate = act + T * IM;
    if (stack_linear(&m->router, x, T, logits, s->part) != 0)
        return -1;
    if (tandem_moe_route_f32(&m->routing, logits, T, weights, ids) != 0)
        return -1;
    if (m->held < E) /* the pairs routed to experts held elsewhere add nothing */
        memset(done, 0, (size_t)(T * K * C) * sizeof(float));
    for (int64_t e = 0; e < m->held; e++) {
        const int64_t n = pairs_of(ids, T * K, m->first + e, pairs);
        if (n == 0)
            continue;
        for (int64_t i = 0; i < n; i++) /* rows [n, C]: the tokens of e's pairs */
            memcpy(rows + i * C, x + pairs[i] / K * C, C * sizeof(float));
        if (stack_gated(ly, m->gate_up + e, m->down + e, I, rows, n, gu, act, y, s->part) != 0)
            return -1;
        for (int64_t i = 0; i < n; i++) /* done [t K + k]: each pair's output */
            memcpy(done + pairs[i] * C, y + i * C, C * sizeof(float));
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

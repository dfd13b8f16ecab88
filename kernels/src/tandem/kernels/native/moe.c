/* Mixture-of-experts steps shared by the module path (tandem.kernels.ops.moe, on fp32 CPU
 * tensors) and the decode stack's MoE layers (decode_moe.c): softmax routing, the
 * weighted sum of each token's experts and a gated shared expert's share. One kernel for
 * both, so the two paths agree bit for bit. */
#include <stdint.h>
#include <string.h>

#include "fastmath.h"
#include "tandem_kernels.h"

/* The routing's choice among equal probabilities is torch.topk's on the CPU (the module
 * path's before it came here, and transformers'): an nth_element of (probability, index)
 * pairs at K - 1, then a sort of the K - 1 before it, each step as the C++ library does it
 * (introselect: median-of-three partitions down to 3 pairs, then insertion sort; a heap
 * select past its depth limit), with NaN above every number. */
typedef struct {
    float p;
    int64_t e;
} pair;

static inline int above(const pair *x, const pair *y)
{
    return (x->p != x->p && y->p == y->p) || x->p > y->p;
}

static inline void swap(pair *a, pair *b)
{
    const pair t = *a;
    *a = *b, *b = t;
}

static void insertion_sort(pair *first, pair *last)
{
    if (first == last)
        return;
    for (pair *i = first + 1; i != last; i++) {
        const pair v = *i;
        if (above(&v, first)) {
            memmove(first + 1, first, (size_t)(i - first) * sizeof(pair));
            *first = v;
            continue;
        }
        pair *at = i;
        for (; above(&v, at - 1); at--)
            *at = *(at - 1);
        *at = v;
    }
}

/* the max-heap (in `above` order reversed: its top is the least above) of the C++ library */
static void sift(pair *h, int64_t hole, int64_t len, pair v)
{
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (above(&h[child], &h[child - 1]))
            child--;
        h[hole] = h[child], hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        h[hole] = h[child - 1], hole = child - 1;
    }
    for (int64_t parent = (hole - 1) / 2; hole > top && above(&h[parent], &v);
         parent = (hole - 1) / 2)
        h[hole] = h[parent], hole = parent;
    h[hole] = v;
}

static void heap_select(pair *first, pair *middle, pair *last)
{
    const int64_t len = middle - first;
    if (len >= 2)
        for (int64_t parent = (len - 2) / 2; parent >= 0; parent--)
            sift(first, parent, len, first[parent]);
    for (pair *i = middle; i < last; i++)
        if (above(i, first)) {
            const pair v = *i;
            *i = *first;
            sift(first, 0, len, v);
        }
}

static void median_to_first(pair *r, pair *a, pair *b, pair *c)
{
    if (above(a, b)) {
        if (above(b, c))
            swap(r, b);
        else if (above(a, c))
            swap(r, c);
        else
            swap(r, a);
    } else if (above(a, c))
        swap(r, a);
    else if (above(b, c))
        swap(r, c);
    else
        swap(r, b);
}

static pair *partition_pivot(pair *first, pair *last)
{
    median_to_first(first, first + 1, first + (last - first) / 2, last - 1);
    pair *lo = first + 1, *hi = last;
    for (;;) {
        while (above(lo, first))
            lo++;
        hi--;
        while (above(first, hi))
            hi--;
        if (!(lo < hi))
            return lo;
        swap(lo, hi);
        lo++;
    }
}

static void nth_element(pair *first, pair *nth, pair *last)
{
    if (first == last || nth == last)
        return;
    int64_t depth = 0;
    for (int64_t n = last - first; n > 1; n >>= 1)
        depth++;
    for (depth *= 2; last - first > 3; depth--) {
        if (depth == 0) {
            heap_select(first, nth + 1, last);
            swap(first, nth);
            return;
        }
        pair *cut = partition_pivot(first, last);
        if (cut <= nth)
            first = cut;
        else
            last = cut;
    }
    insertion_sort(first, last);
}

int tandem_moe_route_f32(const float *logits, int64_t T, int64_t E, int64_t K, int normalize,
                         float *weights, int64_t *ids)
{
    pair q[TANDEM_MOE_MAX_TOP_K * TANDEM_MOE_PARTIAL_SORT]; /* E pairs: E < 64 K */
    if (K < 1 || K > E || K > TANDEM_MOE_MAX_TOP_K || K * TANDEM_MOE_PARTIAL_SORT <= E)
        return -1;
    for (int64_t t = 0; t < T; t++) {
        const float *l = logits + t * E;
        float *w = weights + t * K;
        float top = l[0];
        for (int64_t e = 1; e < E; e++)
            top = l[e] > top ? l[e] : top;
        float sum = 0.0f;
        for (int64_t e = 0; e < E; e++)
            sum += q[e].p = exp_nonpositive(l[e] - top);
        for (int64_t e = 0; e < E; e++)
            q[e].p /= sum, q[e].e = e;
        nth_element(q, q + K - 1, q + E);
        insertion_sort(q, q + K - 1);
        float chosen = 0.0f;
        for (int64_t k = 0; k < K; k++)
            w[k] = q[k].p, ids[t * K + k] = q[k].e, chosen += q[k].p;
        if (normalize)
            for (int64_t k = 0; k < K; k++)
                w[k] /= chosen;
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
        const float g = gate[t];
        const float e = exp_nonpositive(g >= 0.0f ? -g : g); /* e^-|g| */
        const float s = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        for (int64_t c = 0; c < C; c++)
            out[t * C + c] += shared[t * C + c] * s;
    }
}

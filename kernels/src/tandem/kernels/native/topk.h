/* torch.topk's choice among (value, index) pairs on the CPU (topk.c), for the routing of
 * moe.c. Internal to the library: nothing here is exported. */
#ifndef TANDEM_TOPK_H
#define TANDEM_TOPK_H

#include <stdint.h>

typedef struct {
    float p;
    int64_t e;
} pair;

/* x above y in torch.topk's order: NaN above every number */
static inline int above(const pair *x, const pair *y)
{
    return (x->p != x->p && y->p == y->p) || x->p > y->p;
}

/* q [n] reordered so that its first K pairs are torch.topk's K largest, in its order
 * (for K * TANDEM_MOE_PARTIAL_SORT > n, where torch.topk selects this way) */
void topk_pairs(pair *q, int64_t n, int64_t K);

#endif

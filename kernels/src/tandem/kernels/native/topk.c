/* torch.topk's choice on the CPU, for the mixture-of-experts routing (moe.c). Where K * 64
 * > n, torch.topk takes an nth_element of (value, index) pairs at K - 1, then sorts the
 * K - 1 before it, each step as the C++ library does it (introselect: median-of-three
 * partitions down to 3 pairs, then insertion sort; a heap select past its depth limit),
 * with NaN above every number. Done the same way here, the same pairs come out first
 * among equal values. */
#include <stdint.h>
#include <string.h>

#include "tandem_kernels.h"
#include "topk.h"

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

void topk_pairs(pair *q, int64_t n, int64_t K)
{
    nth_element(q, q + K - 1, q + n);
    insertion_sort(q, q + K - 1);
}

/* Attention over the paged KV cache, fp32, for CPUs: decode, and prefill as one
 * decode-like pass per new token over its causal prefix; and the write of new K/V.
 *
 * One work item is one sequence: all of its heads walk its blocks once, so every K/V
 * row is read exactly once per step, a token's rows of all KV heads (contiguous in the
 * cache) together. The plain-torch path instead gathers the blocks into a padded copy
 * first and reads that. Softmax is online, one cache block at a time: the block's
 * scores, one rescale of the running sums when the block raises a head's maximum,
 * then the weighted V rows.
 *
 * Layouts: q, out [B, H, D]; k_cache, v_cache [N, S, KVH, D]; seq_lens [B];
 * block_tables [B, M] (row b lists sequence b's blocks in order). Query head j reads
 * KV head j / (H / KVH) (grouped-query attention).
 *
 * A sliding window (window > 0) lets a query see only its last `window` keys: the walk
 * starts at the first of them, so the blocks before it are never read (a cache manager
 * may have handed them to another sequence). A soft cap (softcap > 0) maps each scaled
 * score s to softcap * tanh(s / softcap) before the softmax (Gemma 2).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "tandem_kernels.h"
#include "fastmath.h"

/* A vector of one register's floats (16 with AVX-512, 8 elsewhere), loaded and stored
 * through memcpy so any float address will do. A 16-float vector on AVX2 is two registers,
 * and the loops below then spill their accumulators to the stack (3-4x slower). */
#if defined(__AVX512F__)
#define LANES 16
#define PASS_REGS 16 /* accumulator registers of one pass over a block's V rows */
#else
#define LANES 8
#define PASS_REGS 8 /* of AVX2's sixteen: the rest hold the V row */
#endif
typedef float vec __attribute__((vector_size(LANES * 4)));
#define MAX_CHUNKS (256 / LANES) /* vector path: head size a multiple of LANES, at most 256 */

static inline vec vload(const float *p)
{
    vec v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float hsum(vec v)
{
    float s = 0.0f;
    for (int l = 0; l < LANES; l++)
        s += v[l];
    return s;
}

/* Per-thread scratch is H * D and H * S floats on the stack: bounded by these. */
#define MAX_HEADS_X_DIM 16384
#define MAX_HEADS_X_BLOCK 16384

static inline float dot(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* tanh(x) from e^-2|x| (no libm call): 1e-7 relative, below the scores' own rounding. */
static inline float tanh_approx(float x)
{
    const float e = exp_nonpositive(-2.0f * (x < 0.0f ? -x : x));
    const float t = (1.0f - e) / (1.0f + e);
    return x < 0.0f ? -t : t;
}

/* Scores s -> cap * tanh(s / cap) (cap > 0). */
static inline void cap_scores(int64_t H, int64_t S, int64_t n, float score[H][S], float cap)
{
    const float inv = 1.0f / cap;
    for (int64_t j = 0; j < H; j++)
#pragma omp simd
        for (int64_t t = 0; t < n; t++)
            score[j][t] = cap * tanh_approx(score[j][t] * inv);
}

/* The block's scores become softmax weights against each head's running maximum. */
static inline __attribute__((always_inline)) void
weigh(int64_t H, int64_t S, int64_t n, int64_t D, float score[H][S], float acc[H][D],
      float *run_max, float *run_sum)
{
    for (int64_t j = 0; j < H; j++) {
        float block_max = -INFINITY;
        for (int64_t t = 0; t < n; t++)
            block_max = score[j][t] > block_max ? score[j][t] : block_max;
        if (block_max > run_max[j]) {
            const float corr = exp_nonpositive(run_max[j] - block_max); /* 1st block: 0 */
            run_sum[j] *= corr;
#pragma omp simd
            for (int64_t i = 0; i < D; i++)
                acc[j][i] *= corr;
            run_max[j] = block_max;
        }
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < n; t++) {
            const float p = exp_nonpositive(score[j][t] - run_max[j]);
            score[j][t] = p;
            sum += p;
        }
        run_sum[j] += sum;
    }
}

/* Whether the head size is a whole number of vectors (the vector path of the loops). */
#define VECTOR_HEADS(D) ((D) % LANES == 0 && (D) <= LANES * MAX_CHUNKS)

/* score[j][t] = q_j . k_t over the block's n tokens; K rows at kb. The next block's K
 * rows (kn) are prefetched into L2 along the way, each KV head's share of a row while
 * that head's scores are taken, and its V rows the same way in block_values: the misses
 * spread evenly over the block's work. Fetching the whole block up front into L1 evicted
 * the block being read (1.6 vs 0.76 ms per SmolLM2 layer, K/V in L3); fetching all of
 * the next block's K and V rows with the first head's scores kept too many misses in
 * flight at once (SmolLM2, K/V from memory: 1.38-1.42 ms vs 1.12-1.21 spread; the small
 * model 1.76-1.89 vs 1.50-1.57). On the vector path each K row is loaded once for all
 * the query heads of its KV group. */
static inline __attribute__((always_inline)) void
block_scores(int64_t H, int64_t KVH, int64_t D, int64_t S, int64_t n, int64_t row,
             float qs[H][D], const float *kb, const float *kn, float score[H][S])
{
    const int64_t G = H / KVH; /* row: floats from one token to the next */
    for (int64_t g = 0; g < KVH; g++)
        for (int64_t t = 0; t < n; t++) {
            for (int64_t i = 0; i < D; i += 16) /* KV head g's share of the row */
                __builtin_prefetch(kn + t * row + g * D + i, 0, 2);
            const float *kr = kb + t * row + g * D;
            if (!VECTOR_HEADS(D)) {
                for (int64_t j = g * G; j < (g + 1) * G; j++)
                    score[j][t] = dot(qs[j], kr, D);
                continue;
            }
            vec k[MAX_CHUNKS];
            for (int64_t c = 0; c < D / LANES; c++)
                k[c] = vload(kr + c * LANES);
            for (int64_t j = g * G; j < (g + 1) * G; j++) {
                vec s = vload(qs[j]) * k[0];
                for (int64_t c = 1; c < D / LANES; c++)
                    s += vload(qs[j] + c * LANES) * k[c];
                score[j][t] = hsum(s);
            }
        }
}

/* Heads j0 .. j0 + m - 1 (m a constant where inlined) over the block's V rows. */
static inline __attribute__((always_inline)) void
heads_values(int64_t H, int64_t D, int64_t S, int64_t n, const int64_t m, int64_t j0, int64_t c0,
             int64_t cw, float p[H][S], const float *vg, int64_t row, const float *vn, int first,
             float acc[H][D])
{
    vec a[PASS_REGS]; /* m * cw <= PASS_REGS */
    for (int64_t h = 0; h < m; h++)
        for (int64_t c = 0; c < cw; c++)
            a[h * cw + c] = vload(acc[j0 + h] + (c0 + c) * LANES);
    for (int64_t t = 0; t < n; t++) {
        const float *vr = vg + t * row + c0 * LANES;
        if (first) /* the group's first pass fetches the group's share of the row */
            for (int64_t i = 0; i < D; i += 16) /* a cache line */
                __builtin_prefetch(vn + t * row + i, 0, 2);
        vec v[PASS_REGS];
        for (int64_t c = 0; c < cw; c++)
            v[c] = vload(vr + c * LANES);
        for (int64_t h = 0; h < m; h++) {
            const float w = p[j0 + h][t];
            for (int64_t c = 0; c < cw; c++)
                a[h * cw + c] += w * v[c];
        }
    }
    for (int64_t h = 0; h < m; h++)
        memcpy(acc[j0 + h] + c0 * LANES, a + h * cw, cw * LANES * sizeof(float));
}

/* acc[j] += sum over the block's n tokens of p[j][t] * v_t; V rows at vb, the next
 * block's at vn (prefetched into L2 along the way, see block_scores). On the vector
 * path the accumulators of up to PASS_REGS / (D / LANES) heads of one KV group stay in
 * registers for the whole block, and each V row is loaded once for all of them; a head
 * wider than PASS_REGS vectors takes its columns in passes of PASS_REGS. */
static inline __attribute__((always_inline)) void
block_values(int64_t H, int64_t KVH, int64_t D, int64_t S, int64_t n, int64_t row,
             float p[H][S], const float *vb, const float *vn, float acc[H][D])
{
    const int64_t G = H / KVH;
    if (!VECTOR_HEADS(D)) {
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < row; i += 16)
                __builtin_prefetch(vn + t * row + i, 0, 2);
        for (int64_t j = 0; j < H; j++)
            for (int64_t t = 0; t < n; t++) {
                const float w = p[j][t], *vr = vb + t * row + (j / G) * D;
#pragma omp simd
                for (int64_t i = 0; i < D; i++)
                    acc[j][i] += w * vr[i];
            }
        return;
    }
    const int64_t C = D / LANES, fit = PASS_REGS / C > 0 ? PASS_REGS / C : 1;
    const int64_t per = fit < 4 ? fit : 4; /* heads per pass: the switch below goes to 4 */
    for (int64_t g = 0; g < KVH; g++) {
        const float *vg = vb + g * D, *vgn = vn + g * D;
        if (C > PASS_REGS) { /* one head at a time, PASS_REGS columns a pass */
            for (int64_t j = g * G; j < (g + 1) * G; j++)
                for (int64_t c0 = 0; c0 < C; c0 += PASS_REGS) {
                    const int64_t cw = C - c0 < PASS_REGS ? C - c0 : PASS_REGS;
                    const int first = j == g * G && c0 == 0;
                    heads_values(H, D, S, n, 1, j, c0, cw, p, vg, row, vgn, first, acc);
                }
            continue;
        }
        for (int64_t j0 = g * G; j0 < (g + 1) * G; j0 += per) {
            const int64_t m = (g + 1) * G - j0 < per ? (g + 1) * G - j0 : per;
            const int first = j0 == g * G;
            switch (m) {
            case 1: heads_values(H, D, S, n, 1, j0, 0, C, p, vg, row, vgn, first, acc); break;
            case 2: heads_values(H, D, S, n, 2, j0, 0, C, p, vg, row, vgn, first, acc); break;
            case 3: heads_values(H, D, S, n, 3, j0, 0, C, p, vg, row, vgn, first, acc); break;
            default: heads_values(H, D, S, n, 4, j0, 0, C, p, vg, row, vgn, first, acc); break;
            }
        }
    }
}

/* One query row's H heads (of KVH KV heads; a whole number of KV groups, maybe not all of
 * the row's: the caches then start at the first one's columns) over its cached tokens
 * first .. len - 1; row: the cache's floats per token (all its KV heads). Inlined into one
 * copy per common head size (see attend), so D is a constant there and the loops over it
 * unroll into registers. The walk goes run by run: a run is the part of a cache block
 * inside [first, len), so only the window's first block may be entered mid-way. Each head's
 * sums are its own: which heads share a call does not change them. */
static inline __attribute__((always_inline)) void
attend_d(const float *q, const float *k_cache, const float *v_cache, int64_t first, int64_t len,
         const int32_t *table, int64_t after, int64_t H, int64_t KVH, const int64_t D, int64_t S,
         int64_t row, float scale, float softcap, float *out)
{
    const int64_t block = S * row; /* floats per cache block */
    float qs[H][D], acc[H][D], score[H][S], run_max[H], run_sum[H];
    for (int64_t j = 0; j < H; j++) {
        for (int64_t i = 0; i < D; i++) {
            qs[j][i] = q[j * D + i] * scale;
            acc[j][i] = 0.0f;
        }
        run_max[j] = -INFINITY;
        run_sum[j] = 0.0f;
    }
    for (int64_t start = first; start < len;) {
        const int64_t off = start % S, blk = start / S;
        const int64_t n = len - start < S - off ? len - start : S - off;
        const int64_t here = table[blk] * block + off * row;
        const int64_t next = start + n < len ? table[blk + 1] * block
                             : after >= 0     ? after * block
                                              : here;
        block_scores(H, KVH, D, S, n, row, qs, k_cache + here, k_cache + next, score);
        if (softcap > 0.0f)
            cap_scores(H, S, n, score, softcap);
        weigh(H, S, n, D, score, acc, run_max, run_sum);
        block_values(H, KVH, D, S, n, row, score, v_cache + here, v_cache + next, acc);
        start += n;
    }
    for (int64_t j = 0; j < H; j++) {
        const float inv = run_sum[j] > 0.0f ? 1.0f / run_sum[j] : 0.0f;
        for (int64_t i = 0; i < D; i++)
            out[j * D + i] = acc[j][i] * inv;
    }
}

static void attend(const float *q, const float *k_cache, const float *v_cache, int64_t first,
                   int64_t len, const int32_t *table, int64_t after, int64_t H, int64_t KVH,
                   int64_t D, int64_t S, int64_t row, float scale, float softcap, float *out)
{
    switch (D) {
    case 64:
        attend_d(q, k_cache, v_cache, first, len, table, after, H, KVH, 64, S, row, scale,
                 softcap, out);
        break;
    case 128:
        attend_d(q, k_cache, v_cache, first, len, table, after, H, KVH, 128, S, row, scale,
                 softcap, out);
        break;
    default:
        attend_d(q, k_cache, v_cache, first, len, table, after, H, KVH, D, S, row, scale,
                 softcap, out);
    }
}

/* The first key a query at position len - 1 sees: all of them without a window. */
static inline int64_t window_start(int64_t len, int64_t window)
{
    return window > 0 && len > window ? len - window : 0;
}

static inline int bounds_ok(int64_t H, int64_t KVH, int64_t D, int64_t S)
{
    return KVH > 0 && H % KVH == 0 && D > 0 && S > 0 && H * D <= MAX_HEADS_X_DIM &&
           H * S <= MAX_HEADS_X_BLOCK;
}

/* One sequence's query row split by KV groups: each thread its run of them (their
 * heads' q, caches' columns and out). */
static void one_row_split(const float *q, const float *k_cache, const float *v_cache,
                          int64_t first, int64_t len, const int32_t *table, int64_t H, int64_t KVH,
                          int64_t D, int64_t S, float scale, float softcap, float *out)
{
    const int64_t G = H / KVH;
#pragma omp parallel
    {
        const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t g0 = KVH * id / threads, g1 = KVH * (id + 1) / threads;
        if (g1 > g0)
            attend(q + g0 * G * D, k_cache + g0 * D, v_cache + g0 * D, first, len, table, -1,
                   (g1 - g0) * G, g1 - g0, D, S, KVH * D, scale, softcap, out + g0 * G * D);
    }
}

/* One sequence's scores and sums, heads x tokens x head size, from which its query row is
 * split over the threads by KV groups: a thread's share then outweighs the call of the
 * threads (~2-4 us at 2 threads; SmolLM2's 9 heads of 64 reach it near 110 tokens). */
#define SPLIT_ROW_WORK 65536

/* Every sequence's one query row (q, out [B, H, D]; q may be out itself: attend copies
 * its row first) over its cached tokens. */
static void decode_rows(const float *q, const float *k_cache, const float *v_cache,
                        const int32_t *seq_lens, const int32_t *block_tables, int64_t B,
                        int64_t H, int64_t KVH, int64_t D, int64_t S, int64_t M, float scale,
                        int64_t window, float softcap, float *out)
{
    if (B == 1 && KVH > 1 && omp_get_max_threads() > 1 && seq_lens[0] > 0) {
        const int64_t first = window_start(seq_lens[0], window);
        if ((seq_lens[0] - first) * H * D >= SPLIT_ROW_WORK) {
            one_row_split(q, k_cache, v_cache, first, seq_lens[0], block_tables, H, KVH, D, S,
                          scale, softcap, out);
            return;
        }
    }
#pragma omp parallel if (B > 1) /* one sequence: one thread has all the work (or see above) */
    {
        /* contiguous runs of sequences with about equal tokens read, so that a thread
         * knows which block it reads after a sequence's last one and can prefetch it */
        const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t total = 0;
        for (int64_t b = 0; b < B; b++)
            total += seq_lens[b] - window_start(seq_lens[b], window) + S;
        const int64_t lo_tok = total * id / threads, hi_tok = total * (id + 1) / threads;
        int64_t seen = 0;
        for (int64_t b = 0; b < B; b++) {
            const int64_t first = window_start(seq_lens[b], window);
            const int64_t work = seq_lens[b] - first + S;
            const int64_t mid = seen + work / 2;
            seen += work;
            if (mid < lo_tok || mid >= hi_tok)
                continue;
            int64_t after = -1;
            if (b + 1 < B && seq_lens[b + 1] > 0) {
                const int64_t next_first = window_start(seq_lens[b + 1], window);
                const int64_t mid_next = seen + (seq_lens[b + 1] - next_first + S) / 2;
                if (mid_next < hi_tok)
                    after = block_tables[(b + 1) * M + next_first / S];
            }
            attend(q + b * H * D, k_cache, v_cache, first, seq_lens[b], block_tables + b * M,
                   after, H, KVH, D, S, KVH * D, scale, softcap, out + b * H * D);
        }
    }
}

/* The stack bounds above, and a whole number of query heads per KV head. */
static inline int attention_ok(const tandem_attention *a)
{
    return bounds_ok(a->heads, a->kv_heads, a->head_dim, a->block_size);
}

int tandem_paged_decode_f32(const tandem_attention *a, const tandem_step *st, const float *q,
                            float *out)
{
    if (!attention_ok(a))
        return -1;
    decode_rows(q, a->k_cache, a->v_cache, st->seq_lens, st->block_tables, st->seqs, a->heads,
                a->kv_heads, a->head_dim, a->block_size, st->table_width, a->scale, a->window,
                a->softcap, out);
    return 0;
}

/* Rotate-half rope of n heads of D floats (x -> o; o may be x) by the cos | sin row cs. */
static inline void rope_heads(const float *x, const float *cs, int64_t n, int64_t D, float *o)
{
    const int64_t half = D / 2;
    const float *c = cs, *s = cs + half;
    for (int64_t h = 0; h < n; h++) {
        const float *x1 = x + h * D, *x2 = x1 + half;
        float *o1 = o + h * D, *o2 = o1 + half;
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
            const float a = x1[i], b = x2[i];
            o1[i] = a * c[i] - b * s[i];
            o2[i] = b * c[i] + a * s[i];
        }
    }
}

/* One decode step of a layer's attention, fused: for each of the B sequences (one new
 * token each) its row of the q | k | v projection gets rope at its position, its k and v
 * rows go to the caches at its slot (a negative slot is skipped), and its query attends
 * over its seq_lens[b] cached tokens. */
int tandem_rope_decode_f32(const tandem_attention *a, const tandem_step *st, const float *qkv,
                           int64_t row_stride, float *out)
{
    const int64_t B = st->seqs, H = a->heads, KVH = a->kv_heads, D = a->head_dim;
    if (!attention_ok(a) || D % 2)
        return -1;
    const int64_t row = KVH * D;
    for (int64_t b = 0; b < B; b++) { /* every new K/V row before any query reads the cache */
        const float *x = qkv + b * row_stride, *cs = st->cos_sin + st->positions[b] * D;
        const int64_t slot = st->slots[b];
        rope_heads(x, cs, H, D, out + b * H * D);
        if (slot < 0)
            continue;
        rope_heads(x + H * D, cs, KVH, D, a->k_cache + slot * row);
        memcpy(a->v_cache + slot * row, x + (H + KVH) * D, row * sizeof(float));
    }
    decode_rows(out, a->k_cache, a->v_cache, st->seq_lens, st->block_tables, B, H, KVH, D,
                a->block_size, st->table_width, a->scale, a->window, a->softcap, out);
    return 0;
}

/* Varlen causal prefill over the cache (the new tokens' K/V already written): token i
 * of sequence b, one of its last q_len = cu_seqlens[b + 1] - cu_seqlens[b] tokens,
 * attends to its first seq_lens[b] - q_len + i + 1 tokens (the last `window` of them
 * where window > 0). */
int tandem_paged_prefill_f32(const tandem_attention *a, const tandem_step *st, const float *q,
                             float *out)
{
    if (!attention_ok(a))
        return -1;
    const int32_t *cu = st->cu_seqlens, *seq_lens = st->seq_lens;
    const int64_t B = st->seqs, T = st->tokens, M = st->table_width;
    const int64_t H = a->heads, KVH = a->kv_heads, D = a->head_dim, S = a->block_size;
#pragma omp parallel for schedule(static, 8)
    for (int64_t t = 0; t < T; t++) {
        int64_t lo = 0, hi = B - 1; /* the sequence owning token t: a binary search */
        while (lo < hi) {
            const int64_t mid = (lo + hi + 1) / 2;
            if (cu[mid] <= t)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int64_t past = seq_lens[lo] - (cu[lo + 1] - cu[lo]);
        const int64_t len = past + (t - cu[lo]) + 1;
        attend(q + t * H * D, a->k_cache, a->v_cache, window_start(len, a->window), len,
               st->block_tables + lo * M, -1, H, KVH, D, S, KVH * D, a->scale, a->softcap,
               out + t * H * D);
    }
    return 0;
}

/* New K/V into the cache: token t's rows (KVH * D = row floats each; k_stride and
 * v_stride floats from one token to the next) go to slot slots[t] (block * S + offset)
 * of each cache; a negative slot is padding and skipped. Slots must be validated. */
void tandem_write_kv_f32(const float *k, int64_t k_stride, const float *v, int64_t v_stride,
                         const int64_t *slots, int64_t T, int64_t row, float *k_cache,
                         float *v_cache)
{
#pragma omp parallel for schedule(static) if (T * row > 65536)
    for (int64_t t = 0; t < T; t++) {
        const int64_t s = slots[t];
        if (s < 0)
            continue;
        memcpy(k_cache + s * row, k + t * k_stride, row * sizeof(float));
        memcpy(v_cache + s * row, v + t * v_stride, row * sizeof(float));
    }
}

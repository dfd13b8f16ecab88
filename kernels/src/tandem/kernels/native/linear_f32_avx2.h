/* The fp32 linear layer on AVX2 + FMA (no AVX-512), included by linear_f32.c: the same
 * packed weight, packed[n / 16][k][n % 16], whose sixteen channels of one k are two
 * 8-lane ymm vectors.
 *
 * A tile is up to 6 rows of x against one panel of 16 channels: twelve accumulators, two
 * weight loads and six broadcasts of x per k. One to three rows take panels side by side
 * instead (one row four, two or three rows two), so that eight or more independent sums
 * cover the multiply-add's latency and one row reads four streams at once. Every sum runs
 * over k in order, in every tile: a row's numbers do not depend on how many rows it was
 * batched with (as on AVX-512). Against the previous form (one panel, k unrolled by row
 * count), over a whole model's layers at SmolLM2's shapes, one row: 0.97-1.14x (ahead
 * where the memory runs fast, level at its slow rate). A panel is read in the order it
 * lies in memory, which the hardware prefetcher follows by itself: software prefetches
 * (16..128 lines ahead, to L1 or non-temporal) measured 5-20% slower on Zen 3.
 *
 * K is taken in chunks of at most KC (the outputs add up across chunks) so that a block
 * of rows of x for one chunk stays in L2 however large K is, beside the panel's chunk;
 * the rows per block mb follow from it (60..126 where K >= 384, more for a smaller K), and
 * the weight is read from memory about M / mb times.
 */
#include <string.h>
#include <immintrin.h>
#include <omp.h>

#define RT 6          /* rows of x per tile */
#define KC 768        /* most k per chunk */
#define BLOCK_X 49152 /* floats of x a block holds for one chunk: 192 KB of the 512 KB L2 */

typedef struct {
    const float *x;    /* [M, K] */
    const float *w;    /* packed weight */
    const float *bias; /* [N] or NULL */
    float *out;        /* [M, N] */
    int64_t K, N;
} Gemm;

static const float ZEROS[16];

/* out's row m at channels n0..n0+15 (those below N) = s0|s1 + the bias (first chunk) or +
 * what out holds there */
static inline __attribute__((always_inline)) void store(const Gemm *g, int64_t m, int64_t n0,
                                                        int first, __m256 s0, __m256 s1)
{
    const int64_t valid = g->N - n0 < 16 ? g->N - n0 : 16;
    float *o = g->out + m * g->N + n0, part[16] = {0};
    const float *base = !first ? o : g->bias ? g->bias + n0 : ZEROS;
    float *dst = o;
    if (valid < 16) /* the last panel: through a whole copy, not past N */
        dst = memcpy(part, base, sizeof(float) * (size_t)valid), base = part;
    _mm256_storeu_ps(dst, _mm256_add_ps(s0, _mm256_loadu_ps(base)));
    _mm256_storeu_ps(dst + 8, _mm256_add_ps(s1, _mm256_loadu_ps(base + 8)));
    if (valid < 16)
        memcpy(o, part, sizeof(float) * (size_t)valid);
}

/* rows x[0..R-1] (K apart, from the chunk's first k) times P panels side by side (w: the
 * first, at the same k; the next K * 16 floats on) over kn values of k, added to the bias
 * (first chunk) or to out's rows m.. at channels n0..n0 + 16 P - 1; R and P are constants
 * where inlined. Each of the 2 R P sums (at most 12: they live in registers) runs over k
 * in order. */
static inline __attribute__((always_inline)) void tile(const Gemm *g, const float *x,
                                                       const float *w, int64_t kn, int64_t m,
                                                       int64_t n0, int first, const int R,
                                                       const int P)
{
    const int64_t K = g->K;
    __m256 c[12]; /* c[(q * R + r) * 2 + half]; fixed size, so that it lives in registers */
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++)
        c[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kn; k++) {
#pragma GCC unroll 4
        for (int q = 0; q < P; q++) {
            const float *wk = w + q * K * 16 + k * 16;
            const __m256 b0 = _mm256_loadu_ps(wk), b1 = _mm256_loadu_ps(wk + 8);
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                const __m256 v = _mm256_broadcast_ss(x + r * K + k);
                c[(q * R + r) * 2] = _mm256_fmadd_ps(v, b0, c[(q * R + r) * 2]);
                c[(q * R + r) * 2 + 1] = _mm256_fmadd_ps(v, b1, c[(q * R + r) * 2 + 1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < P; q++)
#pragma GCC unroll 6
        for (int r = 0; r < R; r++)
            store(g, m + r, n0 + q * 16, first, c[(q * R + r) * 2], c[(q * R + r) * 2 + 1]);
}

/* one function per row and panel count (noinline: its accumulators stay in registers) */
#define TILE(R, P)                                                                             \
    static __attribute__((noinline)) void tile##R##x##P(const Gemm *g, const float *x,         \
                                                        const float *w, int64_t kn, int64_t m, \
                                                        int64_t n0, int first)                 \
    {                                                                                          \
        tile(g, x, w, kn, m, n0, first, R, P);                                                 \
    }
TILE(1, 4) /* one to three rows: panels side by side, so that eight or more sums */
TILE(2, 2) /* cover the multiply-add's latency (and one row reads four streams) */
TILE(3, 2)
TILE(1, 1) /* the panels past the last whole unit of those */
TILE(2, 1)
TILE(3, 1)
TILE(4, 1)
TILE(5, 1)
TILE(6, 1)

typedef void (*TileFn)(const Gemm *, const float *, const float *, int64_t, int64_t, int64_t,
                       int);
static const TileFn WIDE[RT + 1] = {NULL, tile1x4, tile2x2, tile3x2, tile4x1, tile5x1, tile6x1};
static const TileFn ONE[RT + 1] = {NULL, tile1x1, tile2x1, tile3x1, tile4x1, tile5x1, tile6x1};
/* panels side by side per row count (0: a block with no rows past its full tiles) */
static const int WIDTH[RT + 1] = {1, 4, 2, 2, 1, 1, 1};

/* rows m..m+R-1 of out (R <= RT) at panels p0..p1-1, k0..k0+kn-1 of the sums: WIDTH[R]
 * panels at a time, the rest one by one */
static void rows_at(const Gemm *g, int64_t m, int R, int64_t p0, int64_t p1, int64_t k0,
                    int64_t kn)
{
    const int64_t K = g->K;
    const float *x = g->x + m * K + k0;
    for (int64_t p = p0; p < p1;) {
        const int wide = p + WIDTH[R] <= p1;
        (wide ? WIDE : ONE)[R](g, x, g->w + p * K * 16 + k0 * 16, kn, m, p * 16, k0 == 0);
        p += wide ? WIDTH[R] : 1;
    }
}

/* rows m0..m1-1 of out at panels p0..p1-1 (a unit of the tail's WIDTH), k0..k0+kn-1 of
 * the sums: each panel against the full tiles of RT rows in turn, then the rows past them
 * against the unit's panels while they are still in cache */
static void block(const Gemm *g, int64_t m0, int64_t m1, int64_t p0, int64_t p1, int64_t k0,
                  int64_t kn)
{
    const int64_t full = m0 + (m1 - m0) / RT * RT;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t m = m0; m < full; m += RT)
            rows_at(g, m, RT, p, p + 1, k0, kn);
    if (full < m1)
        rows_at(g, full, (int)(m1 - full), p0, p1, k0, kn);
}

/* as the AVX-512 path's; the panels past N (the packing pads N to 32) are skipped.
 * Returns 0, or -3 for K = 0 (no sums to take: the caller takes F.linear). */
int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                      const float *bias, int64_t N, float *out)
{
    if (K <= 0)
        return -3;
    const Gemm g = {x, packed, bias, out, K, N};
    const int64_t chunks = (K + KC - 1) / KC, kc = (K + chunks - 1) / chunks;
    const int64_t panels = (N + 15) / 16;
    if (M <= RT) { /* decode: a unit of panels whole, in runs of a few per thread: where
                    * another process takes a core, the other threads take its runs */
        const int64_t width = WIDTH[M], units = (panels + width - 1) / width;
        int64_t run = units / (4 * (int64_t)omp_get_max_threads());
        run = run < 1 ? 1 : run;
#pragma omp parallel for schedule(dynamic, run) if (M * N * K > 262144)
        for (int64_t u = 0; u < units; u++) {
            const int64_t p1 = (u + 1) * width < panels ? (u + 1) * width : panels;
            for (int64_t k0 = 0; k0 < K; k0 += kc)
                rows_at(&g, 0, (int)M, u * width, p1, k0, K - k0 < kc ? K - k0 : kc);
        }
        return 0;
    }
    int64_t mb = BLOCK_X / kc / RT * RT; /* rows per block, a multiple of RT */
    mb = mb < RT ? RT : mb;
    /* block by block and chunk by chunk, so that a thread's share of x stays in its L2;
     * the loops split the units alike (static; a block's units are as wide as its tail
     * needs), so each thread owns its outputs and needs no barrier between chunks */
#pragma omp parallel if (M * N * K > 262144)
    for (int64_t m0 = 0; m0 < M; m0 += mb) {
        const int64_t m1 = m0 + mb < M ? m0 + mb : M, width = WIDTH[(m1 - m0) % RT];
        const int64_t units = (panels + width - 1) / width;
        for (int64_t k0 = 0; k0 < K; k0 += kc) {
#pragma omp for schedule(static) nowait
            for (int64_t u = 0; u < units; u++) {
                const int64_t p1 = (u + 1) * width < panels ? (u + 1) * width : panels;
                block(&g, m0, m1, u * width, p1, k0, K - k0 < kc ? K - k0 : kc);
            }
        }
    }
    return 0;
}

int tandem_linear_f32_available(void) { return 1; }

/* The fp32 linear layer on AVX2 + FMA (no AVX-512), included by linear_f32.c: the same
 * packed weight, packed[n / 16][k][n % 16], whose sixteen channels of one k are two
 * 8-lane ymm vectors.
 *
 * A tile is up to 6 rows of x against one panel of 16 channels: twelve accumulators, two
 * weight loads and six broadcasts of x per k. With two or three rows the k loop is
 * unrolled so that eight independent sums still cover the multiply-add's latency; decode's
 * one row takes four panels side by side instead (quad1: eight sums, four streams): over a
 * whole model's layers at SmolLM2's shapes 0.97-1.14x one panel with the loop unrolled
 * (ahead where the memory runs fast, level at its slow rate), and each channel summed over
 * k in order, as the tiles of 4..6 rows do (a row's numbers do not depend on which of
 * those it was batched in). A panel is read in the order it lies in memory, which the
 * hardware prefetcher follows by itself: software prefetches (16..128 lines ahead, to L1
 * or non-temporal) measured 5-20% slower on Zen 3.
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

/* rows x[0..R-1] (K apart, from the chunk's first k) times the panel w (at the same k)
 * over kn values of k, added to the bias (first chunk) or to out's rows m.. at channels
 * n0..n0+15; R and U (the k unroll) are constants where inlined */
static inline __attribute__((always_inline)) void tile(const Gemm *g, const float *x,
                                                       const float *w, int64_t kn, int64_t m,
                                                       int64_t n0, int first, const int R,
                                                       const int U)
{
    const int64_t K = g->K;
    __m256 c[12]; /* c[(u * R + r) * 2 + half]; fixed size, so that it lives in registers */
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++)
        c[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + U <= kn; k += U) {
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const float *wk = w + (k + u) * 16;
            const __m256 b0 = _mm256_loadu_ps(wk), b1 = _mm256_loadu_ps(wk + 8);
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                const __m256 v = _mm256_broadcast_ss(x + r * K + k + u);
                c[(u * R + r) * 2] = _mm256_fmadd_ps(v, b0, c[(u * R + r) * 2]);
                c[(u * R + r) * 2 + 1] = _mm256_fmadd_ps(v, b1, c[(u * R + r) * 2 + 1]);
            }
        }
    }
    for (; k < kn; k++) { /* kn % U */
        const __m256 b0 = _mm256_loadu_ps(w + k * 16), b1 = _mm256_loadu_ps(w + k * 16 + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 v = _mm256_broadcast_ss(x + r * K + k);
            c[r * 2] = _mm256_fmadd_ps(v, b0, c[r * 2]);
            c[r * 2 + 1] = _mm256_fmadd_ps(v, b1, c[r * 2 + 1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        __m256 s0 = c[r * 2], s1 = c[r * 2 + 1];
#pragma GCC unroll 4
        for (int u = 1; u < U; u++) {
            s0 = _mm256_add_ps(s0, c[(u * R + r) * 2]);
            s1 = _mm256_add_ps(s1, c[(u * R + r) * 2 + 1]);
        }
        store(g, m + r, n0, first, s0, s1);
    }
}

/* one function per row count (noinline: its accumulators stay in registers) */
#define TILE(R, U)                                                                             \
    static __attribute__((noinline)) void tile##R(const Gemm *g, const float *x,               \
                                                  const float *w, int64_t kn, int64_t m,       \
                                                  int64_t n0, int first)                       \
    {                                                                                          \
        tile(g, x, w, kn, m, n0, first, R, U);                                                 \
    }
TILE(1, 1) /* the panels past the last four of decode's row (quad1's order) */
TILE(2, 2)
TILE(3, 2)
TILE(4, 1)
TILE(5, 1)
TILE(6, 1)

/* Decode's one row against four panels side by side (64 channels: four streams the
 * hardware prefetcher follows at once, where one panel at a time is one stream): eight
 * sums, each over k in order (as a tile of 4..6 rows takes its own), from p's panel on,
 * k0..k0+kn-1 of the sums. */
static __attribute__((noinline)) void quad1(const Gemm *g, int64_t p, int64_t k0, int64_t kn,
                                            int first)
{
    const int64_t K = g->K;
    const float *x = g->x + k0, *w = g->w + p * K * 16 + k0 * 16;
    __m256 c[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        c[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kn; k++) {
        const __m256 v = _mm256_broadcast_ss(x + k);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const float *wk = w + q * K * 16 + k * 16;
            c[2 * q] = _mm256_fmadd_ps(v, _mm256_loadu_ps(wk), c[2 * q]);
            c[2 * q + 1] = _mm256_fmadd_ps(v, _mm256_loadu_ps(wk + 8), c[2 * q + 1]);
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        store(g, 0, (p + q) * 16, first, c[2 * q], c[2 * q + 1]);
}

typedef void (*TileFn)(const Gemm *, const float *, const float *, int64_t, int64_t, int64_t,
                       int);
static const TileFn TILES[RT + 1] = {NULL, tile1, tile2, tile3, tile4, tile5, tile6};

/* rows m0..m1-1 of out at the panel p's channels (16p..16p+15), k0..k0+kn-1 of the sums */
static void panel(const Gemm *g, int64_t m0, int64_t m1, int64_t p, int64_t k0, int64_t kn)
{
    const int64_t K = g->K;
    const float *w = g->w + p * K * 16 + k0 * 16;
    for (int64_t m = m0; m < m1; m += RT) {
        const int64_t rows = m1 - m < RT ? m1 - m : RT;
        TILES[rows](g, g->x + m * K + k0, w, kn, m, p * 16, k0 == 0);
    }
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
    if (M <= RT) { /* decode: each panel whole, in runs of a few per thread: where another
                    * process takes a core, the other threads take its runs; one row
                    * takes four panels at a time (quad1) */
        const int64_t step = M == 1 ? 4 : 1, units = (panels + step - 1) / step;
        int64_t run = units / (4 * (int64_t)omp_get_max_threads());
        run = run < 1 ? 1 : run;
#pragma omp parallel for schedule(dynamic, run) if (M * N * K > 262144)
        for (int64_t u = 0; u < units; u++)
            for (int64_t k0 = 0; k0 < K; k0 += kc) {
                const int64_t kn = K - k0 < kc ? K - k0 : kc, p = u * step;
                if (step == 4 && p + 4 <= panels)
                    quad1(&g, p, k0, kn, k0 == 0);
                else
                    for (int64_t q = p; q < p + step && q < panels; q++)
                        panel(&g, 0, M, q, k0, kn);
            }
        return 0;
    }
    int64_t mb = BLOCK_X / kc / RT * RT; /* rows per block, a multiple of RT */
    mb = mb < RT ? RT : mb;
    /* block by block and chunk by chunk, so that a thread's share of x stays in its L2;
     * the loops split the panels alike (static), so each thread owns its outputs and
     * needs no barrier between chunks */
#pragma omp parallel if (M * N * K > 262144)
    for (int64_t m0 = 0; m0 < M; m0 += mb)
        for (int64_t k0 = 0; k0 < K; k0 += kc) {
#pragma omp for schedule(static) nowait
            for (int64_t p = 0; p < panels; p++)
                panel(&g, m0, m0 + mb < M ? m0 + mb : M, p, k0, K - k0 < kc ? K - k0 : kc);
        }
    return 0;
}

int tandem_linear_f32_available(void) { return 1; }

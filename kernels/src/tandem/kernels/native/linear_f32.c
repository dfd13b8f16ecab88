/* fp32 linear layer: out = x @ w.T + bias, on a weight packed once. AVX-512 below;
 * AVX2 + FMA in linear_f32_avx2.h (same packed layout); elsewhere "not available".
 *
 * Weight layout (made once by tandem.kernels.native.linear_f32.pack): N padded to a
 * multiple of 32 with zeros, packed[n / 16][k][n % 16], so one 64-byte load holds one k
 * of sixteen output channels. A tile is 8 rows of x against 32 channels: sixteen zmm
 * accumulators, two weight loads and eight broadcasts of x per k. A thread takes a
 * panel of 32 channels (K x 128 bytes, kept in L2) and runs every row tile of its block
 * of rows against it, and fetches the next panel's lines into L2 spread over those
 * tiles, so the weight streams from memory once, behind the arithmetic. The last M % 8
 * rows take a tile of just that many rows (decode's one row: a sixteenth of an 8-row
 * tile's multiply-adds per weight byte, which a zero-padded 8-row tile would spend and
 * fall behind the memory); each row's sums run in the same order in either tile.
 *
 * Decode (M < 8) is bound by the memory alone: there a tile reads four panels side by
 * side (64 channels, four streams the hardware prefetcher follows) for up to 3 rows, and
 * nothing is fetched by hand (at one row the explicit fetch of the next panel cost 10-25%
 * of the read rate on AVX-512 Zen 4: it competes with the hardware's own streams).
 */
#include <omp.h>
#include <stdint.h>

#include "tandem_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define MR 8   /* rows of x per tile */
#define NR TANDEM_PACK_CHANNELS /* output channels per tile: two 16-lane blocks */
#define MB 128 /* rows of x per block: a thread's share of x stays in L2 with the panel */
#define QR 3   /* decode rows a four-panel tile takes (4 * QR accumulators) */

typedef struct {
    const float *x;    /* [M, K] */
    const float *w;    /* packed weight */
    const float *bias; /* [N] or NULL */
    float *out;        /* [M, N] */
    int64_t K, N, Np;
} Gemm;

#define STEP(r, a0, a1)                                                                        \
    do {                                                                                       \
        const __m512 v = _mm512_set1_ps(x[(r) * K + k]);                                       \
        a0 = _mm512_fmadd_ps(v, b0, a0);                                                       \
        a1 = _mm512_fmadd_ps(v, b1, a1);                                                       \
    } while (0)

/* A tile's fetching at each step k (dot8's and dot_few's alike): `lines` cache lines from
 * *pf into L2, spread evenly over the K steps; due counts on by `lines` a step, and each
 * K of it fetches the line at *pf and moves *pf on. Returns the new due. */
static inline __attribute__((always_inline)) int64_t fetch_due(int64_t K, int64_t lines,
                                                               int64_t due, const float **pf)
{
    for (due += lines; due >= K; due -= K, *pf += 16)
        _mm_prefetch((const char *)*pf, _MM_HINT_T1);
    return due;
}

/* rows x[0..7] (K apart) against the panel at w0 (channels n..n+15) and w1 (n+16..n+31),
 * fetching `lines` cache lines from pf into L2 on the way, spread evenly over the k loop
 * (a burst at its start would stall on the memory's latency). Kept apart from the
 * epilogue (noinline) so that the sixteen accumulators stay in registers. */
static __attribute__((noinline)) void dot8(const float *x, const float *w0, int64_t K,
                                           const float *pf, int64_t lines, __m512 acc[16])
{
    const float *w1 = w0 + K * 16;
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00,
           c61 = c00, c70 = c00, c71 = c00;
    int64_t due = 0;
    for (int64_t k = 0; k < K; k++) {
        const __m512 b0 = _mm512_loadu_ps(w0 + k * 16);
        const __m512 b1 = _mm512_loadu_ps(w1 + k * 16);
        due = fetch_due(K, lines, due, &pf);
        STEP(0, c00, c01);
        STEP(1, c10, c11);
        STEP(2, c20, c21);
        STEP(3, c30, c31);
        STEP(4, c40, c41);
        STEP(5, c50, c51);
        STEP(6, c60, c61);
        STEP(7, c70, c71);
    }
    acc[0] = c00, acc[1] = c01, acc[2] = c10, acc[3] = c11, acc[4] = c20, acc[5] = c21;
    acc[6] = c30, acc[7] = c31, acc[8] = c40, acc[9] = c41, acc[10] = c50, acc[11] = c51;
    acc[12] = c60, acc[13] = c61, acc[14] = c70, acc[15] = c71;
}

/* rows x[0..R-1] (R < MR) as dot8 does rows 0..R-1 of a tile, each row's multiply-adds
 * in the same order */
static inline __attribute__((always_inline)) void dot_few(int R, const float *x,
                                                         const float *w0, int64_t K,
                                                         const float *pf, int64_t lines,
                                                         __m512 acc[16])
{
    const float *w1 = w0 + K * 16;
    __m512 c[2 * MR];
    for (int i = 0; i < 2 * R; i++)
        c[i] = _mm512_setzero_ps();
    int64_t due = 0;
    for (int64_t k = 0; k < K; k++) {
        const __m512 b0 = _mm512_loadu_ps(w0 + k * 16);
        const __m512 b1 = _mm512_loadu_ps(w1 + k * 16);
        due = fetch_due(K, lines, due, &pf);
        for (int r = 0; r < R; r++) {
            const __m512 v = _mm512_set1_ps(x[r * K + k]);
            c[2 * r] = _mm512_fmadd_ps(v, b0, c[2 * r]);
            c[2 * r + 1] = _mm512_fmadd_ps(v, b1, c[2 * r + 1]);
        }
    }
    for (int i = 0; i < 2 * R; i++)
        acc[i] = c[i];
}

/* the last R = M % MR rows of x, as dot_few */
static __attribute__((noinline)) void dot_tail(int R, const float *x, const float *w0,
                                               int64_t K, const float *pf, int64_t lines,
                                               __m512 acc[16])
{
    switch (R) {
    case 1: dot_few(1, x, w0, K, pf, lines, acc); return;
    case 2: dot_few(2, x, w0, K, pf, lines, acc); return;
    case 3: dot_few(3, x, w0, K, pf, lines, acc); return;
    case 4: dot_few(4, x, w0, K, pf, lines, acc); return;
    case 5: dot_few(5, x, w0, K, pf, lines, acc); return;
    case 6: dot_few(6, x, w0, K, pf, lines, acc); return;
    default: dot_few(7, x, w0, K, pf, lines, acc); return;
    }
}

static inline __mmask16 lanes(const Gemm *g, int64_t n)
{
    const int64_t left = g->N - n;
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* rows m0..m0+rows-1 of out at channels n0..n0+31: the sums plus the bias */
static void store(const Gemm *g, int64_t m0, int64_t rows, int64_t n0, const __m512 *c)
{
    const __mmask16 k0 = lanes(g, n0), k1 = lanes(g, n0 + 16);
    __m512 b0 = _mm512_setzero_ps(), b1 = b0;
    if (g->bias) {
        b0 = _mm512_maskz_loadu_ps(k0, g->bias + n0);
        b1 = _mm512_maskz_loadu_ps(k1, g->bias + n0 + 16);
    }
    for (int64_t r = 0; r < rows; r++) {
        float *o = g->out + (m0 + r) * g->N + n0;
        _mm512_mask_storeu_ps(o, k0, _mm512_add_ps(c[2 * r], b0));
        _mm512_mask_storeu_ps(o + 16, k1, _mm512_add_ps(c[2 * r + 1], b1));
    }
}

/* every row tile of rows m0..m1-1 against the panel of channels n0..n0+31; the tiles
 * share out the fetching of the next panel (this thread's next, most likely) */
static void panel(const Gemm *g, int64_t m0, int64_t m1, int64_t n0)
{
    const int64_t K = g->K, tiles = (m1 - m0 + MR - 1) / MR;
    const float *w0 = g->w + (n0 / 16) * K * 16;
    const float *next = w0 + 2 * K * 16;
    const int64_t lines = n0 + NR < g->Np ? (2 * K + tiles - 1) / tiles : 0;
    __m512 c[2 * MR];
    int64_t m = m0;
    for (int64_t i = 0; m + MR <= m1; m += MR, i++) {
        dot8(g->x + m * K, w0, K, next + i * lines * 16, lines, c);
        store(g, m, MR, n0, c);
    }
    if (m < m1) { /* the tail of M */
        dot_tail((int)(m1 - m), g->x + m * K, w0, K, next + (tiles - 1) * lines * 16, lines, c);
        store(g, m, m1 - m, n0, c);
    }
}

/* rows x[0..R-1] (R <= QR) against the four panels at w0 (channels n..n+63), as dot8
 * does each row: acc[2r], acc[2r+1] are row r's channels n..n+31 and acc[2R + 2r],
 * acc[2R + 2r + 1] its channels n+32..n+63 */
static inline __attribute__((always_inline)) void dot_quad(int R, const float *x,
                                                          const float *w0, int64_t K,
                                                          __m512 acc[4 * QR])
{
    const float *w1 = w0 + K * 16, *w2 = w1 + K * 16, *w3 = w2 + K * 16;
    __m512 c[4 * QR];
    for (int i = 0; i < 4 * R; i++)
        c[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m512 b0 = _mm512_loadu_ps(w0 + k * 16), b1 = _mm512_loadu_ps(w1 + k * 16);
        const __m512 b2 = _mm512_loadu_ps(w2 + k * 16), b3 = _mm512_loadu_ps(w3 + k * 16);
        for (int r = 0; r < R; r++) {
            const __m512 v = _mm512_set1_ps(x[r * K + k]);
            c[2 * r] = _mm512_fmadd_ps(v, b0, c[2 * r]);
            c[2 * r + 1] = _mm512_fmadd_ps(v, b1, c[2 * r + 1]);
            c[2 * R + 2 * r] = _mm512_fmadd_ps(v, b2, c[2 * R + 2 * r]);
            c[2 * R + 2 * r + 1] = _mm512_fmadd_ps(v, b3, c[2 * R + 2 * r + 1]);
        }
    }
    for (int i = 0; i < 4 * R; i++)
        acc[i] = c[i];
}

static __attribute__((noinline)) void dot_quad_rows(int R, const float *x, const float *w0,
                                                    int64_t K, __m512 acc[4 * QR])
{
    switch (R) {
    case 1: dot_quad(1, x, w0, K, acc); return;
    case 2: dot_quad(2, x, w0, K, acc); return;
    default: dot_quad(3, x, w0, K, acc); return;
    }
}

/* decode's unit u: the 64 channels from u * 64 (32 where only one panel pair is left),
 * every row of x, nothing fetched by hand */
static void decode_unit(const Gemm *g, int64_t M, int64_t u)
{
    const int64_t n0 = u * 2 * NR;
    const float *w0 = g->w + (n0 / 16) * g->K * 16;
    __m512 c[2 * MR]; /* dot_tail's 2 * R <= 14, dot_quad's 4 * R <= 12 */
    if (M <= QR && n0 + NR < g->Np) {
        dot_quad_rows((int)M, g->x, w0, g->K, c);
        store(g, 0, M, n0, c);
        store(g, 0, M, n0 + NR, c + 2 * M);
        return;
    }
    for (int64_t n = n0; n < n0 + 2 * NR && n < g->Np; n += NR) {
        dot_tail((int)M, g->x, g->w + (n / 16) * g->K * 16, g->K, 0, 0, c);
        store(g, 0, M, n, c);
    }
}

/* x: [M, K] fp32 contiguous; packed: as above for N channels; bias: [N] or NULL;
 * out: [M, N]. Returns 0. */
int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                      const float *bias, int64_t N, float *out)
{
    const int64_t Np = (N + NR - 1) / NR * NR;
    const Gemm g = {x, packed, bias, out, K, N, Np};
    const int64_t panels = Np / NR, blocks = (M + MB - 1) / MB;
    if (M < MR) { /* decode: runs of a few units per thread, handed out in turn: where
                   * another process takes a core, the other threads take its runs */
        const int64_t units = (panels + 1) / 2;
        int64_t run = units / (4 * (int64_t)omp_get_max_threads());
        run = run < 1 ? 1 : run;
#pragma omp parallel for schedule(dynamic, run) if (M * N * K > 262144)
        for (int64_t u = 0; u < units; u++)
            decode_unit(&g, M, u);
        return 0;
    }
#pragma omp parallel for schedule(static) if (M * N * K > 262144)
    for (int64_t t = 0; t < panels * blocks; t++) {
        const int64_t m0 = (t / panels) * MB;
        panel(&g, m0, m0 + MB < M ? m0 + MB : M, (t % panels) * NR);
    }
    return 0;
}

int tandem_linear_f32_available(void) { return 1; }

#elif defined(__AVX2__) && defined(__FMA__)
#include "linear_f32_avx2.h"

#else /* neither AVX-512 nor AVX2 with FMA: the caller takes oneDNN or F.linear */

int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                      const float *bias, int64_t N, float *out)
{
    (void)x, (void)M, (void)K, (void)packed, (void)bias, (void)N, (void)out;
    return -2;
}

int tandem_linear_f32_available(void) { return 0; }

#endif

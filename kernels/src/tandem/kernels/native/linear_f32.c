/* fp32 linear layer: out = x @ w.T + bias, on a weight packed once.
 *
 * Weight layout (made once by tandem.kernels.native.linear_f32.pack): N padded to a
 * multiple of 32 with zeros, packed[n / 16][k][n % 16], so one 64-byte load holds one k
 * of sixteen output channels. A tile is 8 rows of x against 32 channels: sixteen zmm
 * accumulators, two weight loads and eight broadcasts of x per k. A thread takes a
 * panel of 32 channels (K x 128 bytes, kept in L2) and runs every row tile of its block
 * of rows against it, and fetches the next panel's lines into L2 spread over those
 * tiles, so the weight streams from memory once, behind the arithmetic.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>

#define MR 8   /* rows of x per tile */
#define NR 32  /* output channels per tile: two 16-lane blocks */
#define MB 128 /* rows of x per block: a thread's share of x stays in L2 with the panel */

typedef struct {
    const float *x;    /* [M, K] */
    const float *tail; /* [MR, K]: the last M % MR rows of x, zero-padded, or NULL */
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
        for (due += lines; due >= K; due -= K, pf += 16)
            _mm_prefetch((const char *)pf, _MM_HINT_T1);
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
    if (m < m1) { /* the tail of M, from its zero-padded copy */
        dot8(g->tail, w0, K, next + (tiles - 1) * lines * 16, lines, c);
        store(g, m, m1 - m, n0, c);
    }
}

/* x: [M, K] fp32 contiguous; packed: as above for N channels; bias: [N] or NULL;
 * out: [M, N]. Returns 0, or -1 when scratch memory could not be had. */
int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                      const float *bias, int64_t N, float *out)
{
    const int64_t Np = (N + NR - 1) / NR * NR, left = M % MR;
    float *tail = NULL;
    if (left) { /* M % MR is only ever the tail of the last block: MB is a multiple of MR */
        tail = calloc((size_t)(MR * K) + 16, sizeof(float));
        if (!tail)
            return -1;
        memcpy(tail, x + (M - left) * K, sizeof(float) * (size_t)(left * K));
    }
    const Gemm g = {x, tail, packed, bias, out, K, N, Np};
    const int64_t panels = Np / NR, blocks = (M + MB - 1) / MB;
#pragma omp parallel for schedule(static) if (M * N * K > 262144)
    for (int64_t t = 0; t < panels * blocks; t++) {
        const int64_t m0 = (t / panels) * MB;
        panel(&g, m0, m0 + MB < M ? m0 + MB : M, (t % panels) * NR);
    }
    free(tail);
    return 0;
}

int tandem_linear_f32_available(void) { return 1; }

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* AVX2: sixteen channels are two 8-lane ymm vectors. A tile is up to 6 rows of x against
 * one panel of 16 channels (K x 64 bytes): twelve accumulators, two weight loads and six
 * broadcasts per k. With fewer rows (decode) the k loop is unrolled so that eight
 * independent sums still hide the multiply-add's latency; the first tile on a panel
 * prefetches its lines ahead of the loads (the panel streams from memory once, the
 * other tiles of the block find it in L2). */
#define RT 6              /* rows of x per tile */
#define PF_AHEAD 256      /* floats ahead of the load a prefetch fetches: 16 lines */
#define BLOCK_X 49152     /* floats of x a row block holds (192 KB, half of L2 at most) */

typedef struct {
    const float *x;    /* [M, K] */
    const float *w;    /* packed weight */
    const float *bias; /* [N] or NULL */
    float *out;        /* [M, N] */
    int64_t K, N;
} Gemm;

/* the sums of rows x[0..R-1] (K apart) with the panel w, plus the bias, into out's
 * rows m.. at channels n0..n0+15; R and U (the k unroll) are constants where inlined */
static inline __attribute__((always_inline)) void tile(const Gemm *g, const float *x,
                                                       const float *w, int64_t m, int64_t n0,
                                                       const int R, const int U, const int pf)
{
    const int64_t K = g->K;
    __m256 c[12]; /* c[(u * R + r) * 2 + half]: U * R * 2 <= 12, fixed so it fits registers */
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++)
        c[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + U <= K; k += U) {
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const float *wk = w + (k + u) * 16;
            if (pf)
                _mm_prefetch((const char *)(wk + PF_AHEAD), _MM_HINT_T0);
            const __m256 b0 = _mm256_loadu_ps(wk), b1 = _mm256_loadu_ps(wk + 8);
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                const __m256 v = _mm256_broadcast_ss(x + r * K + k + u);
                c[(u * R + r) * 2] = _mm256_fmadd_ps(v, b0, c[(u * R + r) * 2]);
                c[(u * R + r) * 2 + 1] = _mm256_fmadd_ps(v, b1, c[(u * R + r) * 2 + 1]);
            }
        }
    }
    for (; k < K; k++) { /* K % U */
        const __m256 b0 = _mm256_loadu_ps(w + k * 16), b1 = _mm256_loadu_ps(w + k * 16 + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 v = _mm256_broadcast_ss(x + r * K + k);
            c[r * 2] = _mm256_fmadd_ps(v, b0, c[r * 2]);
            c[r * 2 + 1] = _mm256_fmadd_ps(v, b1, c[r * 2 + 1]);
        }
    }
    const int64_t valid = g->N - n0 < 16 ? g->N - n0 : 16;
    float pad[16] = {0}, part[16];
    const float *bias = g->bias ? g->bias + n0 : pad;
    if (g->bias && valid < 16)
        bias = memcpy(pad, bias, sizeof(float) * (size_t)valid);
    const __m256 bias0 = _mm256_loadu_ps(bias), bias1 = _mm256_loadu_ps(bias + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        __m256 s0 = c[r * 2], s1 = c[r * 2 + 1];
#pragma GCC unroll 4
        for (int u = 1; u < U; u++) {
            s0 = _mm256_add_ps(s0, c[(u * R + r) * 2]);
            s1 = _mm256_add_ps(s1, c[(u * R + r) * 2 + 1]);
        }
        float *o = g->out + (m + r) * g->N + n0;
        float *dst = valid == 16 ? o : part;
        _mm256_storeu_ps(dst, _mm256_add_ps(s0, bias0));
        _mm256_storeu_ps(dst + 8, _mm256_add_ps(s1, bias1));
        if (valid < 16)
            memcpy(o, part, sizeof(float) * (size_t)valid);
    }
}

/* one function per row count (noinline: the accumulators stay in registers), with and
 * without the prefetch */
#define TILE(R, U)                                                                             \
    static __attribute__((noinline)) void tile##R(const Gemm *g, const float *x,               \
                                                  const float *w, int64_t m, int64_t n0,       \
                                                  int pf)                                      \
    {                                                                                          \
        if (pf)                                                                                \
            tile(g, x, w, m, n0, R, U, 1);                                                     \
        else                                                                                   \
            tile(g, x, w, m, n0, R, U, 0);                                                     \
    }
TILE(1, 4)
TILE(2, 2)
TILE(3, 2)
TILE(4, 1)
TILE(5, 1)
TILE(6, 1)

typedef void (*TileFn)(const Gemm *, const float *, const float *, int64_t, int64_t, int);
static const TileFn TILES[RT + 1] = {NULL, tile1, tile2, tile3, tile4, tile5, tile6};

/* every tile of rows m0..m1-1 against the panel p (channels 16p..16p+15) */
static void panel(const Gemm *g, int64_t m0, int64_t m1, int64_t p)
{
    const float *w = g->w + p * g->K * 16;
    for (int64_t m = m0; m < m1; m += RT) {
        const int64_t rows = m1 - m < RT ? m1 - m : RT;
        TILES[rows](g, g->x + m * g->K, w, m, p * 16, m == m0);
    }
}

/* as the AVX-512 path's; the panels past N (the packing's padding to 32) are skipped */
int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                      const float *bias, int64_t N, float *out)
{
    const Gemm g = {x, packed, bias, out, K, N};
    int64_t mb = BLOCK_X / K / RT * RT; /* rows per block: a multiple of RT, x's share in L2 */
    mb = mb < RT ? RT : mb;
    const int64_t panels = (N + 15) / 16, blocks = (M + mb - 1) / mb;
#pragma omp parallel for schedule(static) if (M * N * K > 262144)
    for (int64_t t = 0; t < panels * blocks; t++) {
        const int64_t m0 = (t / panels) * mb;
        panel(&g, m0, m0 + mb < M ? m0 + mb : M, t % panels);
    }
    return 0;
}

int tandem_linear_f32_available(void) { return 1; }

#else /* neither AVX-512 nor AVX2 with FMA: the caller takes oneDNN or F.linear */

int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                      const float *bias, int64_t N, float *out)
{
    (void)x, (void)M, (void)K, (void)packed, (void)bias, (void)N, (void)out;
    return -2;
}

int tandem_linear_f32_available(void) { return 0; }

#endif

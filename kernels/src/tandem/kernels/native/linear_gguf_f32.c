/* Prefill on GGUF block weights: out = x @ W^T through fp32 tiles of W.
 *
 * linear_gguf.c re-unpacks each weight block for every group of four x rows and takes
 * integer dot products row by row: right at decode (M = 1, the weights' bytes are the
 * cost), slower than an fp32 GEMM from a few dozen rows on. Here each thread decodes a
 * band of weight rows to fp32 once (gguf_decode.c) into its own scratch, sized to stay in
 * L2, and multiplies it with every row of x through a register-tiled fp32 kernel, so a
 * call costs one decode of the weights plus the fp32 products.
 *
 * x is rounded as the decode path rounds it (int8 per 32 values, then back to fp32; F16 /
 * BF16 weights: not at all, at decode or here), so
 * both paths compute the same products and differ only in the order of their fp32 sums
 * (~1e-6 relative): a token's logits do not depend on whether its row ran in a batch of
 * 3 or of 300, so engines that batch differently (v0, v1) make the same greedy tokens.
 * Keeping x in fp32 would be closer to the reference, but would move every prefill row by
 * x's int8 rounding (~1e-2 relative) against the same row at decode, and flip near-ties.
 *
 * Layout: x is packed once per call as panels of 16 rows, xp[p][k][16], so one k of a
 * panel is two 8-lane vectors. A micro-tile is 6 weight rows x 16 x rows: per k, two
 * vector loads of x, six broadcasts of W and twelve multiply-adds into twelve
 * accumulators (out^T's tile, stored transposed).
 */
#include <stdlib.h>

#include "tandem_kernels.h"
#include "gguf_common.h"

#define MP 16                  /* rows of x per panel */
#define NR 6                   /* weight rows per micro-tile */
#define BAND_FLOATS (96 * 1024) /* a thread's decoded band: 384 KB, kept in L2 */

/* x [M, K] -> xp [ceil(M / 16)][K][16], zero past row M; with ``round`` each value rounded
 * as linear_gguf.c's quantize_x rounds it: per 32 values, xd * round(x / xd), xd = amax /
 * 127 (F16 / BF16 weights take x as it is, as their decode path does) */
static void pack_x(const float *x, int64_t M, int64_t K, int round, float *xp)
{
    const int64_t panels = (M + MP - 1) / MP;
#pragma omp parallel for schedule(static) if (panels > 1)
    for (int64_t p = 0; p < panels; p++) {
        float *dst = xp + p * K * MP;
        for (int j = 0; j < MP; j++) {
            const int64_t m = p * MP + j;
            if (m >= M) {
                for (int64_t k = 0; k < K; k++)
                    dst[k * MP + j] = 0.0f;
                continue;
            }
            if (!round) {
                for (int64_t k = 0; k < K; k++)
                    dst[k * MP + j] = x[m * K + k];
                continue;
            }
            for (int64_t b = 0; b < K; b += QK) {
                const float *v = x + m * K + b;
                float amax = 0.0f;
                for (int i = 0; i < QK; i++)
                    amax = fmaxf(amax, fabsf(v[i]));
                const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                for (int i = 0; i < QK; i++)
                    dst[(b + i) * MP + j] = scale * (float)(int)lrintf(v[i] * inv);
            }
        }
    }
}

/* c[i][j] = sum over k of w[i * K + k] * xp[k * 16 + j], i < 6, j < 16. Kept apart
 * (noinline) so that its twelve accumulators live in registers. */
#if GGUF_SIMD
#define ROW(i, c0, c1)                                                                         \
    do {                                                                                       \
        const __m256 a = _mm256_broadcast_ss(w + (i) * K + k);                                 \
        c0 = _mm256_fmadd_ps(a, b0, c0);                                                       \
        c1 = _mm256_fmadd_ps(a, b1, c1);                                                       \
    } while (0)

static __attribute__((noinline)) void tile(const float *w, int64_t K, const float *xp,
                                           float c[NR][MP])
{
    /* named, not an array: an array of accumulators goes through the stack every k */
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < K; k++) {
        const __m256 b0 = _mm256_loadu_ps(xp + k * MP), b1 = _mm256_loadu_ps(xp + k * MP + 8);
        ROW(0, c00, c01);
        ROW(1, c10, c11);
        ROW(2, c20, c21);
        ROW(3, c30, c31);
        ROW(4, c40, c41);
        ROW(5, c50, c51);
    }
    const __m256 acc[2 * NR] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    for (int i = 0; i < NR; i++) {
        _mm256_storeu_ps(c[i], acc[2 * i]);
        _mm256_storeu_ps(c[i] + 8, acc[2 * i + 1]);
    }
}
#else
static void tile(const float *w, int64_t K, const float *xp, float c[NR][MP])
{
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < MP; j++)
            c[i][j] = 0.0f;
    for (int64_t k = 0; k < K; k++)
        for (int i = 0; i < NR; i++)
            for (int j = 0; j < MP; j++)
                c[i][j] += w[i * K + k] * xp[k * MP + j];
}
#endif

/* rows n0 .. n0 + rows - 1 of W, decoded in wt [>= rows rounded up to 6][K], against
 * every panel of x: out[m * N + n] */
static void band(const float *wt, int64_t rows, int64_t n0, const float *xp, int64_t M,
                 int64_t K, int64_t N, float *out)
{
    float c[NR][MP];
    for (int64_t p = 0; p * MP < M; p++) {
        const int64_t m0 = p * MP, mr = M - m0 < MP ? M - m0 : MP;
        for (int64_t i0 = 0; i0 < rows; i0 += NR) {
            tile(wt + i0 * K, K, xp + p * K * MP, c);
            const int64_t nr = rows - i0 < NR ? rows - i0 : NR;
            for (int64_t j = 0; j < mr; j++)
                for (int64_t i = 0; i < nr; i++)
                    out[(m0 + j) * N + n0 + i0 + i] = c[i][j];
        }
    }
}

/* out [M, N] = x [M, K] @ W^T in fp32 tiles, W as for tandem_linear_gguf. 0, or -1 when
 * the type is unknown, K is not a multiple of the block, or memory is short. */
int tandem_linear_gguf_f32(int type, const float *x, int64_t M, int64_t K, const uint8_t *w,
                           int64_t N, float *out)
{
    const int64_t bb = tandem_gguf_block_bytes(type);
    if (bb < 0 || K % block_values(type) != 0 || K == 0 || M < 0 || N < 0)
        return -1;
    if (M == 0 || N == 0)
        return 0;
    const int64_t row = K / block_values(type) * bb, panels = (M + MP - 1) / MP;
    /* a band: as many rows (a multiple of 6, at least 6) as fit the L2 share */
    int64_t nb = BAND_FLOATS / K / NR * NR;
    nb = nb < NR ? NR : nb > 96 ? 96 : nb;
    float *xp = malloc(sizeof(float) * (size_t)(panels * K * MP));
    if (!xp)
        return -1;
    pack_x(x, M, K, !is_half(type), xp);
    const int64_t bands = (N + nb - 1) / nb;
    int failed = 0;
#pragma omp parallel
    {
        /* this thread's decoded band, kept between calls (grown as needed) */
        static __thread float *wt = NULL;
        static __thread size_t have = 0;
        const size_t need = (size_t)(nb * K);
        if (need > have) {
            free(wt);
            wt = malloc(sizeof(float) * need);
            have = wt ? need : 0;
        }
        if (!wt) {
#pragma omp atomic write
            failed = 1;
        }
        /* bands handed out one at a time: a thread slowed by a busy core takes fewer */
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < bands; b++) {
            if (!wt)
                continue;
            const int64_t n0 = b * nb, rows = N - n0 < nb ? N - n0 : nb;
            for (int64_t i = 0; i < rows; i++)
                tandem_gguf_decode_row(type, w + (n0 + i) * row, K, wt + i * K);
            const int64_t padded = (rows + NR - 1) / NR * NR; /* zero rows to a whole tile */
            memset(wt + rows * K, 0, sizeof(float) * (size_t)((padded - rows) * K));
            band(wt, rows, n0, xp, M, K, N, out);
        }
    }
    free(xp);
    return failed ? -1 : 0;
}

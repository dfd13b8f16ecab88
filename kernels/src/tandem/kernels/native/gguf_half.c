/* F16 and BF16 weights (GGUF types 1 and 30) kept 16-bit: a row of K values is its 2 K
 * bytes as the file stores them, one output channel a row.
 *
 * Decode (linear_gguf.c: up to four rows of x against a band of weight rows). x stays in
 * fp32: these weights keep more than an int8 rounding of x would, so the products are
 * exactly those of F.linear(x, w.float()), summed in fp32 in another order. Each weight
 * vector is widened to fp32 in registers as it is loaded (vcvtph2ps for f16; for bf16 the
 * 16 bits moved to the top of a 32-bit lane, which is the float they stand for) and
 * multiplied into per-row accumulators, so the weights stream once at two bytes a value,
 * half fp32's, and nothing of the weight is ever stored wider.
 *
 * The weight rows are read one after another, four vectors a step into four accumulators
 * (two a row of x from two rows of x on): the band is one stream of bytes, which the
 * hardware prefetcher follows at the memory's pace (reading four rows side by side, or
 * prefetching ahead in software as the block formats do, measured 2-4x slower on Zen 4).
 * x's rows are read again for every weight row, from L1 while they fit there (X_IN_L1:
 * 16 KB); beyond, with two to four rows of x, a tile of four weight rows (two from three
 * rows of x on AVX2) shares each x vector it loads instead (2x faster there). A vector is
 * 16 values with AVX-512 (up to 16 accumulators of 32 registers), 8 with AVX2 + F16C (16
 * registers); plain C elsewhere. K needs no particular multiple: the values past the last
 * whole vector are summed one by one.
 *
 * Prefill (linear_gguf_f32.c) widens bands of rows with tandem_gguf_half_decode_row and
 * runs its fp32 tiles, with x not rounded either.
 */
#include "tandem_kernels.h"
#include "gguf_common.h"

#define RB 4 /* rows of x at most */
/* floats of x (all its rows) up to which a weight row at a time reads them from L1 */
#define X_IN_L1 4096

#if defined(__AVX512F__) && GGUF_SIMD
#define VW 16
#define V(op) _mm512_##op /* an fp32 vector's intrinsic */
typedef __m512 vf;
typedef __m256i vh; /* VW 16-bit values */
#define LOAD_H(p) _mm256_loadu_si256((const __m256i *)(p))
#define AS_FLOAT _mm512_castsi512_ps
#define SUM _mm512_reduce_add_ps
#define WIDE(R) 4 /* weight rows a tile, two to four rows of x */
#elif GGUF_SIMD
#define VW 8
#define V(op) _mm256_##op
typedef __m256 vf;
typedef __m128i vh;
#define LOAD_H(p) _mm_loadu_si128((const __m128i *)(p))
#define AS_FLOAT _mm256_castsi256_ps
#define SUM hsum
#define WIDE(R) ((R) <= 2 ? 4 : 2)
#endif

static inline float value(int bf, const uint8_t *p) { return bf ? bf16(p) : half(p); }

#ifdef VW
#define LOAD_X V(loadu_ps)
#define STORE V(storeu_ps)
#define FMA V(fmadd_ps)
#define ZERO V(setzero_ps)
#define ADD V(add_ps)
#define UNROLL(R) ((R) == 1 ? 4 : 2) /* vectors of k a step, one row of weights */

/* VW weights at p widened to fp32: f16 converted, bf16's 16 bits moved to the top of a
 * 32-bit lane (the float they stand for) */
static inline vf load_w(int bf, const uint8_t *p)
{
    const vh h = LOAD_H(p);
    return bf ? AS_FLOAT(V(slli_epi32)(V(cvtepu16_epi32)(h), 16)) : V(cvtph_ps)(h);
}

/* One weight row against R rows of x, U vectors of k a step (U accumulators a row of x,
 * so the multiply-adds' latency is covered): out[r * ldo]. R and U are constants where
 * inlined, so the accumulators live in registers. */
static inline __attribute__((always_inline)) void one_row(int bf, int R, int U, const uint8_t *w,
                                                          const float *x, int64_t K, float *out,
                                                          int64_t ldo)
{
    vf acc[RB][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++)
            acc[r][u] = ZERO();
    int64_t k = 0;
    for (; k + U * VW <= K; k += U * VW) {
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const vf wv = load_w(bf, w + 2 * (k + u * VW));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][u] = FMA(wv, LOAD_X(x + r * K + k + u * VW), acc[r][u]);
        }
    }
    for (; k + VW <= K; k += VW) {
        const vf wv = load_w(bf, w + 2 * k);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r][0] = FMA(wv, LOAD_X(x + r * K + k), acc[r][0]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float tail = 0.0f;
        for (int64_t j = k; j < K; j++)
            tail += value(bf, w + 2 * j) * x[r * K + j];
        vf s = acc[r][0];
#pragma GCC unroll 4
        for (int u = 1; u < U; u++)
            s = ADD(s, acc[r][u]);
        out[r * ldo] = SUM(s) + tail;
    }
}

/* Weight rows w + i * row (i < NB) against R rows of x: out[r * ldo + i]. R and NB are
 * constants where inlined, so the accumulators live in registers. */
static inline __attribute__((always_inline)) void tile(int bf, int R, int NB, const uint8_t *w,
                                                       int64_t row, const float *x, int64_t K,
                                                       float *out, int64_t ldo)
{
    vf acc[RB][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < NB; i++)
            acc[r][i] = ZERO();
    int64_t k = 0;
    for (; k + VW <= K; k += VW) {
        vf wv[4];
#pragma GCC unroll 4
        for (int i = 0; i < NB; i++)
            wv[i] = load_w(bf, w + i * row + 2 * k);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const vf xv = LOAD_X(x + r * K + k);
#pragma GCC unroll 4
            for (int i = 0; i < NB; i++)
                acc[r][i] = FMA(wv[i], xv, acc[r][i]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < NB; i++) {
            float tail = 0.0f;
            for (int64_t j = k; j < K; j++)
                tail += value(bf, w + i * row + 2 * j) * x[r * K + j];
            out[r * ldo + i] = SUM(acc[r][i]) + tail;
        }
}

/* n weight rows against R rows of x: one row at a time (the band is one stream of bytes)
 * while x's rows sit in L1 together, re-read for each weight row; in tiles of WIDE rows
 * beyond that, each x vector loaded serving them all */
static inline __attribute__((always_inline)) void band(int bf, int R, const uint8_t *w, int n,
                                                       int64_t row, const float *x, int64_t K,
                                                       float *out, int64_t ldo)
{
    int i = 0;
    if (R * K > X_IN_L1)
        for (; i + WIDE(R) <= n; i += WIDE(R))
            tile(bf, R, WIDE(R), w + i * row, row, x, K, out + i, ldo);
    for (; i < n; i++)
        one_row(bf, R, UNROLL(R), w + i * row, x, K, out + i, ldo);
}
#else
static void band(int bf, int R, const uint8_t *w, int n, int64_t row, const float *x,
                 int64_t K, float *out, int64_t ldo)
{
    for (int i = 0; i < n; i++)
        for (int r = 0; r < R; r++) {
            float total = 0.0f;
            for (int64_t j = 0; j < K; j++)
                total += value(bf, w + i * row + 2 * j) * x[r * K + j];
            out[r * ldo + i] = total;
        }
}
#endif

#define HCASE(B, R)                                                                            \
    case (B) * 8 + (R):                                                                        \
        band((B), (R), w, n, row, x, K, out, ldo);                                             \
        return;

void tandem_gguf_half_rows(int type, int R, const uint8_t *w, int n, int64_t row, const float *x,
                           int64_t K, float *out, int64_t ldo)
{
    switch ((type == BF16) * 8 + R) {
        HCASE(0, 1)
        HCASE(0, 2)
        HCASE(0, 3)
        HCASE(0, 4)
        HCASE(1, 1)
        HCASE(1, 2)
        HCASE(1, 3)
        HCASE(1, 4)
    default:
        return;
    }
}

/* A row of K 16-bit values (bf16 where bf, else f16) -> out; bf a constant where inlined */
static inline __attribute__((always_inline)) void widen_row(int bf, const uint8_t *w, int64_t K,
                                                            float *out)
{
    int64_t k = 0;
#ifdef VW
    for (; k + VW <= K; k += VW)
        STORE(out + k, load_w(bf, w + 2 * k));
#endif
    for (; k < K; k++)
        out[k] = value(bf, w + 2 * k);
}

void tandem_gguf_half_decode_row(int type, const uint8_t *w, int64_t K, float *out)
{
    if (type == BF16)
        widen_row(1, w, K, out);
    else
        widen_row(0, w, K, out);
}

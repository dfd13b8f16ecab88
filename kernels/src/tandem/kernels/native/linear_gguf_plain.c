/* The block rows of linear_gguf.c in plain C, for machines without AVX2 / FMA / F16C
 * (linear_gguf_rows.c and linear_gguf_k.c have the vector loops): the same integer sums,
 * block by block, x read through the paired layout of the 4/5-bit blocks (gguf_common.h);
 * the K-quants' super-blocks as linear_gguf_k.c and gguf_k23.h describe them. */
#include "tandem_kernels.h"
#include "gguf_common.h"
#include "gguf_k23.h"

#if !GGUF_SIMD
static inline void row_plain(int type, int R, const uint8_t *w, int64_t nb, const int8_t *xq,
                             const float *xd, const float *xs, int64_t K, float *out,
                             int64_t ldo)
{
    const int64_t bb = tandem_gguf_block_bytes(type);
    const int five = type == Q5_0 || type == Q5_1, sym = type == Q4_0 || type == Q5_0;
    const int at = sym ? 2 : 4;
    for (int r = 0; r < R; r++) {
        const int8_t *x = xq + r * K;
        float total = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + b * bb;
            const float wd = half(blk), d = xd[r * nb + b], s = xs[r * nb + b];
            int32_t sum = 0;
            if (type == Q8_0) {
                const int8_t *q = (const int8_t *)(blk + 2);
                for (int i = 0; i < QK; i++)
                    sum += q[i] * x[b * QK + i];
                total += wd * d * (float)sum;
                continue;
            }
            const uint8_t *nib = blk + at + 4 * five;
            uint32_t hb = 0;
            if (five)
                memcpy(&hb, blk + at, 4);
            for (int i = 0; i < QK / 2; i++) {
                const int q0 = (nib[i] & 0x0F) | (int)((hb >> i) & 1) << 4;
                const int q1 = (nib[i] >> 4) | (int)((hb >> (i + QK / 2)) & 1) << 4;
                sum += q0 * x[paired(b, i, nb)] + q1 * x[paired(b, i + QK / 2, nb)];
            }
            const float wm = sym ? (five ? -16.0f : -8.0f) * wd : half(blk + 2);
            total += wd * d * (float)sum + wm * s;
        }
        out[r * ldo] = total;
    }
}

void tandem_gguf_rows(int type, int R, const uint8_t *w, int n, int64_t row, const int8_t *xq,
                      const float *xd, const float *xs, int64_t K, float *out, int64_t ldo)
{
    for (int i = 0; i < n; i++)
        row_plain(type, R, w + i * row, K / QK, xq, xd, xs, K, out + i, ldo);
}
/* Element i (0..255) of a super-block as its integer code q (the value is a * q + c). */
static inline int code(int type, const uint8_t *blk, int i)
{
    const int l = i % 32;
    if (type == Q6_K) {
        const int n = i / 128, g = i % 128 / 32;
        const uint8_t nib = blk[64 * n + 32 * (g & 1) + l];
        const int lo4 = g < 2 ? nib & 15 : nib >> 4;
        return (lo4 | (((blk[128 + 32 * n + l] >> (2 * g)) & 3) << 4)) - 32;
    }
    const int j = i / 32;
    const uint8_t nib = blk[(type == Q5_K ? 48 : 16) + 32 * (j / 2) + l];
    const int q = j % 2 ? nib >> 4 : nib & 15;
    return type == Q5_K ? q | (((blk[16 + l] >> j) & 1) << 4) : q;
}

/* Block j (0..7, 32 values) of a Q4_K / Q5_K / Q6_K super-block against the 32 codes x of a
 * block of x, its scale xd and code sum xs */
static inline float block_k(int type, const uint8_t *blk, int j, const int8_t *x, float xd,
                            float xs)
{
    if (type == Q6_K) {
        const int8_t *sc = (const int8_t *)(blk + 192);
        int32_t sum0 = 0, sum1 = 0;
        for (int i = 0; i < 16; i++) {
            sum0 += code(type, blk, 32 * j + i) * x[i];
            sum1 += code(type, blk, 32 * j + 16 + i) * x[16 + i];
        }
        return half(blk + 208) * xd * (float)(sc[2 * j] * sum0 + sc[2 * j + 1] * sum1);
    }
    int sc, m;
    scale_min(blk + 4, j, &sc, &m);
    int32_t sum = 0;
    for (int i = 0; i < QK; i++)
        sum += code(type, blk, 32 * j + i) * x[i];
    return half(blk) * (float)sc * xd * (float)sum - half(blk + 2) * (float)m * xs;
}

static inline void k_row(int type, int R, const uint8_t *w, const int8_t *xq, const float *xd,
                         const float *xs, const float *xh, int64_t K, float *out, int64_t ldo)
{
    const int64_t nb = K / QK, bb = tandem_gguf_block_bytes(type);
    const int low = type == Q2_K || type == Q3_K;
    for (int r = 0; r < R; r++) {
        float total = 0.0f;
        for (int64_t s = 0; s < K / QK_K; s++) {
            const uint8_t *blk = w + s * bb;
            for (int j = 0; j < 8; j++) { /* block b of x: 32 values */
                const int64_t b = s * 8 + j;
                const int8_t *x = xq + r * K + b * QK;
                const float d = xd[r * nb + b], sum = xs[r * nb + b];
                total += low ? block_k23(type, blk, j, x, d, sum, xh[r * nb + b])
                             : block_k(type, blk, j, x, d, sum);
            }
        }
        out[r * ldo] = total;
    }
}

void tandem_gguf_k_rows(int type, int R, int W, const uint8_t *w, int64_t row, const int8_t *xq,
                        const float *xd, const float *xs, const float *xh, int64_t K, float *out,
                        int64_t ldo)
{
    for (int v = 0; v < W; v++)
        k_row(type, R, w + v * row, xq, xd, xs, xh, K, out + v, ldo);
}
#endif

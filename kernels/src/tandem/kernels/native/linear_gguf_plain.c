/* The 32-value block rows of linear_gguf.c in plain C, for machines without AVX2 / FMA /
 * F16C (linear_gguf_rows.c has the vector loops): the same integer sums, block by block,
 * x read through the paired layout of the 4/5-bit blocks (gguf_common.h). */
#include "tandem_kernels.h"
#include "gguf_common.h"

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
#endif

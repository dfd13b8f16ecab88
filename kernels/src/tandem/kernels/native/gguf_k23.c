/* Q2_K and Q3_K rows decoded to fp32 (gguf_decode.c: embedding rows, the prefill path's
 * bands): a super-block's codes widened by d * c_j and offset by o_j per 16 values (the
 * formats: gguf_k23.h). */
#include "tandem_kernels.h"
#include "gguf_common.h"
#include "gguf_k23.h"

#if GGUF_SIMD
/* One super-block -> o[0..255]: the codes, widened by d * c_j and o_j per 16 */
static inline void decode_super(int type, const uint8_t *blk, float *o)
{
    int c[16];
    float ofs[16];
    sub_scales(type, blk, c, ofs);
    const float d = scale_d(type, blk);
    for (int b = 0; b < 8; b++) {
        const float a[2] = {d * (float)c[2 * b], d * (float)c[2 * b + 1]};
        bytes_to_f32(codes(type, blk, b), 0, a, ofs + 2 * b, o + 32 * b);
    }
}
#else
static inline void decode_super(int type, const uint8_t *blk, float *o)
{
    int c[16];
    float ofs[16];
    sub_scales(type, blk, c, ofs);
    const float d = scale_d(type, blk);
    for (int i = 0; i < QK_K; i++)
        o[i] = d * (float)c[i / 16] * (float)code23(type, blk, i) + ofs[i / 16];
}
#endif

void tandem_gguf_k23_decode_row(int type, const uint8_t *w, int64_t K, float *out)
{
    const int64_t bb = type == Q2_K ? 84 : 110;
    for (int64_t s = 0; s < K / QK_K; s++) {
        if (type == Q2_K)
            decode_super(Q2_K, w + s * bb, out + s * QK_K);
        else
            decode_super(Q3_K, w + s * bb, out + s * QK_K);
    }
}

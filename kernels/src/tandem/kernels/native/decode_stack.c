/* A step of decodes (or of a few new tokens a sequence: a speculative verify) through a
 * whole stack of decoder layers, in one call.
 *
 * A decode token of a small model is ~8 kernel calls a layer; from Python each costs
 * several microseconds of argument handling around work of the same size, and on a
 * 135M model the calls cost as much as the weights' reads. Here the same kernels run
 * in the same order on the same inputs (so the results are the module path's, bit for
 * bit), driven by a table of layers made once per model:
 *
 *   h, res = add_rms_norm(x, res, in_norm)        (the first layer: res = x)
 *   a      = rope_decode(linear(qkv, h) + qkv_bias)
 *   h, res = add_rms_norm(linear(o, a), res, post_norm)
 *   x      = linear(down, silu_and_mul(linear(gate_up, h)))
 *
 * A linear is a GGUF weight (up to three parts of different formats stacked along the
 * output: a Q4_K_M fused projection) or an fp32 weight packed for linear_f32.c, each
 * with an optional fp32 bias. x and res: [T, C], updated in place; the caller applies the
 * final norm. Positions, slots, lengths and tables must be validated (C trusts them).
 *
 * With cu_seqlens (B + 1 token offsets) the T tokens are B sequences' new tokens laid out
 * as a prefill step, and attention is the module path's for such a step: rope on q and
 * on k, the K/V write, then paged prefill attention over each sequence's cache.
 */
#include <stdint.h>
#include <string.h>

/* the kernels of the other files of this library */
void tandem_add_rms_norm_f32(const float *x, const float *residual, const float *weight,
                             float eps, int64_t T, int64_t C, float *out, float *summed);
void tandem_silu_and_mul_f32(const float *x, int64_t T, int64_t I, float *out);
int tandem_rope_decode_f32(const float *qkv, int64_t row_stride, const int64_t *positions,
                           const float *cos_sin, const int64_t *slots, float *k_cache,
                           float *v_cache, const int32_t *seq_lens, const int32_t *block_tables,
                           int64_t B, int64_t H, int64_t KVH, int64_t D, int64_t S, int64_t M,
                           float scale, int64_t window, float softcap, float *out);
int tandem_paged_prefill_f32(const float *q, const float *k_cache, const float *v_cache,
                             const int32_t *cu_seqlens_q, const int32_t *seq_lens,
                             const int32_t *block_tables, int64_t B, int64_t T, int64_t H,
                             int64_t KVH, int64_t D, int64_t S, int64_t M, float scale,
                             int64_t window, float softcap, float *out);
void tandem_rotary_f32(const int64_t *positions, const float *x, int64_t row_stride,
                       const float *cos_sin, int64_t T, int64_t H, int64_t D, float *out);
void tandem_write_kv_f32(const float *k, int64_t k_stride, const float *v, int64_t v_stride,
                         const int64_t *slots, int64_t T, int64_t row, float *k_cache,
                         float *v_cache);
int tandem_linear_gguf(int type, const float *x, int64_t M, int64_t K, const uint8_t *w,
                       int64_t N, float *out);
int tandem_linear_gguf_f32(int type, const float *x, int64_t M, int64_t K, const uint8_t *w,
                           int64_t N, float *out);
int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                      const float *bias, int64_t N, float *out);

#define MAX_PARTS 3
#define GGUF_TILE_ROWS 16 /* linear_gguf.PREFILL_ROWS: the fp32-tile kernel from here */

typedef struct {
    int64_t kind;             /* 0: GGUF parts, 1: fp32 packed (linear_f32.c) */
    int64_t parts;            /* GGUF: 1..MAX_PARTS */
    int64_t qtype[MAX_PARTS]; /* GGUF: each part's block format */
    int64_t rows[MAX_PARTS];  /* GGUF: each part's output channels */
    const void *w[MAX_PARTS]; /* GGUF: each part's blocks; fp32: the packed panels */
    const float *bias;        /* [N] or NULL */
    int64_t n, k;
} Lin;

typedef struct {
    const float *in_norm, *post_norm; /* [C] */
    Lin qkv, o, gate_up, down;
    float *k_cache, *v_cache;         /* [N, S, KVH, D] */
    int64_t window;                   /* 0: none */
    float softcap;                    /* 0: none */
    float scale;
} Layer;

/* out [B, n] = x [B, k] @ W^T + bias; part p's columns into a scratch row block, then
 * into their place (the module path concatenates the parts the same way). */
static int linear(const Lin *l, const float *x, int64_t B, float *out, float *part_out)
{
    if (l->kind == 1) {
        if (tandem_linear_f32(x, B, l->k, l->w[0], l->bias, l->n, out) != 0)
            return -1;
        return 0;
    }
    int64_t col = 0;
    for (int64_t p = 0; p < l->parts; p++) {
        const int64_t n = l->rows[p];
        float *dst = l->parts == 1 ? out : part_out;
        const int rc = B >= GGUF_TILE_ROWS
                           ? tandem_linear_gguf_f32((int)l->qtype[p], x, B, l->k, l->w[p], n, dst)
                           : tandem_linear_gguf((int)l->qtype[p], x, B, l->k, l->w[p], n, dst);
        if (rc != 0)
            return -1;
        if (l->parts > 1)
            for (int64_t b = 0; b < B; b++)
                memcpy(out + b * l->n + col, dst + b * n, n * sizeof(float));
        col += n;
    }
    if (l->bias)
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < l->n; i++)
                out[b * l->n + i] += l->bias[i];
    return 0;
}

/* What a step's attention reads besides the layer: the tokens' positions and slots, the
 * sequences' lengths and tables (and token offsets, NULL for a step of decodes). */
typedef struct {
    const int64_t *positions, *slots;
    const float *cos_sin;
    const int32_t *cu_seqlens, *seq_lens, *tables;
    int64_t T, B, H, KVH, D, S, M;
} Step;

/* attn [T, H * D] from qkv [T, Q]; qr [T, H * D] and kr [T, KVH * D]: scratch for the
 * rotated q and k of a step with cu_seqlens */
static int attend(const Layer *ly, const Step *st, const float *qkv, float *attn, float *qr,
                  float *kr)
{
    const int64_t H = st->H, KVH = st->KVH, D = st->D, Q = (H + 2 * KVH) * D;
    if (!st->cu_seqlens)
        return tandem_rope_decode_f32(qkv, Q, st->positions, st->cos_sin, st->slots,
                                      ly->k_cache, ly->v_cache, st->seq_lens, st->tables, st->B,
                                      H, KVH, D, st->S, st->M, ly->scale, ly->window,
                                      ly->softcap, attn);
    tandem_rotary_f32(st->positions, qkv, Q, st->cos_sin, st->T, H, D, qr);
    tandem_rotary_f32(st->positions, qkv + H * D, Q, st->cos_sin, st->T, KVH, D, kr);
    tandem_write_kv_f32(kr, KVH * D, qkv + (H + KVH) * D, Q, st->slots, st->T, KVH * D,
                        ly->k_cache, ly->v_cache);
    return tandem_paged_prefill_f32(qr, ly->k_cache, ly->v_cache, st->cu_seqlens, st->seq_lens,
                                    st->tables, st->B, st->T, H, KVH, D, st->S, st->M,
                                    ly->scale, ly->window, ly->softcap, attn);
}

/* scratch: floats for h [T, C], qkv [T, Q], attn [T, H * D], gate_up [T, 2 I], act [T, I],
 * one part's output [T, max part rows], then (with cu_seqlens) the rotated q [T, H * D]
 * and k [T, KVH * D] (see decode_stack.scratch_floats). B sequences: B == T without
 * cu_seqlens. Returns 0, or -(layer + 1) when a kernel refused its call (the caches of
 * the layers before it are written). */
int64_t tandem_decode_stack_f32(const Layer *layers, int64_t L, float *x, float *res, int64_t T,
                                int64_t C, int64_t H, int64_t KVH, int64_t D, int64_t I,
                                float eps, const int64_t *positions, const float *cos_sin,
                                const int64_t *slots, const int32_t *cu_seqlens, int64_t B,
                                const int32_t *seq_lens, const int32_t *tables, int64_t S,
                                int64_t M, int64_t max_part, float *scratch)
{
    const int64_t Q = (H + 2 * KVH) * D;
    const Step st = {positions, slots, cos_sin, cu_seqlens, seq_lens, tables,
                     T, B, H, KVH, D, S, M};
    float *h = scratch, *qkv = h + T * C, *attn = qkv + T * Q, *gu = attn + T * H * D;
    float *act = gu + T * 2 * I, *part = act + T * I;
    float *qr = part + T * max_part, *kr = qr + T * H * D;
    for (int64_t i = 0; i < L; i++) {
        const Layer *ly = layers + i;
        if (i == 0) { /* no residual yet: it is x itself */
            tandem_add_rms_norm_f32(x, NULL, ly->in_norm, eps, T, C, h, NULL);
            memcpy(res, x, T * C * sizeof(float));
        } else {
            tandem_add_rms_norm_f32(x, res, ly->in_norm, eps, T, C, h, res);
        }
        if (linear(&ly->qkv, h, T, qkv, part) != 0)
            return -(i + 1);
        if (attend(ly, &st, qkv, attn, qr, kr) != 0)
            return -(i + 1);
        if (linear(&ly->o, attn, T, x, part) != 0)
            return -(i + 1);
        tandem_add_rms_norm_f32(x, res, ly->post_norm, eps, T, C, h, res);
        if (linear(&ly->gate_up, h, T, gu, part) != 0)
            return -(i + 1);
        tandem_silu_and_mul_f32(gu, T, I, act);
        if (linear(&ly->down, act, T, x, part) != 0)
            return -(i + 1);
    }
    return 0;
}

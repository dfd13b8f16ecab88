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

#include "tandem_kernels.h"

/* out [B, n] = x [B, k] @ W^T + bias; part p's columns into a scratch row block, then
 * into their place (the module path concatenates the parts the same way). */
static int linear(const tandem_linear *l, const float *x, int64_t B, float *out, float *part_out)
{
    if (l->kind == TANDEM_LINEAR_F32) {
        if (tandem_linear_f32(x, B, l->k, l->w[0], l->bias, l->n, out) != 0)
            return -1;
        return 0;
    }
    int64_t col = 0;
    for (int64_t p = 0; p < l->parts; p++) {
        const int64_t n = l->rows[p];
        float *dst = l->parts == 1 ? out : part_out;
        const int rc = B >= TANDEM_GGUF_TILE_ROWS
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

/* attn [T, H * D] from qkv [T, Q]; qr [T, H * D] and kr [T, KVH * D]: scratch for the
 * rotated q and k of a step with cu_seqlens */
static int attend(const tandem_attention *a, const tandem_step *st, const float *qkv,
                  float *attn, float *qr, float *kr)
{
    const int64_t H = a->heads, KVH = a->kv_heads, D = a->head_dim, Q = (H + 2 * KVH) * D;
    if (!st->cu_seqlens)
        return tandem_rope_decode_f32(a, st, qkv, Q, attn);
    tandem_rotary_f32(st->positions, qkv, Q, st->cos_sin, st->tokens, H, D, qr);
    tandem_rotary_f32(st->positions, qkv + H * D, Q, st->cos_sin, st->tokens, KVH, D, kr);
    tandem_write_kv_f32(kr, KVH * D, qkv + (H + KVH) * D, Q, st->slots, st->tokens, KVH * D,
                        a->k_cache, a->v_cache);
    return tandem_paged_prefill_f32(a, st, qr, attn);
}

/* scratch: floats for h [T, C], qkv [T, Q], attn [T, H * D], gate_up [T, 2 I], act [T, I],
 * one part's output [T, max part rows], then (with cu_seqlens) the rotated q [T, H * D]
 * and k [T, KVH * D] (see decode_stack.scratch_floats); H, KVH and D are the first
 * layer's (every layer's alike). A step of decodes: B == T. Returns 0, or -(layer + 1)
 * when a kernel refused its call (the caches of the layers before it are written). */
int64_t tandem_decode_stack_f32(const tandem_layer *layers, int64_t count,
                                const tandem_stack_shape *shape, const tandem_step *st,
                                float *x, float *res, float *scratch)
{
    if (count <= 0)
        return 0;
    const tandem_attention *a0 = &layers[0].attention;
    const int64_t T = st->tokens, C = shape->hidden, I = shape->intermediate;
    const int64_t H = a0->heads, KVH = a0->kv_heads, D = a0->head_dim;
    const int64_t Q = (H + 2 * KVH) * D;
    const float eps = shape->eps;
    float *h = scratch, *qkv = h + T * C, *attn = qkv + T * Q, *gu = attn + T * H * D;
    float *act = gu + T * 2 * I, *part = act + T * I;
    float *qr = part + T * shape->max_part, *kr = qr + T * H * D;
    for (int64_t i = 0; i < count; i++) {
        const tandem_layer *ly = layers + i;
        if (i == 0) { /* no residual yet: it is x itself */
            tandem_add_rms_norm_f32(x, NULL, ly->in_norm, eps, T, C, h, NULL);
            memcpy(res, x, T * C * sizeof(float));
        } else {
            tandem_add_rms_norm_f32(x, res, ly->in_norm, eps, T, C, h, res);
        }
        if (linear(&ly->qkv, h, T, qkv, part) != 0)
            return -(i + 1);
        if (attend(&ly->attention, st, qkv, attn, qr, kr) != 0)
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

/* The steps of a decode-stack layer: its linear layers, its attention block (with q/k
 * norms and its own rope table where the layer has them) and its gated MLP. Each runs the
 * module path's kernels in the module path's order, so the numbers are the same. */
#include <stdint.h>
#include <string.h>

#include "decode_ops.h"
#include "tandem_kernels.h"

int stack_linear(const tandem_linear *l, const float *x, int64_t B, float *out, float *part_out)
{
    if (l->kind == TANDEM_LINEAR_F32)
        return tandem_linear_f32(x, B, l->k, l->w[0], l->bias, l->n, out) != 0 ? -1 : 0;
    if (l->kind == TANDEM_LINEAR_I8)
        return tandem_linear_i8(x, B, l->k, l->w[0], l->wsum, l->scale, l->bias, l->n, l->kp,
                                l->rel, out) < 0
                   ? -1
                   : 0;
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

/* Rows [T, w] of qkv (Q floats apart) into out [T, w], normed over runs of `width`. */
static void qk_norm(const float *qkv, int64_t T, int64_t Q, int64_t w, int64_t width,
                    const float *weight, float eps, float *out)
{
    for (int64_t t = 0; t < T; t++)
        memcpy(out + t * w, qkv + t * Q, w * sizeof(float));
    tandem_add_rms_norm_f32(out, NULL, weight, eps, T * w / width, width, out, NULL);
}

/* attn [T, H D] from qkv [T, Q]. Without q/k norms or partial rotary a step of decodes is
 * one fused call (rope, K/V write, attention); else, and for a step laid out as a prefill,
 * rope on q and on k into scratch (the leading R of each head), the K/V write, then decode
 * or prefill attention. */
static int attend(const tandem_layer *ly, const tandem_step *st, float eps, const float *qkv,
                  float *attn, const stack_scratch *s)
{
    const tandem_attention *a = &ly->attention;
    const int64_t H = a->heads, KVH = a->kv_heads, D = a->head_dim, Q = (H + 2 * KVH) * D;
    const int64_t T = st->tokens, R = ly->rotary_dim;
    if (ly->qk_norm == TANDEM_QK_NORM_NONE && !st->cu_seqlens && R == D)
        return tandem_rope_decode_f32(a, st, qkv, Q, attn);
    const float *q = qkv, *k = qkv + H * D;
    int64_t q_stride = Q, k_stride = Q;
    if (ly->qk_norm != TANDEM_QK_NORM_NONE) {
        const int head = ly->qk_norm == TANDEM_QK_NORM_HEAD;
        qk_norm(qkv, T, Q, H * D, head ? D : H * D, ly->q_norm, eps, s->qn);
        qk_norm(qkv + H * D, T, Q, KVH * D, head ? D : KVH * D, ly->k_norm, eps, s->kn);
        q = s->qn, k = s->kn, q_stride = H * D, k_stride = KVH * D;
    }
    tandem_rotary_part_f32(st->positions, q, q_stride, st->cos_sin, T, H, D, R, s->qr);
    tandem_rotary_part_f32(st->positions, k, k_stride, st->cos_sin, T, KVH, D, R, s->kr);
    tandem_write_kv_f32(s->kr, KVH * D, qkv + (H + KVH) * D, Q, st->slots, T, KVH * D,
                        a->k_cache, a->v_cache);
    if (st->cu_seqlens)
        return tandem_paged_prefill_f32(a, st, s->qr, attn);
    return tandem_paged_decode_f32(a, st, s->qr, attn);
}

int stack_attention(const tandem_layer *ly, const tandem_step *step, float eps, const float *x,
                    float *out, const stack_scratch *s)
{
    tandem_step st = *step;
    st.cos_sin = ly->cos_sin; /* the layer's own rope (Gemma 3: local and global bases) */
    if (stack_linear(&ly->qkv, x, st.tokens, s->qkv, s->part) != 0)
        return -1;
    if (attend(ly, &st, eps, s->qkv, s->attn, s) != 0)
        return -1;
    return stack_linear(&ly->o, s->attn, st.tokens, out, s->part);
}

int stack_gated(const tandem_layer *ly, const tandem_linear *gate_up, const tandem_linear *down,
                int64_t I, const float *x, int64_t n, float *gu, float *act, float *y,
                float *part)
{
    if (stack_linear(gate_up, x, n, gu, part) != 0)
        return -1;
    stack_gate(ly, gu, n, I, act);
    return stack_linear(down, act, n, y, part);
}

int stack_mlp(const tandem_layer *ly, int64_t T, int64_t I, const float *x, float *out,
              const stack_scratch *s)
{
    return stack_gated(ly, &ly->gate_up, &ly->down, I, x, T, s->gu, s->act, out, s->part);
}

void stack_gate(const tandem_layer *ly, const float *gu, int64_t T, int64_t I, float *act)
{
    if (ly->gate == TANDEM_GATE_GELU_TANH)
        tandem_gelu_tanh_and_mul_f32(gu, T, I, act);
    else
        tandem_silu_and_mul_f32(gu, T, I, act);
}

void stack_scale(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= scale;
}

void stack_add(float *res, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        res[i] += x[i];
}

/* A step of decodes (or of a few new tokens a sequence: a speculative verify) through a
 * whole stack of decoder layers, in one call.
 *
 * A decode token of a small model is ~8 kernel calls a layer; from Python each costs
 * several microseconds of argument handling around work of the same size, and on a
 * 135M model the calls cost as much as the weights' reads. Here the same kernels run
 * in the same order on the same inputs (so the results are the module path's, bit for
 * bit), driven by a table of layers made once per model. Each layer's program is read
 * from its entry: where its norms sit (ModelSpec.norm), q/k norms, the MLP's gate, the
 * residual scale and its rope table; its attention's window and soft-cap. With A the
 * attention block (decode_ops.c) and M the MLP, s the residual scale:
 *
 *   pre:      h, res = add_norm(x, res, in);  x = s A(h);  h, res = add_norm(x, res, post_attn)
 *             x = s M(h)
 *   sandwich: h, res = add_norm(x, res, in);  x = s norm(A(h), post_attn)
 *             h, res = add_norm(x, res, pre_ff);  x = s norm(M(h), post_ff)
 *   post:     res = x + res;  res += s norm(A(res), post_attn);  x = s norm(M(res), post_ff)
 *
 * (the first layer has no residual yet: it is x itself). M is the dense gated MLP, or a
 * mixture of experts where the layer has one (decode_moe.c). A linear is a GGUF weight (up
 * to three parts of different formats stacked along the output) or an fp32 weight packed for
 * linear_f32.c, each with an optional fp32 bias. x and res: [T, C], updated in place; the
 * caller applies the final norm. Positions, slots, lengths and tables must be validated
 * (C trusts them).
 *
 * With cu_seqlens (B + 1 token offsets) the T tokens are B sequences' new tokens laid out
 * as a prefill step, and attention is the module path's for such a step: rope on q and
 * on k, the K/V write, then paged prefill attention over each sequence's cache.
 *
 * On a tensor-parallel rank the table holds the rank's shard (its heads, its MLP columns)
 * and shape->sum sums the attention and MLP blocks' outputs over the ranks, where the
 * modules' row-parallel o and down do: before any norm, scale or residual add.
 */
#include <stdint.h>
#include <string.h>

#include "decode_ops.h"
#include "tandem_kernels.h"

/* x [T, C] = norm(x) in place (a norm without a residual: the sandwich and post norms) */
static void norm_in_place(float *x, const float *w, float eps, int64_t T, int64_t C)
{
    tandem_add_rms_norm_f32(x, NULL, w, eps, T, C, x, NULL);
}

/* h, res = add_norm(x, res, w); on the first layer res = x and h = norm(x) */
static void add_norm(const float *x, float *res, const float *w, float eps, int64_t T, int64_t C,
                     float *h, int first)
{
    if (first) {
        tandem_add_rms_norm_f32(x, NULL, w, eps, T, C, h, NULL);
        memcpy(res, x, T * C * sizeof(float));
    } else {
        tandem_add_rms_norm_f32(x, res, w, eps, T, C, h, res);
    }
}

static void scaled(float *x, int64_t n, float s)
{
    if (s != 1.0f)
        stack_scale(x, n, s);
}

typedef int64_t (*stack_sum)(float *x, int64_t n);

/* x [T, C] summed over the tensor-parallel ranks where the stack is a rank's shard (its o
 * and down give partial sums); 0, or -1 where the sum failed */
static int summed(const tandem_stack_shape *shape, float *x, int64_t n)
{
    if (shape->sum == NULL)
        return 0;
    stack_sum sum;
    memcpy(&sum, &shape->sum, sizeof sum);
    return sum(x, n) == 0 ? 0 : -1;
}

/* out = the attention block of in, summed over the ranks; 0, or -1 */
static int attention_block(const tandem_layer *ly, const tandem_stack_shape *shape,
                           const tandem_step *st, const float *in, float *out,
                           const stack_scratch *s)
{
    const int rc = ly->latent.shape.rank > 0 ? stack_latent(ly, st, shape->eps, in, out, s)
                                              : stack_attention(ly, st, shape->eps, in, out, s);
    if (rc != 0)
        return -1;
    return summed(shape, out, st->tokens * shape->hidden);
}

/* One layer on x, res [T, C]; 0, or -1 where a kernel refused its call or the sum failed. */
static int layer(const tandem_layer *ly, const tandem_stack_shape *shape, const tandem_step *st,
                 float *x, float *res, const stack_scratch *s, int first)
{
    const int64_t T = st->tokens, C = shape->hidden, I = shape->intermediate, n = T * C;
    const float eps = shape->eps, rs = ly->residual_scale;
    float *h = s->h;
    switch (ly->placement) {
    case TANDEM_NORM_PRE:
        add_norm(x, res, ly->in_norm, eps, T, C, h, first);
        if (attention_block(ly, shape, st, h, x, s) != 0)
            return -1;
        scaled(x, n, rs);
        tandem_add_rms_norm_f32(x, res, ly->post_attention_norm, eps, T, C, h, res);
        break;
    case TANDEM_NORM_SANDWICH:
        add_norm(x, res, ly->in_norm, eps, T, C, h, first);
        if (attention_block(ly, shape, st, h, x, s) != 0)
            return -1;
        norm_in_place(x, ly->post_attention_norm, eps, T, C);
        scaled(x, n, rs);
        tandem_add_rms_norm_f32(x, res, ly->pre_feedforward_norm, eps, T, C, h, res);
        break;
    case TANDEM_NORM_POST:
        if (first)
            memcpy(res, x, n * sizeof(float));
        else
            stack_add(res, x, n);
        if (attention_block(ly, shape, st, res, x, s) != 0)
            return -1;
        norm_in_place(x, ly->post_attention_norm, eps, T, C);
        scaled(x, n, rs);
        stack_add(res, x, n);
        h = res; /* the MLP reads the residual stream itself */
        break;
    default:
        return -1;
    }
    if ((ly->moe ? stack_moe(ly, T, C, h, x, s) : stack_mlp(ly, T, I, h, x, s)) != 0 ||
        summed(shape, x, n) != 0)
        return -1;
    if (ly->placement != TANDEM_NORM_PRE)
        norm_in_place(x, ly->post_feedforward_norm, eps, T, C);
    scaled(x, n, rs);
    return 0;
}

/* scratch: floats for h [T, C], qkv [T, Q], attn [T, H D], gate_up [T, 2 I], act [T, I],
 * one part's output [T, max part rows], then the normed q [T, H D] and k [T, KVH D] and
 * the rotated q [T, H D] and k [T, KVH D], then T moe_floats + 2 for a MoE layer, then a
 * latent block's (decode_latent.c; see decode_stack.scratch_floats); H, KVH and D are the
 * first layer's (every layer's alike). A step of decodes: B == T. Returns 0, or
 * -(layer + 1) when a kernel refused its call (the caches of the layers before it are
 * written). */
int64_t tandem_decode_stack_f32(const tandem_layer *layers, int64_t count,
                                const tandem_stack_shape *shape, const tandem_step *st,
                                const tandem_step *local_step, float *x, float *res,
                                float *scratch)
{
    if (count <= 0)
        return 0;
    const tandem_attention *a0 = &layers[0].attention;
    const int64_t T = st->tokens, C = shape->hidden, I = shape->intermediate;
    const int64_t HD = a0->heads * a0->head_dim, KD = a0->kv_heads * a0->head_dim;
    stack_scratch s;
    s.h = scratch;
    s.qkv = s.h + T * C;
    s.attn = s.qkv + T * (HD + 2 * KD);
    s.gu = s.attn + T * HD;
    s.act = s.gu + T * 2 * I;
    s.part = s.act + T * I;
    s.qn = s.part + T * shape->max_part;
    s.kn = s.qn + T * HD;
    s.qr = s.kn + T * KD;
    s.kr = s.qr + T * HD;
    s.moe = s.kr + T * KD;
    s.lat = s.moe + T * shape->moe_floats + 2;
    for (int64_t i = 0; i < count; i++) {
        const tandem_step *step = layers[i].local && local_step ? local_step : st;
        if (layer(layers + i, shape, step, x, res, &s, i == 0) != 0)
            return -(i + 1);
    }
    return 0;
}

/* A decode-stack layer's latent attention block (DeepSeek's MLA), the module path's
 * LatentAttention step by step with the same kernels:
 *
 *   q      = q_proj(x), or q_b(norm(q_a(x)))              [T, H (Nq + P)]
 *   c, kpe = kv_a(x);  c = norm(c)                         [T, R], [T, P]
 *   rope on each head's q_pe and on k_pe; the row (c, k_pe) into the cache
 *   q_lat  = each head's q_nope through its key rows of kv_b (latent.c)
 *   o_lat  = attention of (q_lat, q_pe) over the cached rows (latent.c)
 *   out    = o(each head's o_lat through its value rows of kv_b)
 *
 * A step of decodes or one laid out as a prefill (cu_seqlens) alike: the attention call
 * reads either. The scratch is the layer's own region (stack_scratch.lat), sized by
 * decode_stack.scratch_floats from the same sizes.
 */
#include <stdint.h>
#include <string.h>

#include "decode_ops.h"
#include "tandem_kernels.h"

int stack_latent(const tandem_layer *ly, const tandem_step *step, float eps, const float *x,
                 float *out, const stack_scratch *s)
{
    const tandem_latent *l = &ly->latent;
    const tandem_latent_shape *sh = &l->shape;
    const int64_t T = step->tokens, H = sh->heads, N = sh->nope, P = sh->rope;
    const int64_t V = sh->value, R = sh->rank, W = R + P, QA = l->q_a.n;
    float *qa = s->lat;              /* [T, QA] q's own latent, normed */
    float *q = qa + T * QA;          /* [T, H, Nq + P] */
    float *kv = q + T * H * (N + P); /* [T, R + P] */
    float *c = kv + T * W;           /* [T, R] the latent, normed */
    float *pe = c + T * R;           /* [T, H, P] each head's q_pe, gathered */
    float *pe_rot = pe + T * H * P;  /* [T, H, P] rotated */
    float *k_rot = pe_rot + T * H * P; /* [T, P] k_pe rotated */
    float *row = k_rot + T * P;      /* [T, W] what the cache keeps: c, k_pe */
    float *qf = row + T * W;         /* [T, H, W] q_lat, q_pe */
    float *o_lat = qf + T * H * W;   /* [T, H, R] */
    float *vals = o_lat + T * H * R; /* [T, H V] */
    tandem_step st = *step;
    st.cos_sin = ly->cos_sin;

    const float *q_in = x;
    if (QA) {
        if (stack_linear(&l->q_a, x, T, qa, s->part) != 0)
            return -1;
        tandem_add_rms_norm_f32(qa, NULL, l->q_a_norm, eps, T, QA, qa, NULL);
        q_in = qa;
    }
    if (stack_linear(&ly->qkv, q_in, T, q, s->part) != 0)
        return -1;
    if (stack_linear(&l->kv_a, x, T, kv, s->part) != 0)
        return -1;
    for (int64_t t = 0; t < T; t++) {
        memcpy(c + t * R, kv + t * W, R * sizeof(float));
        for (int64_t h = 0; h < H; h++)
            memcpy(pe + (t * H + h) * P, q + (t * H + h) * (N + P) + N, P * sizeof(float));
    }
    tandem_add_rms_norm_f32(c, NULL, l->kv_a_norm, eps, T, R, c, NULL);
    tandem_rotary_f32(st.positions, pe, H * P, st.cos_sin, T, H, P, pe_rot);
    tandem_rotary_f32(st.positions, kv + R, W, st.cos_sin, T, 1, P, k_rot);
    for (int64_t t = 0; t < T; t++) {
        memcpy(row + t * W, c + t * R, R * sizeof(float));
        memcpy(row + t * W + R, k_rot + t * P, P * sizeof(float));
    }
    const tandem_attention *a = &ly->attention;
    tandem_write_kv_f32(row, W, row + W / 2, W, st.slots, T, W / 2, a->k_cache, a->v_cache);
    tandem_latent_query_f32(sh, q, l->kv_b, T, qf);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(qf + (t * H + h) * W + R, pe_rot + (t * H + h) * P, P * sizeof(float));
    if (tandem_latent_attend_f32(a, &st, qf, R, o_lat) != 0)
        return -1;
    tandem_latent_value_f32(sh, o_lat, l->kv_b, T, vals);
    return stack_linear(&ly->o, vals, T, out, s->part);
}

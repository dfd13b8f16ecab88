/* The steps of a decode-stack layer (decode_ops.c), for the driver in decode_stack.c.
 * Internal to the library: nothing here is exported. */
#ifndef TANDEM_DECODE_OPS_H
#define TANDEM_DECODE_OPS_H

#include <stdint.h>

#include "tandem_kernels.h"

/* A step's scratch, carved from the caller's buffer (decode_stack.scratch_floats). */
typedef struct {
    float *h;    /* [T, C] a norm's output, the next block's input */
    float *qkv;  /* [T, Q] the fused projection, Q = (H + 2 KVH) D */
    float *attn; /* [T, H D] */
    float *gu;   /* [T, 2 I] */
    float *act;  /* [T, I] */
    float *part; /* [T, the most rows of one GGUF part] */
    float *qn;   /* [T, H D] q after its norm */
    float *kn;   /* [T, KVH D] */
    float *qr;   /* [T, H D] q after rope */
    float *kr;   /* [T, KVH D] */
    float *lat;  /* a latent attention block's own (decode_latent.c) */
    float *moe;  /* a MoE layer's scratch: see stack_moe */
} stack_scratch;

/* out [B, n] = x [B, k] @ W^T + bias (fp32, int8 or GGUF); GGUF part p's columns into
 * part_out (a scratch row block), then into their place (the module path concatenates the
 * parts the same way). Returns 0, or -1 where a kernel refused its call. */
int stack_linear(const tandem_linear *l, const float *x, int64_t B, float *out, float *part_out);

/* out [T, C] = the layer's attention block of x [T, C]: qkv, (q/k norms), rope, the K/V
 * write, attention, o. Returns 0, or -1 where a kernel refused its call. */
int stack_attention(const tandem_layer *ly, const tandem_step *st, float eps, const float *x,
                    float *out, const stack_scratch *s);
/* stack_attention's latent form (ly->latent.shape.rank > 0), in decode_latent.c */
int stack_latent(const tandem_layer *ly, const tandem_step *st, float eps, const float *x,
                 float *out, const stack_scratch *s);
/* y [n, C] = down(gate(gate_up(x))) for x [n, C] through the given gate_up and down (a
 * dense MLP's, an expert's) of intermediate size I; gu [n, 2 I], act [n, I] and part are
 * scratch. Returns 0 or -1. */
int stack_gated(const tandem_layer *ly, const tandem_linear *gate_up, const tandem_linear *down,
                int64_t I, const float *x, int64_t n, float *gu, float *act, float *y,
                float *part);
/* out [T, C] = down(gate(gate_up(x))); x [T, C]. Returns 0 or -1. */
int stack_mlp(const tandem_layer *ly, int64_t T, int64_t I, const float *x, float *out,
              const stack_scratch *s);
/* act [T, I] = the layer's gate (SiLU or tanh-GELU) of gu [T, 2 I] times its up half */
void stack_gate(const tandem_layer *ly, const float *gu, int64_t T, int64_t I, float *act);
/* out [T, C] = the layer's mixture of experts (ly->moe) of x [T, C], as the module path's
 * SparseMoE computes it: route, each expert over its tokens (token order), the weighted
 * sum, the shared expert's share. s->moe holds (floats, 8-byte aligned start):
 * ids [T K] int64, pairs [T K] int64 (those of one expert), weights [T K], logits [T E], done [T K, C], rows [T, C], y [T, C],
 * gu [T, 2 Imax], act [T, Imax], gate [T], with Imax the larger of the routed and shared
 * experts' I (decode_stack.moe_floats). Returns 0 or -1. */
int stack_moe(const tandem_layer *ly, int64_t T, int64_t C, const float *x, float *out,
              const stack_scratch *s);
/* x [n] *= scale, a pass of its own (the module path's multiply, rounded before any add) */
void stack_scale(float *x, int64_t n, float scale);
/* res [n] += x [n] */
void stack_add(float *res, const float *x, int64_t n);

#endif

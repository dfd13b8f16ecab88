/* The contract of the native kernels: every function the library exports, every struct
 * they take and every constant both sides rely on. Each .c file includes it, so the
 * compiler holds the definitions to these declarations; the library is built with hidden
 * visibility, so these functions (marked TANDEM_API) are all it exports. The Python
 * bindings are generated from this file (tandem.kernels.native.contract), so keep to the
 * plain forms that parser reads: one `#define NAME number` per constant, one field per
 * line in a struct (`type name;` or `type name[CONSTANT];`), one TANDEM_API prototype per
 * function, and pointers, int, int32_t, int64_t, float and the structs below as types.
 *
 * Layouts: caches [N, S, KVH, D] (N blocks of S tokens); block tables [B, M] int32, row b
 * listing sequence b's blocks in order; rope tables [P, D], the cos half then the sin half.
 */
#ifndef TANDEM_KERNELS_H
#define TANDEM_KERNELS_H

#include <stdint.h>

#define TANDEM_API __attribute__((visibility("default")))

/* Rows of x from which a GGUF linear layer runs the fp32-tile kernel (linear_gguf_f32.c)
 * instead of the int8-row one (linear_gguf.c): the tiles cost the same for 1..16 rows (one
 * panel of x) and overtake the rows at 12-13 (2048 x 2048, one thread: 16 rows 1.1-1.5x,
 * 8 rows 0.55-0.75x; benchmarks/linear.py --gguf --ms 8,16). */
#define TANDEM_GGUF_TILE_ROWS 16
/* Output channels of a packed fp32 or int8 weight are padded to a multiple of this (a
 * micro-kernel tile: two 16-lane blocks). */
#define TANDEM_PACK_CHANNELS 32
/* Parts a decode-stack linear layer may stack along its output (a fused projection whose
 * parts have different GGUF formats). */
#define TANDEM_MAX_PARTS 3
/* The routing kernel's reach (tandem_moe_route_f32): K experts of E, K at most this... */
#define TANDEM_MOE_MAX_TOP_K 17
/* ...and E below K times this */
#define TANDEM_MOE_PARTIAL_SORT 64
/* tandem_linear.kind */
#define TANDEM_LINEAR_GGUF 0
#define TANDEM_LINEAR_F32 1
#define TANDEM_LINEAR_I8 2

/* One layer's attention over its paged KV cache. */
typedef struct {
    float *k_cache;     /* [N, S, KVH, D] */
    float *v_cache;     /* [N, S, KVH, D] */
    int64_t heads;      /* H query heads; query head j reads KV head j / (H / KVH) */
    int64_t kv_heads;   /* KVH, dividing H */
    int64_t head_dim;   /* D */
    int64_t block_size; /* S tokens a cache block */
    int64_t window;     /* > 0: a query sees only its last `window` keys; 0: all */
    float scale;        /* of the scores */
    float softcap;      /* > 0: a score s becomes softcap * tanh(s / softcap); 0: none */
} tandem_attention;

/* A step's new tokens and their sequences: B sequences of one token each (cu_seqlens NULL,
 * T == B), or T tokens laid out as a prefill. Entries a call does not read may be NULL. */
typedef struct {
    const int64_t *positions;    /* [T] each token's position (its rope row) */
    const float *cos_sin;        /* [P, D] rope table */
    const int64_t *slots;        /* [T] block * S + offset; < 0: nothing written */
    const int32_t *seq_lens;     /* [B] tokens of each sequence, its new ones included */
    const int32_t *block_tables; /* [B, M] */
    const int32_t *cu_seqlens;   /* [B + 1] the sequences' token offsets, or NULL */
    int64_t tokens;              /* T */
    int64_t seqs;                /* B */
    int64_t table_width;         /* M */
} tandem_step;

/* A linear layer of the decode stack: GGUF parts, one fp32 weight packed for
 * tandem_linear_f32 or one int8 weight blocked for tandem_linear_i8; each with an
 * optional fp32 bias. */
typedef struct {
    int64_t kind;                     /* TANDEM_LINEAR_GGUF, _F32 or _I8 */
    int64_t parts;                    /* GGUF: 1..TANDEM_MAX_PARTS */
    int64_t qtype[TANDEM_MAX_PARTS];  /* GGUF: each part's block format */
    int64_t rows[TANDEM_MAX_PARTS];   /* GGUF: each part's output channels */
    const void *w[TANDEM_MAX_PARTS];  /* GGUF: each part's blocks; fp32: the packed panels;
                                         int8: the blocks */
    const float *bias;                /* [n] or NULL */
    int64_t n;                        /* output channels */
    int64_t k;                        /* input channels */
    const int32_t *wsum;              /* int8: [n] each channel's sum of weights */
    const float *scale;               /* int8: [n] each channel's scale */
    int64_t kp;                       /* int8: k padded */
    float rel;                        /* int8: the outlier bound, in multiples of a row's rms */
} tandem_linear;

/* tandem_moe_routing.scoring */
#define TANDEM_MOE_SOFTMAX 0        /* softmax over the E experts, the K most probable */
#define TANDEM_MOE_SIGMOID_GROUPS 1 /* DeepSeek-V3's group-limited sigmoid routing */

/* How a mixture of experts routes each token's router logits [E] to K experts. Softmax:
 * the K most probable, weighted by their probabilities (renormalised where `normalize`).
 * Sigmoid groups: scores sigmoid(logits); the choice scores add `score_bias`; the experts
 * form `groups` equal groups, each worth the sum of its two best choice scores, and only
 * the `group_top` worthiest stay eligible; the K best eligible by choice score are
 * weighted by their plain scores (divided by their sum + 1e-20 where `normalize`) times
 * `scaling`. */
typedef struct {
    int64_t experts;          /* E */
    int64_t top_k;            /* K */
    int64_t scoring;          /* TANDEM_MOE_SOFTMAX or TANDEM_MOE_SIGMOID_GROUPS */
    int64_t normalize;        /* 1: the K weights renormalised */
    int64_t groups;           /* sigmoid: G, dividing E (1: one group) */
    int64_t group_top;        /* sigmoid: the groups kept, 1..G */
    const float *score_bias;  /* sigmoid: [E] added to the scores for the choice only, or NULL */
    float scaling;            /* sigmoid: the weights times this */
} tandem_moe_routing;

/* A mixture-of-experts MLP (tandem_layer.moe): the router's logits, routed to K of the E
 * experts (`routing`), each a gated MLP (the layer's gate) over the tokens routed to it,
 * their outputs weighted and summed; then an optional shared expert, its output scaled by
 * sigmoid(shared_gate(x)) where `shared_gated`. A tensor-parallel rank holds a run of
 * whole experts (the others' outputs count as zeros) and its shard of the shared
 * expert's intermediate dims: its output is a partial sum (tandem_stack_shape.sum). */
typedef struct {
    tandem_moe_routing routing;
    int64_t first;               /* the first expert held (0: all from the first) */
    int64_t held;                /* the experts held, first..first + held - 1 */
    int64_t intermediate;        /* each routed expert's I */
    int64_t shared_intermediate; /* the shared expert's I; 0: no shared expert */
    int64_t shared_gated;        /* 1: the shared expert's output times a sigmoid gate */
    tandem_linear router;        /* [E, C] */
    const tandem_linear *gate_up; /* [held] each expert's [2 I, C] (gate rows, then up) */
    const tandem_linear *down;    /* [held] each expert's [C, I] */
    tandem_linear shared_gate_up; /* [2 I_shared, C] */
    tandem_linear shared_down;    /* [C, I_shared] */
    tandem_linear shared_gate;    /* [1, C] */
} tandem_moe;

/* tandem_layer.placement: where a layer's norms sit (ModelSpec.norm) */
#define TANDEM_NORM_PRE 0      /* norm > block > add (Llama) */
#define TANDEM_NORM_SANDWICH 1 /* norm > block > norm > add (Gemma) */
#define TANDEM_NORM_POST 2     /* block > norm > add (OLMo 2) */
/* tandem_layer.qk_norm: RMSNorm on q and on k before rope */
#define TANDEM_QK_NORM_NONE 0
#define TANDEM_QK_NORM_HEAD 1 /* over each head's D values */
#define TANDEM_QK_NORM_PROJ 2 /* over the whole projection: H * D (q), KVH * D (k) */
/* tandem_layer.gate: the MLP's activation */
#define TANDEM_GATE_SILU 0
#define TANDEM_GATE_GELU_TANH 1

/* The most tokens a cache block of latent attention may hold (latent.c keeps a block's
 * scores on the stack). */
#define TANDEM_LATENT_MAX_BLOCK 256
/* Multi-head latent attention's sizes (latent.c). */
typedef struct {
    int64_t heads; /* H */
    int64_t nope;  /* Nq: each head's query dims without rope (its key rows in kv_b) */
    int64_t rope;  /* P: each head's rotated query dims, and the shared k_pe's */
    int64_t value; /* V: each head's value dims */
    int64_t rank;  /* R: the latent's dims; a cache row is R + P values */
} tandem_latent_shape;

/* A decode-stack layer's latent attention (DeepSeek's MLA); shape.rank 0: none. The
 * layer's qkv is q's projection (from the hidden state, or from q_a's normed output),
 * its o the output projection, its cos_sin [P_max, P] and its caches [N, S, 1, W / 2]. */
typedef struct {
    tandem_latent_shape shape;
    tandem_linear q_a;        /* hidden -> q's latent; n 0: q straight from the hidden state */
    const float *q_a_norm;    /* [q_a.n] */
    tandem_linear kv_a;       /* hidden -> R + P: the latent c, then k_pe */
    const float *kv_a_norm;   /* [R] */
    const float *kv_b;        /* [H (Nq + V), R] fp32 */
} tandem_latent;

/* One decoder layer of the decode stack: its program (norm placement, q/k norms, gate,
 * residual scale, rope table) and its weights. A norm a placement does not use is NULL. */
typedef struct {
    int64_t placement;                /* TANDEM_NORM_* */
    const float *in_norm;             /* [C] pre, sandwich: before attention */
    const float *post_attention_norm; /* [C] pre: before the MLP; else: on attention's output */
    const float *pre_feedforward_norm;  /* [C] sandwich: before the MLP */
    const float *post_feedforward_norm; /* [C] sandwich, post: on the MLP's output */
    int64_t qk_norm;                  /* TANDEM_QK_NORM_* */
    const float *q_norm;              /* [D] or [H * D] */
    const float *k_norm;              /* [D] or [KVH * D] */
    int64_t gate;                     /* TANDEM_GATE_* */
    float residual_scale;             /* each block's output times this before its add */
    const float *cos_sin;             /* [P, R] this layer's rope table */
    int64_t rotary_dim;               /* R: the leading dims of each head rope turns (<= D) */
    int64_t local;                    /* 1: its blocks are the local pool's (local_step) */
    tandem_linear qkv;
    tandem_linear o;
    tandem_linear gate_up;
    tandem_linear down;
    const tandem_moe *moe;            /* NULL: the dense gated MLP (gate_up, down) */
    tandem_attention attention;
    tandem_latent latent;             /* latent attention where latent.shape.rank > 0 */
} tandem_layer;

/* The decode stack's sizes besides the attention's. */
typedef struct {
    int64_t hidden;       /* C */
    int64_t intermediate; /* I */
    int64_t max_part;     /* the most output channels of one GGUF part */
    float eps;            /* of the RMS norms */
    /* NULL, or (a tensor-parallel rank's shard) an int64_t (*)(float *x, int64_t n) that
     * sums x [n] over the ranks in place, called after each o and down projection (whose
     * outputs are partial sums); it answers 0, or non-zero where the sum failed */
    void *sum;
    int64_t moe_floats;   /* scratch floats a token of the largest MoE layer needs (0: none) */
} tandem_stack_shape;

/* paged_attention.c: q, out [B, H, D]. Validated steps only (C trusts them). These three
 * return 0, or -1 when the sizes are beyond the kernel's stack bounds (nothing written). */
TANDEM_API int tandem_paged_decode_f32(const tandem_attention *attention,
                                       const tandem_step *step, const float *q, float *out);
/* The step's T tokens (cu_seqlens set; K/V already written) over their causal prefixes:
 * q, out [T, H, D]. */
TANDEM_API int tandem_paged_prefill_f32(const tandem_attention *attention,
                                        const tandem_step *step, const float *q, float *out);
/* Rope on a step of decodes' q and k (qkv [B, (H + 2 KVH) * D], rows row_stride floats
 * apart), k and v into the caches, then the queries over them into out [B, H, D]. */
TANDEM_API int tandem_rope_decode_f32(const tandem_attention *attention, const tandem_step *step,
                                      const float *qkv, int64_t row_stride, float *out);
TANDEM_API void tandem_write_kv_f32(const float *k, int64_t k_stride, const float *v,
                                    int64_t v_stride, const int64_t *slots, int64_t T,
                                    int64_t row, float *k_cache, float *v_cache);

/* decode_stack.c: x, res [T, C] (updated in place). Returns 0, or -(layer + 1). The
 * steps' cos_sin is unused: each layer names its own rope table. local_step: the same
 * tokens' slots and block tables in the local (sliding-window) layers' pool of blocks,
 * read by the layers marked local; NULL where every layer reads `step`'s. */
TANDEM_API int64_t tandem_decode_stack_f32(const tandem_layer *layers, int64_t count,
                                           const tandem_stack_shape *shape,
                                           const tandem_step *step,
                                           const tandem_step *local_step, float *x,
                                           float *res, float *scratch);

/* latent.c: multi-head latent attention's steps (the module path's and the stack's).
 * q [T, H, Nq + P] -> q_lat, the first R of each head's row of out [T, H, R + P] (the
 * rest untouched). */
TANDEM_API void tandem_latent_query_f32(const tandem_latent_shape *shape, const float *q,
                                        const float *kv_b, int64_t T, float *out);
/* o_lat [T, H, R] -> out [T, H V] */
TANDEM_API void tandem_latent_value_f32(const tandem_latent_shape *shape, const float *o_lat,
                                        const float *kv_b, int64_t T, float *out);
/* q [T, H, W] over the cached rows (attention: heads H, kv_heads 1, head_dim W / 2,
 * scale) -> out [T, H, rank]: a step of decodes, or with cu_seqlens each token over its
 * causal prefix. Validated steps only. Returns 0, or -1 where a block holds more than
 * TANDEM_LATENT_MAX_BLOCK tokens or rank > W (nothing written). */
TANDEM_API int tandem_latent_attend_f32(const tandem_attention *attention,
                                        const tandem_step *step, const float *q, int64_t rank,
                                        float *out);

/* elementwise.c */
TANDEM_API void tandem_add_rms_norm_f32(const float *x, const float *residual,
                                        const float *weight, float eps, int64_t T, int64_t C,
                                        float *out, float *summed);
TANDEM_API void tandem_silu_and_mul_f32(const float *x, int64_t T, int64_t I, float *out);
TANDEM_API void tandem_gelu_tanh_and_mul_f32(const float *x, int64_t T, int64_t I, float *out);
TANDEM_API void tandem_rotary_f32(const int64_t *positions, const float *x, int64_t row_stride,
                                  const float *cos_sin, int64_t T, int64_t H, int64_t D,
                                  float *out);
/* the leading R of each head's D values rotated (a table [P, R]), the rest copied */
TANDEM_API void tandem_rotary_part_f32(const int64_t *positions, const float *x,
                                       int64_t row_stride, const float *cos_sin, int64_t T,
                                       int64_t H, int64_t D, int64_t R, float *out);
TANDEM_API int64_t tandem_greedy_f32(const float *x, int64_t B, int64_t V, int64_t *tokens,
                                     float *logprob);

/* moe.c: logits [T, E] routed as `routing` says: ids [T, K] (the best first; among equals
 * torch.topk's order on the CPU) and weights [T, K]. Returns 0, or -1 (nothing written)
 * for K outside 1..min(E, TANDEM_MOE_MAX_TOP_K), E >= K TANDEM_MOE_PARTIAL_SORT (where
 * torch.topk chooses by another algorithm), or groups that do not divide E, group_top
 * outside 1..G or G >= group_top TANDEM_MOE_PARTIAL_SORT. */
TANDEM_API int tandem_moe_route_f32(const tandem_moe_routing *routing, const float *logits,
                                    int64_t T, float *weights, int64_t *ids);
/* out [T, C] = the sum over k of weights [t, k] * done [t K + k] (done [T K, C]: each
 * token's K experts' outputs in routing order), k in order. */
TANDEM_API void tandem_moe_sum_f32(const float *done, const float *weights, int64_t T,
                                   int64_t K, int64_t C, float *out);
/* out [T, C] += shared [T, C] * sigmoid(gate [T]) (a gated shared expert's share) */
TANDEM_API void tandem_moe_gate_add_f32(const float *shared, const float *gate, int64_t T,
                                        int64_t C, float *out);

/* quantize.c */
TANDEM_API int64_t tandem_quantize_rows_u8(const float *x, int64_t M, int64_t K, float rel,
                                           uint8_t *q, int64_t ldq, int flip, float *scale,
                                           int32_t *zero, float *bound, int32_t *count);
TANDEM_API void tandem_rescale_i32(const int32_t *acc, int64_t M, int64_t N,
                                   const int32_t *row_zero, const int32_t *col_sum,
                                   const float *row_scale, const float *col_scale,
                                   const float *bias, float *out);

/* linear_i8.c: returns the outliers' count, -1 without scratch memory, -2 unavailable */
TANDEM_API int64_t tandem_linear_i8(const float *x, int64_t M, int64_t K, const int8_t *packed,
                                    const int32_t *wsum, const float *ws, const float *bias,
                                    int64_t N, int64_t Kp, float rel, float *out);
TANDEM_API int tandem_linear_i8_available(void);

/* linear_f32.c: returns 0, -1 without scratch memory, -2 unavailable */
TANDEM_API int tandem_linear_f32(const float *x, int64_t M, int64_t K, const float *packed,
                                 const float *bias, int64_t N, float *out);
TANDEM_API int tandem_linear_f32_available(void);

/* GGUF block weights (linear_gguf.c, linear_gguf_f32.c, gguf_decode.c): w [N, row bytes] */
/* bytes per block of `type` (a K-quant's super-block, an F16 / BF16 value); -1: unknown */
TANDEM_API int64_t tandem_gguf_block_bytes(int type);
TANDEM_API int tandem_linear_gguf_simd(void);
TANDEM_API int tandem_linear_gguf(int type, const float *x, int64_t M, int64_t K,
                                  const uint8_t *w, int64_t N, float *out);
TANDEM_API int tandem_linear_gguf_f32(int type, const float *x, int64_t M, int64_t K,
                                      const uint8_t *w, int64_t N, float *out);
TANDEM_API void tandem_gguf_decode_rows(int type, const uint8_t *w, int64_t row_bytes,
                                        const int64_t *index, int64_t n, int64_t K, float *out);

#endif

"""Public entry points of the Tandem custom ops (CPU implementations in plain torch).

Importing this package registers the ``tandem::torch_*`` ops. Each function validates
its arguments, then calls the op through ``torch.ops.tandem``.
"""

from __future__ import annotations

from tandem.kernels.ops.activation import gelu_tanh_and_mul, silu_and_mul
from tandem.kernels.ops.attention import decode_attention, prefill_attention
from tandem.kernels.ops.cache import write_kv_cache
from tandem.kernels.ops.gguf_linear import gguf_rows, linear_gguf
from tandem.kernels.ops.latent import latent_decode, latent_prefill
from tandem.kernels.ops.library import OP_NAMESPACE, registered_op_names
from tandem.kernels.ops.moe import fused_moe, grouped_route, topk_route
from tandem.kernels.ops.norm import fused_add_rms_norm, rms_norm
from tandem.kernels.ops.rotary import rotary_embedding
from tandem.kernels.ops.sampling import sample_seeded

__all__ = [
    "OP_NAMESPACE",
    "decode_attention",
    "fused_add_rms_norm",
    "fused_moe",
    "gelu_tanh_and_mul",
    "gguf_rows",
    "grouped_route",
    "latent_decode",
    "latent_prefill",
    "linear_gguf",
    "prefill_attention",
    "registered_op_names",
    "rms_norm",
    "rotary_embedding",
    "sample_seeded",
    "silu_and_mul",
    "topk_route",
    "write_kv_cache",
]

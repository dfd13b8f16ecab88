"""The decode stack's view of a layer's attention: plain (q/k/v) or latent (DeepSeek's
MLA), as ``ModelSpec.attention.latent`` says. Its linear layers by the C table's names,
its sizes, the settings a step is checked against, and a latent layer's block
(:class:`~tandem.kernels.native.decode_latent.LatentBlock`)."""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.core.layers.linear import Linear
from tandem.kernels.decode_inputs import AttentionLayer
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native.decode_latent import LatentBlock


def attention_linears(attn: torch.nn.Module, latent: bool) -> dict[str, Linear]:
    """The attention's linear layers by the table's names: qkv and o; a latent layer's
    qkv is q's projection (q_proj, or q_b_proj after q_a), beside q_a and kv_a."""
    if not latent:
        return {"qkv": attn.qkv_proj, "o": attn.o_proj}
    if hasattr(attn, "q_proj"):
        out = {"qkv": attn.q_proj}
    else:
        out = {"qkv": attn.q_b_proj, "q_a": attn.q_a_proj}
    return out | {"kv_a": attn.kv_a_proj_with_mqa, "o": attn.o_proj}


def latent_norms(attn: torch.nn.Module, latent: bool) -> list[torch.nn.Module]:
    """The latent layer's own norms (q's latent, the kv latent); none for a plain one."""
    if not latent:
        return []
    q = [attn.q_a_layernorm] if hasattr(attn, "q_a_layernorm") else []
    return [*q, attn.kv_a_layernorm]


def heads(attn: torch.nn.Module, latent: bool) -> tuple[int, int, int]:
    """(H, KVH, D) as the caches hold them: a latent layer's are one head of half a row."""
    if not latent:
        return attn.shape
    h, _, p, _, r = attn.dims
    return h, 1, (r + p) // 2


def checked_layer(attn: torch.nn.Module, latent: bool) -> tuple[AttentionLayer, int]:
    """The settings a step's tables are checked against, and the width of a q/k/v row of
    that shape (the check reads its sizes from one)."""
    if not latent:
        return attn.attn.layer, attn.qkv_proj.out_features
    h, kvh, d = heads(attn, latent)
    return AttentionLayer((h, kvh), attn.scale), (h + 2 * kvh) * d


def settings(attn: torch.nn.Module, latent: bool) -> dict[str, object]:
    """The table row's attention settings: window, soft-cap and scale."""
    if not latent:
        layer = attn.attn.layer
        return {"window": layer.window, "softcap": layer.softcap, "scale": layer.scale}
    return {"window": 0, "softcap": 0.0, "scale": attn.scale}


def latent_block(
    attn: torch.nn.Module, specs: dict[str, native.LinSpec], keep: list[Tensor]
) -> LatentBlock | None:
    """The layer's latent block (taking q_a and kv_a out of ``specs``), or None where
    its kv_b or a norm is not fp32 on the CPU."""
    kv_b = attn.kv_b_proj.weight
    norms = latent_norms(attn, True)
    if not all(_plain(t) for t in (kv_b, *(n.weight for n in norms))):
        return None
    keep += [kv_b, *(n.weight for n in norms)]
    q_a = specs.pop("q_a", None)
    return LatentBlock(
        attn.dims,
        q_a,
        None if q_a is None else attn.q_a_layernorm.weight,
        specs.pop("kv_a"),
        attn.kv_a_layernorm.weight,
        kv_b,
    )


def _plain(t: Tensor) -> bool:
    return t.dtype == torch.float32 and t.is_cpu and t.is_contiguous()

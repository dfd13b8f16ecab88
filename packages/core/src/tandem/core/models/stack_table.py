"""The decode stack's C table made from the built modules: each layer's linear layers
(their weight forms' entries), experts, latent block, norms, rope table and KV caches,
with what the table was made of (so the caller can tell when it must be made again)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.core.layers.linear import Linear
from tandem.core.layers.parallel import RowParallelLinear
from tandem.core.layers.self_attention import KVCache
from tandem.core.layers.weight_form import Dense
from tandem.core.models import stack_moe
from tandem.core.models.stack_latent import (
    attention_linears,
    heads,
    latent_block,
    latent_norms,
    settings,
)
from tandem.core.models.stack_program import layer_norms, program
from tandem.core.parallel.group import TensorParallel
from tandem.core.spec.model import ModelSpec
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native.linear_gguf import supports

# the linear layers the C driver runs: plain, and row-parallel (the table sums their outputs)
_LINEARS = (Linear, RowParallelLinear)


def lin_entry(layer: Linear, keep: list[Tensor]) -> native.LinSpec | None:
    """The table entry of one linear layer (its weight form's), or None where the C
    driver cannot run it."""
    if type(layer) not in _LINEARS:
        return None
    entry = layer.form.c_entry(layer.bias, keep, supports)
    return None if isinstance(entry, str) else entry


@dataclass(slots=True)
class Built:
    """A table and what it was made of: the fp32 weights (their packed copies must still
    hold), each norm's parameters and weight, and the rope table a step's positions are
    checked against (as wide as a head)."""

    table: native.StackTable
    f32: list[Dense]
    norms: list[tuple[dict[str, object], Tensor]]
    rope: Tensor


def build_table(
    model: torch.nn.Module,
    spec: ModelSpec,
    tp: TensorParallel | None,
    kv_caches: list[KVCache],
) -> Built | None:
    """The table of ``model``'s layers (a DecoderModel; ``tp`` the group its layers are a
    shard of) over ``kv_caches``, or None where a layer or cache is not one it takes."""
    latent = spec.attention.latent is not None
    f32: list[Dense] = []
    norms_kept: list[tuple[dict[str, object], Tensor]] = []
    cpu = torch.device("cpu")
    keep: list[Tensor] = []
    rows = []
    first_of = {ly.self_attn.local: kc for ly, (kc, _) in zip(model.layers, kv_caches)}
    if len({kc.shape[1:] for kc in first_of.values()}) != 1:
        return None
    for i, (layer, (kc, vc)) in enumerate(zip(model.layers, kv_caches)):
        attn = layer.self_attn
        if not all(c.dtype == torch.float32 and c.is_cpu and c.is_contiguous() for c in (kc, vc)):
            return None
        if kc.shape != first_of[attn.local].shape or vc.shape != kc.shape:
            return None  # the layers of one pool alike
        mlp = layer.mlp
        moe = spec.layer_mlp(i).moe
        lins = attention_linears(attn, latent)
        if moe is None:
            lins |= {"gate_up": mlp.gate_up_proj, "down": mlp.down_proj}
        specs = {name: lin_entry(lin, keep) for name, lin in lins.items()}
        if moe is not None:
            specs["moe"] = stack_moe.moe_entry(mlp, moe, keep, f32, supports)
        if any(s is None for s in specs.values()):
            return None
        norms = layer_norms(layer, spec.attention.qk_norm)
        if not all(_plain(n.weight) for n in norms.values()):
            return None
        if latent:
            specs["latent"] = latent_block(attn, specs, keep)
            if specs["latent"] is None:
                return None
        rope = attn.rotary.table(cpu)
        keep += [*(n.weight for n in norms.values()), rope, kc, vc]
        tracked = [*norms.values(), *latent_norms(attn, latent)]
        norms_kept += [(n._parameters, n.weight) for n in tracked]
        f32 += [lin.form for lin in lins.values() if isinstance(lin.form, Dense)]
        rows.append(
            {
                **specs,
                **{name: n.weight for name, n in norms.items()},
                **settings(attn, latent),
                "program": program(spec, i),
                "cos_sin": rope,
                "local": attn.local,
                "k_cache": kc,
                "v_cache": vc,
            }
        )
    rope = rows[0]["cos_sin"]
    if any(row["cos_sin"].shape != rope.shape for row in rows):
        return None
    h, kvh, d = heads(model.layers[0].self_attn, latent)
    # what a step's positions are checked against: a table as wide as a head (a partial
    # rotary's narrower one seen through a view of its first column)
    rope = rope if rope.shape[1] == d else rope[:, :1].expand(rope.shape[0], d)
    # the dense MLPs' intermediate size as built (a tensor-parallel rank's shard of it)
    dense = (ly.mlp for i, ly in enumerate(model.layers) if spec.layer_mlp(i).moe is None)
    inter = next((mlp.down_proj.in_features for mlp in dense), 0)
    shape = native.Shape(spec.hidden_size, h, kvh, d, inter, spec.rms_norm_eps)
    all_reduce = None if tp is None else tp.all_reduce
    return Built(native.StackTable(shape, rows, keep, all_reduce), f32, norms_kept, rope)


def _plain(t: Tensor) -> bool:
    return t.dtype == torch.float32 and t.is_cpu and t.is_contiguous()

"""The decode stack's layer programs, read from the :class:`ModelSpec` (and the
tensor-parallel group the model was built for): whether the C driver runs a model's
structure at all (and why not), each layer's program, the norms a layer gives it, and the
plan's one-line account of what the programs do."""

from __future__ import annotations

import torch

from tandem.core.models import stack_moe
from tandem.core.parallel.group import TensorParallel
from tandem.core.spec.model import ModelSpec
from tandem.kernels.native import decode_stack as native


def program(spec: ModelSpec, index: int) -> native.LayerProgram:
    """Layer ``index``'s program as the C driver reads it."""
    rotary = spec.layers[index].rope.rotary_dim(spec.attention.head_dim)
    return native.LayerProgram(
        spec.norm,
        spec.attention.qk_norm,
        spec.layer_mlp(index).activation,
        spec.residual_scale,
        0 if rotary == spec.attention.head_dim else rotary,
    )


# the norm modules of each placement, by the C table's names
_NORM_MODULES = {
    "in_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "pre_feedforward_norm": "pre_feedforward_layernorm",
    "post_feedforward_norm": "post_feedforward_layernorm",
}


def layer_norms(layer: torch.nn.Module, qk_norm: str) -> dict[str, torch.nn.Module]:
    """The layer's norms by the C table's names: those its placement has, and its q/k
    norms where ``qk_norm`` (the spec's) is not "none"."""
    out = {c: getattr(layer, m) for c, m in _NORM_MODULES.items() if hasattr(layer, m)}
    attn = layer.self_attn
    if qk_norm != "none":
        out |= {"q_norm": attn.q_norm, "k_norm": attn.k_norm}
    return out


def why_not(spec: ModelSpec) -> str | None:
    """Why the stack's structure (its spec; a tensor-parallel rank's shard of it alike) is
    not one the C driver runs (weights are seen later), or None where it is."""
    if not spec.layers:
        return "no layers"
    inter = dense_intermediate(spec)
    for i in range(spec.num_layers):
        mlp = spec.layer_mlp(i)
        if mlp.moe is not None:
            why = stack_moe.why_not_moe(mlp.moe)
            if why is not None:
                return f"layer {i}: a mixture of experts with {why}"
        elif mlp.intermediate_size != inter:
            return f"layer {i}: an MLP of another size"
    return None


def parallel_note(tp: TensorParallel | None) -> str:
    """What the layer programs do for the tensor-parallel group the model was built for
    (the engine's ``ParallelConfig``): each rank runs its shard, its o and down
    projections' partial outputs summed over the ranks ('' for a whole model)."""
    if tp is None:
        return ""
    return f"rank {tp.rank} of {tp.size}, a sum over the ranks after o and down"


def dense_intermediate(spec: ModelSpec) -> int:
    """The dense MLPs' intermediate size (the first dense layer's; 0: every layer has
    experts)."""
    dense = (spec.layer_mlp(i) for i in range(spec.num_layers))
    return next((m.intermediate_size for m in dense if m.moe is None), 0)


def describe(spec: ModelSpec) -> str:
    """What the layer programs do beyond the Llama layer, e.g. ``sandwich norms, q/k
    norms (head)`` ('' for a Llama-family stack)."""
    out = [] if spec.norm == "pre" else [f"{spec.norm} norms"]
    if spec.attention.qk_norm != "none":
        out.append(f"q/k norms ({spec.attention.qk_norm})")
    gates = {spec.layer_mlp(i).activation for i in range(spec.num_layers)}
    out += [f"{g} gate" for g in sorted(gates - {"silu"})]
    moes = {spec.layer_mlp(i).moe for i in range(spec.num_layers)} - {None}
    out += sorted(stack_moe.describe(moe) for moe in moes)  # type: ignore[arg-type]
    if spec.residual_scale != 1.0:
        out.append(f"residual x{spec.residual_scale:g}")
    partial = {layer.rope.partial for layer in spec.layers} - {1.0}
    out += [f"rotary {p:g} of each head" for p in sorted(partial)]
    if spec.attention.latent is not None:
        out.append("latent attention")
    ropes = len({layer.rope for layer in spec.layers})
    if ropes > 1:
        out.append(f"{ropes} rope tables")
    if any(w is not None for w in spec.windows):
        out.append("sliding windows")
    if spec.attention.softcap is not None:
        out.append("soft-capped scores")
    return ", ".join(out)

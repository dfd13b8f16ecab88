"""The execution plan of a loaded model: what runs each op, decided once at start-up.

From the model's :class:`~tandem.core.spec.model.ModelSpec`, the weights as loaded and
the engine's :class:`~tandem.core.layers.kernel_choice.KernelChoice` (and its
``ParallelConfig``: how many tensor-parallel ranks share each layer): the attention backend,
the linear layers' matmul kernel, whether a decode step runs the layer stack in one C
call (and why not, where not), the form each weight is kept in, and each layer's
program, op by op. It is data: one line in the log at start-up
(``ExecutionPlan.line``), the whole of it from ``tandem explain``, kept in
``EngineConfig.plan``. ``forward`` only follows what the model was given.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tandem.core.layers.kernel_choice import KernelChoice
from tandem.core.spec.model import AttentionSpec, LayerSpec, MLPSpec, ModelSpec

LOGGER = logging.getLogger("tandem")


@dataclass(frozen=True, slots=True)
class ExecutionPlan:
    architecture: str
    device: str
    kernels: KernelChoice
    decode: str  # "c": decode steps through the C stack; "modules": layer by layer
    decode_note: str  # what the C stack runs, or why the modules run
    weights: tuple[tuple[str, int], ...]  # (form, how many weights), most first
    layers: tuple[str, ...]  # each layer's program, its ops in order
    ends: tuple[str, str]  # before the first layer, after the last
    tensor_parallel: int = 1  # ranks that share each layer (each runs this plan on its shard)

    @property
    def where(self) -> str:
        """The device, and the ranks where there are more than one: ``cpu x2 ranks``."""
        ranks = self.tensor_parallel
        return self.device if ranks == 1 else f"{self.device} x{ranks} ranks"

    def line(self) -> str:
        """The plan in one line (the start-up log)."""
        k = self.kernels
        forms = ", ".join(f"{form} x{n}" for form, n in self.weights)
        return (
            f"{self.architecture} on {self.where}: attention {k.attention}, linear {k.linear}, "
            f"decode {self.decode} ({self.decode_note}); weights {forms}"
        )

    def table(self) -> str:
        """The whole plan, a field a line, each run of layers with one program once."""
        k = self.kernels
        out = [
            f"architecture  {self.architecture}",
            f"device        {self.where}",
            f"attention     {k.attention}",
            f"linear        {k.linear}",
            f"decode        {self.decode}: {self.decode_note}",
            "weights       " + ", ".join(f"{form} x{n}" for form, n in self.weights),
        ]
        out.append(f"{'first':<14}{self.ends[0]}")
        for first, last, program in runs(self.layers):
            span = f"layer {first}" if first == last else f"layers {first}-{last}"
            out.append(f"{span:<14}{program}")
        out.append(f"{'last':<14}{self.ends[1]}")
        return "\n".join(out)


def plan_model(model: Any, config: Any) -> ExecutionPlan:
    """Give ``model`` (loaded, not yet packed) the kernels of ``config`` (an
    EngineConfig) where it was built without them, make its plan, keep it in
    ``config.plan`` and log it in one line."""
    from tandem.core.layers.attention_backend import for_device

    if model.kernels != for_device(config.kernels, config.device.type):
        model.use_kernels(config.kernels)
        model.prepare()
    config.kernels = model.kernels  # the attention backend named
    ranks = config.parallel.tensor_parallel_size
    built = 1 if model.tp is None else model.tp.size
    if built != ranks:
        raise ValueError(
            f"parallel.tensor_parallel_size is {ranks}, but the model was built as a shard "
            f"of {built} rank(s): load it with that many (load_model's tp)"
        )
    plan = config.plan = make_plan(model, config.device.type)
    LOGGER.info("plan: %s", plan.line())
    return plan


def make_plan(model: Any, device_type: str) -> ExecutionPlan:
    """The plan of ``model`` (a loaded CausalLM, after ``use_kernels`` and ``prepare``)."""
    kernels = model.kernels
    if kernels is None:
        raise ValueError("make_plan needs a model given its kernels (CausalLM.use_kernels)")
    stack = model.model.decode_stack
    if kernels.decode_stack != "c":
        decode, note = "modules", "decode_stack='modules'"
    elif kernels.attention != "cpu":
        decode, note = "modules", "the C stack runs with the cpu attention backend only"
    else:
        reason = stack.weights_reason()
        if reason is None:
            decode, note = "c", f"all {len(model.model.layers)} layers in one call"
            extra = stack.describe()
            note += f" ({extra})" if extra else ""
        else:
            decode, note = "modules", reason
    spec: ModelSpec = model.spec
    return ExecutionPlan(
        spec.architecture,
        device_type,
        kernels,
        decode,
        note,
        tuple(Counter(weight_forms(model)).most_common()),
        tuple(layer_program(spec, layer) for layer in spec.layers),
        ends(spec),
        1 if model.tp is None else model.tp.size,
    )


def weight_forms(model: Any) -> list[str]:
    """The form of each matrix the model multiplies by or looks up."""
    from tandem.core.layers.embedding import Embedding
    from tandem.core.layers.linear import Linear
    from tandem.core.layers.moe import Stacked

    forms: list[str] = []
    for module in model.modules():
        if isinstance(module, (Linear, Embedding)):
            forms.append(module.form.name)
        elif isinstance(module, Stacked):  # one weight per expert
            forms += [form.name for form in module.forms]
    return forms


def layer_program(spec: ModelSpec, layer: LayerSpec) -> str:
    """One layer's ops in order, e.g. ``norm > qkv > rope > attend > o > add > ...``."""
    attn = _attention_ops(spec.attention, layer)
    mlp = _mlp_ops(layer.mlp or spec.mlp)
    scale = "" if spec.residual_scale == 1.0 else f" > x{spec.residual_scale:g}"
    if spec.norm == "pre":
        return f"norm > {attn}{scale} > add > norm > {mlp}{scale} > add"
    if spec.norm == "sandwich":
        return f"norm > {attn} > norm{scale} > add > norm > {mlp} > norm{scale} > add"
    return f"{attn} > norm{scale} > add > {mlp} > norm{scale} > add"


def ends(spec: ModelSpec) -> tuple[str, str]:
    """The ops before the first layer and after the last."""
    first = "embed" if spec.embedding_scale == 1.0 else f"embed > x{spec.embedding_scale:g}"
    last = ["norm", "logits (tied)" if spec.tie_word_embeddings else "logits"]
    if spec.logits_divisor != 1.0:
        last.append(f"/{spec.logits_divisor:g}")
    if spec.final_softcap is not None:
        last.append(f"softcap {spec.final_softcap:g}")
    return first, " > ".join(last)


def _attention_ops(attn: AttentionSpec, layer: LayerSpec) -> str:
    ops = ["latent q/kv" if attn.latent else "qkv" + ("+bias" if attn.qkv_bias else "")]
    if attn.qk_norm != "none":
        ops.append(f"q/k norm ({attn.qk_norm})")
    rope = layer.rope
    ops.append("rope" if rope.type == "default" else f"rope ({rope.type})")
    attend = "attend" if layer.window is None else f"attend (window {layer.window})"
    if attn.softcap is not None:
        attend += f" softcap {attn.softcap:g}"
    ops += [attend, "o" + ("+bias" if attn.o_bias else "")]
    return " > ".join(ops)


def _mlp_ops(mlp: MLPSpec) -> str:
    gate = "silu*mul" if mlp.activation == "silu" else "gelu*mul"
    dense = f"gate_up > {gate} > down"
    if mlp.moe is None:
        return dense
    moe = mlp.moe
    shared = " + shared expert" if moe.shared_intermediate_size else ""
    return f"route ({moe.scoring} top-{moe.top_k} of {moe.num_experts}) > experts ({dense}){shared}"


def runs(programs: tuple[str, ...]) -> list[tuple[int, int, str]]:
    """Consecutive equal programs as (first, last, program)."""
    out: list[tuple[int, int, str]] = []
    for i, program in enumerate(programs):
        if out and out[-1][2] == program and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i, program)
        else:
            out.append((i, i, program))
    return out

"""A mixture-of-experts layer's entry in the C decode stack's table: the router, each
routed expert's gate/up and down, the shared expert and its sigmoid gate, each weight in
its own form (:mod:`tandem.core.layers.weight_form`), and the routing the
:class:`~tandem.core.spec.model.MoESpec` says (softmax top-k, renormalised or not; or
DeepSeek-V3's group-limited sigmoid, with its score bias and scaling)."""

from __future__ import annotations

from torch import Tensor, nn

from tandem.core.layers.linear import Linear
from tandem.core.layers.weight_form import Dense, Takes, WeightForm
from tandem.core.spec.model import MoESpec
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native import moe as native_moe
from tandem.kernels.native.decode_moe import MoeEntry


def routing(moe: MoESpec, score_bias: Tensor | None = None) -> native_moe.RoutingSpec:
    """The C routing of ``moe`` (``score_bias``: the router's correction, where the spec
    has one)."""
    return native_moe.RoutingSpec(
        moe.num_experts,
        top_k(moe),
        moe.norm_topk_prob,
        moe.scoring,
        moe.n_group,
        moe.topk_group,
        score_bias,
        moe.routed_scaling,
    )


def why_not_moe(moe: MoESpec) -> str | None:
    """Why the C driver does not run a mixture of experts of this spec, or None."""
    return routing(moe).reach()


def weights(mlp: nn.Module) -> dict[str, tuple[WeightForm | None, Tensor | None]]:
    """The layer's weights by name (a form and its bias; no form: a module the C driver
    does not take, e.g. a tensor-parallel shard), in the table's order."""

    def of(lin: nn.Module) -> tuple[WeightForm | None, Tensor | None]:
        return (lin.form, lin.bias) if type(lin) is Linear else (None, None)

    out = {"router": of(mlp.gate)}
    experts = mlp.experts
    for e in range(experts.num_experts):
        out[f"expert {e} gate_up"] = (experts.gate_up.forms[e], None)
        out[f"expert {e} down"] = (experts.down.forms[e], None)
    if mlp.shared_expert is not None:
        out["shared gate_up"] = of(mlp.shared_expert.gate_up_proj)
        out["shared down"] = of(mlp.shared_expert.down_proj)
    if mlp.shared_expert_gate is not None:
        out["shared gate"] = of(mlp.shared_expert_gate)
    return out


def weights_reason(mlp: nn.Module, takes: Takes) -> str | None:
    """Why the C driver cannot multiply by one of the layer's weights, or take its
    routing (its score bias), or None. A tensor-parallel rank's shard (its run of whole
    experts, its part of the shared expert) is taken as a whole model's layer is."""
    for name, (form, bias) in weights(mlp).items():
        if form is None:
            return f"{name}: not a plain linear layer"
        entry = form.c_entry(bias, [], takes)
        if isinstance(entry, str):
            return f"{name}: {entry}"
    return routing(mlp.moe, score_bias(mlp)).reach()


def score_bias(mlp: nn.Module) -> Tensor | None:
    """The router's correction of the choice scores (DeepSeek-V3's), or None."""
    return getattr(mlp.gate, "e_score_correction_bias", None)


def moe_entry(
    mlp: nn.Module, moe: MoESpec, keep: list[Tensor], dense: list[Dense], takes: Takes
) -> MoeEntry | None:
    """The layer's entry (the tensors it points into appended to ``keep``, its fp32
    forms, whose packed copies must still hold, to ``dense``), or None where the C driver
    cannot take it."""
    if why_not_moe(moe) is not None or weights_reason(mlp, takes) is not None:
        return None
    lins: dict[str, native.LinSpec] = {}
    for name, (form, bias) in weights(mlp).items():
        assert form is not None
        entry = form.c_entry(bias, keep, takes)
        assert isinstance(entry, native.LinSpec)
        lins[name] = entry
        if isinstance(form, Dense):
            dense.append(form)
    experts = tuple(
        (lins[f"expert {e} gate_up"], lins[f"expert {e} down"])
        for e in range(mlp.experts.num_experts)
    )
    shared = None
    if "shared gate_up" in lins:
        shared = (lins["shared gate_up"], lins["shared down"])
    bias = score_bias(mlp)
    if bias is not None:
        keep.append(bias)
    first = mlp.experts.first or 0  # a tensor-parallel rank's first expert
    return MoeEntry(
        lins["router"], experts, routing(moe, bias), shared, lins.get("shared gate"), first
    )


def top_k(moe: MoESpec) -> int:
    """The experts each token is routed to (the spec's; one place, so that a test can
    check the stack follows it)."""
    return moe.top_k


def describe(moe: MoESpec) -> str:
    """e.g. ``experts (softmax top-2 of 4, renormalised, gated shared expert)``, ``experts
    (sigmoid top-3 of 8 in the 2 best of 4 groups, renormalised, x2.5, shared expert)``."""
    extra = ""
    if moe.scoring == "sigmoid" and moe.n_group > 1:
        extra += f" in the {moe.topk_group} best of {moe.n_group} groups"
    extra += ", renormalised" if moe.norm_topk_prob else ""
    if moe.scoring == "sigmoid" and moe.routed_scaling != 1.0:
        extra += f", x{moe.routed_scaling:g}"
    if moe.shared_intermediate_size:
        extra += ", gated shared expert" if moe.shared_gate else ", shared expert"
    return f"experts ({moe.scoring} top-{moe.top_k} of {moe.num_experts}{extra})"

"""A mixture-of-experts layer's entry in the C decode stack's table: the router, each
routed expert's gate/up and down, the shared expert and its sigmoid gate, each weight in
its own form (:mod:`tandem.core.layers.weight_form`), and the routing the
:class:`~tandem.core.spec.model.MoESpec` says (softmax, top-k, renormalised or not)."""

from __future__ import annotations

from torch import Tensor, nn

from tandem.core.layers.linear import Linear
from tandem.core.layers.weight_form import Dense, Takes, WeightForm
from tandem.core.spec.model import MoESpec
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native import moe as native_moe
from tandem.kernels.native.decode_moe import MoeEntry


def why_not_moe(moe: MoESpec) -> str | None:
    """Why the C driver does not run a mixture of experts of this spec, or None."""
    if moe.scoring != "softmax":
        return f"{moe.scoring} routing (group-limited)"
    if not native_moe.routes(moe.num_experts, moe.top_k):
        return f"top-{moe.top_k} of {moe.num_experts} experts (beyond the C routing)"
    return None


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
    """Why the C driver cannot multiply by one of the layer's weights, or None (experts
    sharded over tensor-parallel ranks never get here: ``stack_program.why_not`` refuses
    them from the parallel group)."""
    for name, (form, bias) in weights(mlp).items():
        if form is None:
            return f"{name}: not a plain linear layer"
        entry = form.c_entry(bias, [], takes)
        if isinstance(entry, str):
            return f"{name}: {entry}"
    return None


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
    return MoeEntry(
        lins["router"], experts, top_k(moe), moe.norm_topk_prob, shared, lins.get("shared gate")
    )


def top_k(moe: MoESpec) -> int:
    """The experts each token is routed to (the spec's; one place, so that a test can
    check the stack follows it)."""
    return moe.top_k


def describe(moe: MoESpec) -> str:
    """e.g. ``experts (softmax top-2 of 4, renormalised, gated shared expert)``."""
    extra = ", renormalised" if moe.norm_topk_prob else ""
    if moe.shared_intermediate_size:
        extra += ", gated shared expert" if moe.shared_gate else ", shared expert"
    return f"experts ({moe.scoring} top-{moe.top_k} of {moe.num_experts}{extra})"

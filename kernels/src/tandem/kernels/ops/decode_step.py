"""Validation of a fused decode step (rope, K/V write and decode attention of one layer).

A step's positions, slots, lengths and block tables are the same tensors for every
layer of the model, so :class:`StepCheck` reads their values once per step and only
the per-layer tensors' metadata after that: on a small model the reads, taken layer by
layer, cost as much as the attention itself.
"""

from __future__ import annotations

from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.decode_inputs import AttentionLayer, DecodeStep
from tandem.kernels.ops.attention_checks import check_decode, check_prefill
from tandem.kernels.ops.cache import check_write


def check_qkv(qkv: object, heads: object, head_dim: int) -> tuple[int, int]:
    """The fused projection qkv: [B, (H + 2 KVH) * D] against ``heads`` = (H, KVH)."""
    t = checks.tensor("qkv", qkv, 2, checks.FLOAT_DTYPES)
    if not (isinstance(heads, tuple) and len(heads) == 2):
        raise TypeError(f"heads must be a pair (H, KVH), got {heads!r}")
    H = checks.integer("heads[0]", heads[0], 1)
    KVH = checks.integer("heads[1]", heads[1], 1)
    checks.heads("q", H, "k", KVH)
    checks.dim("qkv", t, 1, (H + 2 * KVH) * head_dim, "(H + 2 * KVH) * head size")
    return H, KVH


def check_rope_decode(
    qkv: Tensor,
    layer: AttentionLayer,
    step: DecodeStep,
    k_cache: Tensor,
    v_cache: Tensor,
    cu_seqlens_q: Tensor | None = None,
) -> None:
    """Everything a fused decode step reads, values included. With ``cu_seqlens_q``
    [B + 1], a step of a few new tokens a sequence laid out as a prefill (a speculative
    verify): qkv's T rows are the tokens, cu_seqlens_q their sequences' offsets, and
    ``step.seq_lens`` and ``step.block_tables`` the B sequences'."""
    _check_inputs(layer, step)
    kc, _ = checks.paged_cache(k_cache, v_cache)
    D = kc.shape[3]
    H, KVH = check_qkv(qkv, layer.heads, D)
    T = qkv.shape[0]
    q = qkv[:, : H * D].reshape(T, H, D)
    k = qkv[:, H * D : (H + KVH) * D].reshape(T, KVH, D)
    check_write(k, k, k_cache, v_cache, step.slot_mapping)
    tables = (step.seq_lens, step.block_tables, layer.scale, layer.window, layer.softcap)
    if cu_seqlens_q is None:
        check_decode(q, k_cache, v_cache, *tables)
    else:
        check_prefill(q, k, k, k_cache, v_cache, cu_seqlens_q, *tables)
    _check_positions(qkv, step, D)


def _check_inputs(layer: object, step: object) -> None:
    if not isinstance(layer, AttentionLayer):
        raise TypeError(f"layer must be an AttentionLayer, got {type(layer).__name__}")
    if not isinstance(step, DecodeStep):
        raise TypeError(f"step must be a DecodeStep, got {type(step).__name__}")


def _check_positions(qkv: Tensor, step: DecodeStep, head_dim: int) -> None:
    """One position a row of qkv, each inside the rope table."""
    p = checks.tensor("positions", step.positions, 1, checks.INT_DTYPES)
    cs = checks.tensor("cos_sin_cache", step.cos_sin, 2, checks.FLOAT_DTYPES)
    checks.dim("positions", p, 0, qkv.shape[0], "the number of rows qkv.shape[0]")
    checks.dim("cos_sin_cache", cs, 1, head_dim, "the head size")
    checks.same_device(qkv=qkv, positions=p, cos_sin_cache=cs)
    if p.numel() and (int(p.min()) < 0 or int(p.max()) >= cs.shape[0]):
        raise ValueError(
            f"positions must be in [0, {cs.shape[0]}) (cos_sin_cache rows), "
            f"got min {int(p.min())} and max {int(p.max())}"
        )


class StepCheck:
    """Remembers the step tensors it validated last, holding them so that none can be
    freed and its id reused: a layer passing the same tensor objects, with caches of the
    same shape, needs only its own qkv checked. The engines build a step's tensors anew
    for every step and never write into them, so the same objects hold the same values
    (tensors made under ``torch.inference_mode`` keep no version counter to compare)."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: tuple[tuple[Tensor, ...], tuple[object, ...]] | tuple[()] = ()

    def __call__(
        self, qkv: Tensor, layer: AttentionLayer, step: DecodeStep, k_cache: Tensor, v_cache: Tensor
    ) -> None:
        if not isinstance(step, DecodeStep):
            check_rope_decode(qkv, layer, step, k_cache, v_cache)  # raises, naming it
        tensors = step.tensors()
        key = (k_cache.shape, v_cache.shape, k_cache.dtype, v_cache.dtype, k_cache.device)
        key += (layer, qkv.shape[0])
        seen = self._seen
        if seen and all(a is b for a, b in zip(seen[0], tensors)) and seen[1] == key:
            H, KVH = layer.heads  # checked with the step
            width = (H + 2 * KVH) * k_cache.shape[3]
            fits = qkv.dim() == 2 and qkv.shape[1] == width and qkv.dtype in checks.FLOAT_DTYPES
            if fits and qkv.device == k_cache.device:
                return
            check_qkv(qkv, layer.heads, k_cache.shape[3])
            raise ValueError(f"qkv must be on {k_cache.device}, got {qkv.device}")
        check_rope_decode(qkv, layer, step, k_cache, v_cache)
        self._seen = (tensors, key)

"""The batch's token bitmask: built once per step for every constrained row, applied
to the logits in the sampler (a refused token's logit becomes -inf).

Rows without a grammar cost little: only the constrained rows are filled and applied.
On the CPU the grammar engine's own kernel applies the packed mask (one bit per token)
to a copy of the logits in one pass; elsewhere the packed words travel to the logits'
device and are unpacked there with torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tandem.core.outputs.request_output import error_text
from tandem.core.structured.engine import xgrammar
from tandem.core.structured.state import GrammarState

_BITS = 32


@dataclass(slots=True)
class GrammarMask:
    rows: Tensor  # [K] int64 rows of the batch that are constrained
    words: Tensor  # [B, ceil(V / 32)] int32, bit j of word w allows token 32 * w + j
    failed: dict[int, str] = field(default_factory=dict)  # batch row -> why its fill failed

    def pick(self, i: int) -> GrammarMask | None:
        """Row ``i`` of the batch alone (None when it is not constrained)."""
        if not bool((self.rows == i).any()):
            return None
        failed = {0: self.failed[i]} if i in self.failed else {}
        return GrammarMask(torch.zeros(1, dtype=torch.int64), self.words[i : i + 1], failed)


def build_mask(states: Sequence[GrammarState | None], vocab_size: int) -> GrammarMask | None:
    """The mask of a batch whose row b has grammar ``states[b]`` (None: free)."""
    rows = [b for b, s in enumerate(states) if s is not None]
    if not rows:
        return None
    words = torch.full((len(states), (vocab_size + _BITS - 1) // _BITS), -1, dtype=torch.int32)
    failed: dict[int, str] = {}
    for b in rows:
        try:
            states[b].fill(words, b)  # type: ignore[union-attr]
        except Exception as exc:  # this row fails alone: nothing allowed
            words[b] = 0
            failed[b] = error_text(exc)
    return GrammarMask(torch.tensor(rows, dtype=torch.int64), words, failed)


def allowed(words: Tensor, vocab_size: int) -> Tensor:
    """[K, W] int32 packed words -> [K, V] bool."""
    shifts = torch.arange(_BITS, dtype=torch.int32, device=words.device)
    bits = (words.unsqueeze(-1) >> shifts) & 1  # [K, W, 32]
    return bits.reshape(words.shape[0], -1)[:, :vocab_size].bool()


def apply_mask(logits: Tensor, mask: GrammarMask) -> Tensor:
    """``logits`` [B, V] with every refused token of the constrained rows at -inf (a new
    tensor: the caller's logits are left as they were)."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        out = logits.clone()
        xgrammar().apply_token_bitmask_inplace(
            out, mask.words, vocab_size=logits.shape[1], indices=mask.rows.tolist()
        )
        return out
    dev = logits.device
    rows = mask.rows.to(dev)
    words = mask.words.to(dev, non_blocking=True).index_select(0, rows)
    ok = allowed(words, logits.shape[1])  # [K, V]
    picked = logits.index_select(0, rows).masked_fill(~ok, float("-inf"))
    return logits.index_copy(0, rows, picked)

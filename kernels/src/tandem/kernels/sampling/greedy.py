"""Greedy choice and the chosen token's raw logprob, shared by both engines' samplers."""

from __future__ import annotations

from torch import Tensor

from tandem.kernels.native import greedy as native_greedy


def greedy_with_logprob(logits: Tensor) -> tuple[Tensor, Tensor]:
    """logits [B, V] -> (argmax [B] int64, its log-softmax value [B] fp32).

    The argmax is rank 1 by definition and its logprob is ``-log(sum(exp(x - max)))``;
    fp32 CPU logits take one C pass, anything else torch's argmax and logsumexp.
    """
    done = native_greedy(logits)
    if done is not None:
        return done
    x = logits.float()
    tokens = x.argmax(dim=-1)  # [B]
    picked = x.gather(1, tokens[:, None]).squeeze(1) - x.logsumexp(dim=-1)  # [B]
    return tokens, picked

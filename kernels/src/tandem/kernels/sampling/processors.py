"""Batched logit processors: one row per request, per-row parameters as [B] tensors.

None of them loops over rows in Python. Masked tokens become ``-inf``; each returns a
new tensor and leaves its input untouched.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels import checks

_NEG_INF = float("-inf")
# the repetition penalty divides or multiplies logits: within this range float32 logits
# stay finite (the front door's SamplingParams refuses values outside it)
REPETITION_RANGE = (1e-6, 1e6)


def _logits(logits: object) -> Tensor:
    return checks.tensor("logits", logits, 2, checks.FLOAT_DTYPES)


def _row_param(
    name: str,
    value: object,
    logits: Tensor,
    dtypes: tuple[torch.dtype, ...],
    low: float,
    high: float | None = None,
) -> Tensor:
    t = checks.tensor(name, value, 1, dtypes)
    checks.dim(name, t, 0, logits.shape[0], "logits.shape[0]")
    checks.same_device(logits=logits, **{name: t})
    if t.numel():
        if t.dtype.is_floating_point:
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} must be finite, got {t.tolist()}")
            # the bounds as this dtype holds them: float32(1e-6) is just below 1e-6
            low = torch.tensor(low, dtype=t.dtype).item()
            high = None if high is None else torch.tensor(high, dtype=t.dtype).item()
        lo, hi = t.min().item(), t.max().item()
        if lo < low or (high is not None and hi > high):
            bound = f"[{low}, {high}]" if high is not None else f">= {low}"
            raise ValueError(f"{name} must be in {bound}, got min {lo} and max {hi}")
    return t


def apply_penalties(
    logits: Tensor,
    prompt_mask: Tensor,
    output_counts: Tensor,
    presence: Tensor,
    frequency: Tensor,
    repetition: Tensor,
) -> Tensor:
    """Repetition, frequency and presence penalties.

    logits: [B, V]; prompt_mask: [B, V] bool (token in the prompt); output_counts: [B, V]
    (times generated so far); presence, frequency: [B] (0 = off); repetition: [B] > 0
    (1 = off). Tokens seen in the prompt or the output have positive logits divided by
    the repetition penalty and negative ones multiplied; then ``frequency * count`` and
    ``presence * (count > 0)`` are subtracted.
    """
    x = _logits(logits)
    pm = checks.tensor("prompt_mask", prompt_mask, 2, (torch.bool,))
    counts = checks.tensor("output_counts", output_counts, 2)
    if counts.dtype.is_floating_point or counts.dtype == torch.bool:
        raise ValueError(f"output_counts must have an integer dtype, got {counts.dtype}")
    for name, t in (("prompt_mask", pm), ("output_counts", counts)):
        if t.shape != x.shape:
            raise ValueError(
                f"{name} must have the shape of logits {tuple(x.shape)}, got {tuple(t.shape)}"
            )
    floats = checks.FLOAT_DTYPES
    pres = _row_param("presence", presence, x, floats, _NEG_INF)
    freq = _row_param("frequency", frequency, x, floats, _NEG_INF)
    rep = _row_param("repetition", repetition, x, floats, *REPETITION_RANGE)
    seen = pm | (counts > 0)
    r = rep.to(x.dtype)[:, None]  # [B, 1]
    out = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    out = out - freq.to(x.dtype)[:, None] * counts.to(x.dtype)
    return out - pres.to(x.dtype)[:, None] * (counts > 0).to(x.dtype)


def apply_temperature(logits: Tensor, temperature: Tensor) -> Tensor:
    """Divide each row by its temperature [B]; rows at temperature 0 (greedy) are kept."""
    x = _logits(logits)
    t = _row_param("temperature", temperature, x, checks.FLOAT_DTYPES, 0.0)
    t = torch.where(t == 0, torch.ones_like(t), t).to(x.dtype)
    return x / t[:, None]


def apply_top_k(logits: Tensor, k: Tensor) -> Tensor:
    """Keep the tokens whose logit is >= the row's k-th largest; k: [B] int, 0 = disabled.

    Ties with the k-th value are all kept; k larger than the vocabulary keeps every token.
    """
    x = _logits(logits)
    kk = _row_param("k", k, x, checks.INT_DTYPES, 0)
    V = x.shape[1]
    kk = torch.where(kk == 0, V, kk.clamp(max=V)).long()  # [B], 1..V
    if x.shape[0] == 0:
        return x.clone()
    top = x.topk(int(kk.max()), dim=-1).values  # [B, kmax] descending
    threshold = top.gather(1, (kk - 1)[:, None])  # [B, 1]
    return x.masked_fill(x < threshold, _NEG_INF)


def apply_top_p(logits: Tensor, p: Tensor) -> Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``p``: [B] in (0, 1].

    Tokens are ranked by a stable descending sort; a token is kept while the mass of
    the tokens ranked before it is < p, so the top token always stays. p = 1 keeps all.
    """
    x = _logits(logits)
    pp = _row_param("p", p, x, checks.FLOAT_DTYPES, 0.0, 1.0)
    if bool((pp <= 0).any()):
        raise ValueError(f"p must be in (0, 1], got min {pp.min().item()}")
    sorted_logits, order = x.sort(dim=-1, descending=True, stable=True)  # [B, V]
    probs = sorted_logits.float().softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass ranked strictly before each token
    drop = (before >= pp.float()[:, None]) & (pp < 1)[:, None]
    drop[:, 0] = False
    mask = torch.zeros_like(drop).scatter_(1, order, drop)
    return x.masked_fill(mask, _NEG_INF)


def apply_min_p(logits: Tensor, min_p: Tensor) -> Tensor:
    """Drop tokens whose probability is < ``min_p`` times the row's top probability."""
    x = _logits(logits)
    mp = _row_param("min_p", min_p, x, checks.FLOAT_DTYPES, 0.0, 1.0)
    probs = x.float().softmax(dim=-1)  # [B, V]
    top = probs.max(dim=-1, keepdim=True).values
    return x.masked_fill(probs < mp.float()[:, None] * top, _NEG_INF)

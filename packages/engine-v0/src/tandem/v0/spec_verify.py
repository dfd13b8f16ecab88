"""One sequence's speculative drafts checked against the target model's logits.

The step fed the sequence's last known token and its d drafts, so the model gave logits
at d+1 positions. Row i is processed exactly as the sampler would process it had the
first i drafts already been sampled (penalties count them, ``min_tokens`` sees the
longer output), then :mod:`tandem.core.speculative.verify` keeps the drafts the target
agrees with and adds one token. Logprobs come from each position's raw log-softmax, as
without speculation.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from tandem.core.inputs.engine_request import SamplingSpec
from tandem.core.outputs.logprobs import entries, top_logprobs
from tandem.core.outputs.request_output import error_text
from tandem.core.speculative.verify import verify_greedy, verify_sampled, verify_seed
from tandem.kernels.sampling import filtered_probs
from tandem.v0.sampler import INVALID, Sampler, SampleResult, SamplingRow


def verify_drafts(
    sampler: Sampler,
    logits: Tensor,
    row: SamplingRow,
    drafts: list[int],
    draft_probs: Tensor | None,
) -> list[SampleResult]:
    """The accepted drafts and the one token after them, as sampler results (1..d+1);
    a single result with ``error`` set when the row cannot be sampled.

    logits: [d+1, V] at the last known token's position and each draft's."""
    try:
        return _verify(sampler, logits.float(), row, drafts, draft_probs)
    except Exception as exc:
        return [SampleResult(-1, 0.0, 0, error=error_text(exc))]


def _verify(
    sampler: Sampler,
    logits: Tensor,
    row: SamplingRow,
    drafts: list[int],
    draft_probs: Tensor | None,
) -> list[SampleResult]:
    spec = row.spec
    rows = [
        replace(row, output_token_ids=[*row.output_token_ids, *drafts[:i]])
        for i in range(len(drafts) + 1)
    ]
    x = logits
    if spec.has_penalties or spec.logit_bias or any(r.masks for r in rows):
        x = sampler.process(logits, rows)
    if not bool(torch.isfinite(x.amax(dim=-1)).all()):
        return [SampleResult(-1, 0.0, 0, error=INVALID)]
    if spec.greedy:
        tokens = verify_greedy(x, drafts)
    else:
        gen = torch.Generator(device=x.device)
        gen.manual_seed(verify_seed(row.seed, row.counter))
        tokens = verify_sampled(target_probs(x, spec), drafts, draft_probs, gen)
    raw = logits[: len(tokens)].log_softmax(dim=-1)
    keep = spec.logprobs or 0
    chosen = torch.tensor(tokens, dtype=torch.int64, device=raw.device)
    tops = entries(*top_logprobs(raw, chosen, keep), [keep] * len(tokens))
    wanted = spec.logprobs is not None
    return [SampleResult(t[0][0], t[0][1], t[0][2], t if wanted else None) for t in tops]


def target_probs(x: Tensor, spec: SamplingSpec) -> Tensor:
    """The distribution a sampled row draws from: processed logits [R, V] through
    temperature, top-k, top-p and min-p (the order of ``choose_tokens``), softmaxed."""
    n, vocab = x.shape
    dev = x.device

    def col(value: float, dtype: torch.dtype) -> Tensor:
        return torch.full((n,), value, dtype=dtype, device=dev)

    return filtered_probs(
        x,
        col(spec.temperature, torch.float32),
        col(max(min(spec.top_k, vocab), -1), torch.int64),
        col(spec.top_p, torch.float32),
        col(spec.min_p, torch.float32),
    )

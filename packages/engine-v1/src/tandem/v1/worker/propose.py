"""The drafts each request verifies in its next step, proposed after this step's draws.

The proposer runs in the worker, not in the engine core: the worker already holds
every request's tokens (the input batch), a draft model must live in the model's
process next to its own KV cache anyway, and the drafts then go back to the scheduler
in the step's output like the sampled tokens, so one step's data flows one way:
scheduler -> worker -> scheduler. A draft model's distributions (for a sampled
request's verify) stay here, keyed by request, until the step that verifies the drafts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from tandem.core.speculative import SpeculativeConfig, propose_ngram
from tandem.core.speculative.verify import draft_seed
from tandem.v1.worker.input_batch import InputBatch

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig


@dataclass(slots=True, frozen=True)
class Ask:
    key: str
    limit: int  # the most drafts the request may verify next (room under max_tokens)
    num_output: int  # its output tokens so far


class NgramProposer:
    """Prompt lookup in the request's own tokens; drafts are certain (no distributions)."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self.config = config
        self.k = config.num_speculative_tokens

    def propose(self, batch: InputBatch, asks: Sequence[Ask]) -> list[list[int]]:
        c, out = self.config, []
        for ask in asks:
            k = min(self.k, ask.limit)
            if k <= 0:
                out.append([])
                continue
            b = batch.rows[ask.key]
            tokens = batch.token_ids[b, : batch.num_tokens[b]].tolist()
            out.append(propose_ngram(tokens, k, c.prompt_lookup_min, c.prompt_lookup_max))
        return out

    def probs(self, key: str, n: int) -> Tensor | None:
        return None

    def drop(self, key: str) -> None:
        """Nothing is kept per request."""


class DraftModelProposer:
    """A small model with the target's vocabulary (:class:`~tandem.core.speculative.
    draft.DraftProposer`, its KV cache kept per request across steps)."""

    def __init__(self, config: EngineConfig) -> None:
        from tandem.core.speculative.draft import DraftProposer

        self.k = config.speculative.num_speculative_tokens  # type: ignore[union-attr]
        self.draft = DraftProposer.load(config.speculative, config)
        self._probs: dict[str, Tensor] = {}

    def propose(self, batch: InputBatch, asks: Sequence[Ask]) -> list[list[int]]:
        from tandem.core.speculative.draft import DraftSampling

        go = [a for a in asks if a.limit > 0]
        work = []
        for a in go:
            b = batch.rows[a.key]
            spec = batch.specs[b]
            how = DraftSampling()
            if spec is not None and not spec.greedy:
                seed = draft_seed(int(batch.seeds[b]), a.num_output)
                how = DraftSampling(spec.temperature, seed)
            work.append((a.key, batch.token_ids[b, : batch.num_tokens[b]].tolist(), how))
        found: dict[str, list[int]] = {}
        if work:
            k = min(self.k, max(a.limit for a in go))
            for a, (drafts, probs) in zip(go, self.draft.propose(work, k)):
                found[a.key] = drafts[: a.limit]
                if probs is None:
                    self._probs.pop(a.key, None)
                else:
                    self._probs[a.key] = probs
        return [found.get(a.key, []) for a in asks]

    def probs(self, key: str, n: int) -> Tensor | None:
        """The distributions of the request's first ``n`` drafts (None: certain drafts)."""
        p = self._probs.get(key)
        return None if p is None else p[:n]

    def drop(self, key: str) -> None:
        self._probs.pop(key, None)
        self.draft.drop(key)


Proposer = NgramProposer | DraftModelProposer


def make_proposer(config: EngineConfig) -> Proposer | None:
    """The proposer ``config`` asks for (None: no speculative decoding)."""
    sc = config.speculative
    if sc is None:
        return None
    return NgramProposer(sc) if sc.method == "ngram" else DraftModelProposer(config)

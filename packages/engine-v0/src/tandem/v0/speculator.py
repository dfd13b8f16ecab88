"""Speculative decoding in engine v0: drafts before a step, their outcome after it.

Before scheduling, each running sequence that is ready to decode (one uncomputed token,
no grammar, room left under max_tokens) gets up to k drafts: from an n-gram lookup in
its own tokens, or from the draft model (:class:`~tandem.core.speculative.draft.
DraftProposer`). The scheduler feeds them after the sequence's last token when the
token budget and free blocks allow (else it drops them), the runner verifies them, and
:meth:`Speculator.settle` appends the kept tokens one by one, so stops cut the list
exactly where plain decoding would have stopped. The refused drafts' cache slots are
garbage past the computed length and the blocks held only for them go back.

Structured-output (grammar) samples never get drafts: they decode one token a step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tandem.core.config.speculative import SpeculativeConfig
from tandem.core.speculative.ngram import propose_ngram
from tandem.core.speculative.verify import draft_seed
from tandem.v0.block_manager import BlockManager
from tandem.v0.grouped_blocks import GroupedBlockManager
from tandem.v0.sampler import SampleResult
from tandem.v0.scheduler import ScheduledSeq
from tandem.v0.sequence import Request, Sequence


class Speculator:
    def __init__(self, config: SpeculativeConfig, proposer: Any = None) -> None:
        if config.method == "draft" and proposer is None:
            raise ValueError("speculative method 'draft' needs a DraftProposer")
        self.config = config
        self.proposer = proposer
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    @classmethod
    def for_config(cls, engine_config: Any) -> Speculator | None:
        """The speculator ``engine_config.speculative`` asks for (None: no speculation)."""
        spec = getattr(engine_config, "speculative", None)
        if spec is None:
            return None
        proposer = None
        if spec.method == "draft":
            from tandem.core.speculative.draft import DraftProposer

            proposer = DraftProposer.load(spec, engine_config)
        return cls(spec, proposer)

    def propose(self, running: list[Sequence], requests: dict[str, Request]) -> None:
        """Set the drafts of every running sequence (none for those not ready)."""
        ready: list[tuple[Sequence, int]] = []
        for seq in running:
            seq.draft_token_ids, seq.draft_probs = [], None
            room = min(
                self.config.num_speculative_tokens, seq.max_tokens - seq.num_output_tokens - 1
            )
            if room > 0 and seq.num_uncomputed_tokens == 1 and seq.grammar is None:
                ready.append((seq, room))
        if self.proposer is None:
            c = self.config
            for seq, room in ready:
                tokens = seq.prompt_token_ids + seq.output_token_ids
                seq.draft_token_ids = propose_ngram(
                    tokens, room, c.prompt_lookup_min, c.prompt_lookup_max
                )
            return
        alive = {seq.seq_id for seq in running}
        for key in self.proposer.held():
            if key not in alive:  # finished, aborted or preempted: its cache goes
                self.proposer.drop(key)
        self._draft(ready, requests)

    def _draft(self, ready: list[tuple[Sequence, int]], requests: dict[str, Request]) -> None:
        from tandem.core.speculative.draft import DraftSampling

        batch = []
        for seq, _ in ready:
            spec = requests[seq.request_id].request.sampling
            how = DraftSampling()
            if not spec.greedy:
                how = DraftSampling(spec.temperature, draft_seed(seq.seed, seq.num_output_tokens))
            batch.append((seq.seq_id, seq.prompt_token_ids + seq.output_token_ids, how))
        if not batch:
            return
        k = max(room for _, room in ready)
        for (seq, room), (drafts, probs) in zip(ready, self.proposer.propose(batch, k)):
            seq.draft_token_ids, seq.draft_probs = drafts[:room], probs

    def drop(self, seq: Sequence) -> None:
        if self.proposer is not None:
            self.proposer.drop(seq.seq_id)

    def settle(
        self,
        item: ScheduledSeq,
        samples: list[SampleResult],
        append: Callable[[SampleResult], bool],
        blocks: BlockManager | GroupedBlockManager,
    ) -> bool:
        """Append the verified tokens through ``append`` until one finishes the sequence
        (True); else move its computed length past the accepted drafts and return the
        blocks held only for refused ones (False)."""
        seq = item.seq
        self.num_draft_tokens += item.num_drafts
        self.num_accepted_tokens += len(samples) - 1
        for sample in samples:
            if append(sample):
                return True
        seq.num_computed_tokens = seq.num_tokens - 1
        blocks.trim(seq, seq.num_tokens)
        return False

"""``DraftProposer``: a small model with the target's vocabulary guesses the next tokens.

It keeps its own paged KV cache, one block table per request, across steps: each call
feeds only the tokens its cache does not hold yet (after a verify step, the accepted
drafts and the target's token; refused drafts' K/V are overwritten), then k-1 single
token steps. So a step costs the draft k small forwards, never the whole context again.

Greedy requests get the draft's argmax; sampled ones a draw from the draft's
temperature-scaled distribution, with those distributions returned for the verify step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from tandem.core.config.speculative import SpeculativeConfig
from tandem.core.layers.attention_metadata import build_metadata

DRAFT_BLOCK_SIZE = 16


@dataclass(slots=True, frozen=True)
class DraftSampling:
    """How one request's drafts are drawn: ``temperature`` 0 is greedy; ``seed`` seeds this
    call's draws of a sampled request (None: torch's global generator)."""

    temperature: float = 0.0
    seed: int | None = None


@dataclass(slots=True)
class _Cache:
    fed: list[int] = field(default_factory=list)  # tokens whose K/V the draft cache holds
    table: list[int] = field(default_factory=list)  # their blocks


class DraftProposer:
    """Owns the draft model and its KV cache. Build it with :meth:`load`."""

    def __init__(self, model: Any, caches: list[tuple[Tensor, Tensor]], block_size: int,
                 device: torch.device) -> None:  # fmt: skip
        self.model = model
        self.caches = caches
        self.block_size = block_size
        self.device = device
        self._free: deque[int] = deque(range(caches[0][0].shape[0]))
        self._held: dict[Hashable, _Cache] = {}

    @classmethod
    def load(cls, spec: SpeculativeConfig, target: Any) -> DraftProposer:
        """The draft model ``spec.model`` on the target config's device, with a cache for
        ``max_num_seqs`` requests of ``max_model_len`` tokens (within the bytes of the
        target's KV cache, once resolved)."""
        from tandem.core.config.engine_args import EngineArgs
        from tandem.core.engine.loader import load_model
        from tandem.core.kv.cache import allocate_kv_caches, kv_cache_bytes_per_block

        if spec.method != "draft" or spec.model is None:
            raise ValueError(f"DraftProposer needs method 'draft' with a model, got {spec}")
        max_len = target.model.max_model_len
        try:
            draft = EngineArgs(
                model=spec.model,
                device=target.device.type,
                quantization=spec.quantization,
                max_model_len=max_len,
                block_size=DRAFT_BLOCK_SIZE,
            ).create_config()
        except ValueError as exc:  # named as the draft's, not the target's
            raise ValueError(f"speculative_config.model {spec.model!r}: {exc}") from exc
        mc = draft.model
        if mc.vocab_size != target.model.vocab_size:
            raise ValueError(
                f"speculative_config.model: the draft model's vocabulary must match the "
                f"target's: {mc.vocab_size} != {target.model.vocab_size}"
            )
        per_block = kv_cache_bytes_per_block(
            mc.num_layers, mc.num_kv_heads, mc.head_dim, DRAFT_BLOCK_SIZE, draft.dtype
        )
        per_seq = -(-(max_len + MAX_LOOKAHEAD) // DRAFT_BLOCK_SIZE)
        blocks = per_seq * target.scheduler.max_num_seqs
        if target.cache.num_kv_blocks is not None:  # no more bytes than the target's cache
            budget = target.cache.num_kv_blocks * target.kv_bytes_per_block
            blocks = max(min(blocks, budget // per_block), per_seq)
        caches = allocate_kv_caches(
            mc.num_layers, mc.num_kv_heads, mc.head_dim, blocks, DRAFT_BLOCK_SIZE,
            draft.dtype, draft.device,
        )  # fmt: skip
        model = load_model(
            mc,
            draft.device,
            draft.dtype,
            draft.quantization,
            kernels=target.kernels,
            free_float=True,
        )
        return cls(model, caches, DRAFT_BLOCK_SIZE, draft.device)

    def drop(self, key: Hashable) -> None:
        """Forget a request's cache (finished, aborted, preempted)."""
        held = self._held.pop(key, None)
        if held is not None:
            self._free.extend(held.table)

    def held(self) -> list[Hashable]:
        """The keys of the requests whose K/V the draft cache holds."""
        return list(self._held)

    @torch.inference_mode()
    def propose(
        self, batch: Sequence[tuple[Hashable, Sequence[int], DraftSampling]], k: int
    ) -> list[tuple[list[int], Tensor | None]]:
        """For each ``(key, token_ids, sampling)``: ``k`` drafts to follow ``token_ids``
        and, for a sampled request, their distributions [k, V] (None when greedy). A
        request the cache has no room for gets no drafts."""
        out: list[tuple[list[int], Tensor | None]] = [([], None) for _ in batch]
        live: list[int] = []  # indices of the batch that draft this call
        feed: list[list[int]] = []
        for i, (key, tokens, _) in enumerate(batch):
            if not tokens or k < 1:
                continue
            held = self._held.setdefault(key, _Cache())
            done = _common(held.fed, tokens)
            del held.fed[done:]
            if not self._reserve(held, len(tokens) + k - 1):
                self.drop(key)
                continue
            live.append(i)
            feed.append(list(tokens[done:]))
        probs: list[list[Tensor]] = [[] for _ in batch]
        for _ in range(k):
            if not live:
                break
            logits = self._forward([batch[i][0] for i in live], feed)  # [B, V]
            for row, i in enumerate(live):
                token, p = _choose(logits[row], batch[i][2], len(out[i][0]))
                out[i][0].append(token)
                if p is not None:
                    probs[i].append(p)
            feed = [[out[i][0][-1]] for i in live]
        return [(d, torch.stack(probs[i]) if probs[i] else None) for i, (d, _) in enumerate(out)]

    def _reserve(self, held: _Cache, num_tokens: int) -> bool:
        need = -(-num_tokens // self.block_size) - len(held.table)
        if need > len(self._free):
            return False
        held.table.extend(self._free.popleft() for _ in range(max(need, 0)))
        return True

    def _forward(self, keys: list[Hashable], feed: list[list[int]]) -> Tensor:
        """One draft forward over each request's new tokens; logits at each one's last."""
        rows = [(self._held[key], tokens) for key, tokens in zip(keys, feed)]
        # prefills first, then decodes (one token after context): the metadata's layout
        order = sorted(range(len(rows)), key=lambda j: _is_decode(*rows[j]))
        ids: list[int] = []
        positions: list[int] = []
        lens: list[int] = []
        ends: list[int] = []
        for j in order:
            held, tokens = rows[j]
            start = len(held.fed)
            ids += tokens
            positions += range(start, start + len(tokens))
            lens.append(len(tokens))
            held.fed += tokens
            ends.append(len(ids) - 1)
        dev = self.device
        meta = build_metadata(
            lens, [len(rows[j][0].fed) for j in order], [rows[j][0].table for j in order],
            self.block_size, device=dev,
        )  # fmt: skip
        hidden = self.model.forward(
            torch.tensor(ids, dtype=torch.int64, device=dev),
            torch.tensor(positions, dtype=torch.int64, device=dev),
            self.caches,
            meta,
        )
        logits = self.model.compute_logits(hidden[torch.tensor(ends, device=dev)]).float()
        back = torch.empty(len(order), dtype=torch.int64, device=dev)
        back[torch.tensor(order, device=dev)] = torch.arange(len(order), device=dev)
        return logits[back]  # rows in the callers' order


MAX_LOOKAHEAD = 16  # the most drafts a step proposes (SpeculativeConfig's limit)


def _is_decode(held: _Cache, tokens: list[int]) -> bool:
    return len(tokens) == 1 and bool(held.fed)


def _common(fed: list[int], tokens: Sequence[int]) -> int:
    """How many leading tokens of ``tokens`` the cache holds (leaving at least one to feed:
    the draft needs logits at the last token)."""
    n = min(len(fed), len(tokens) - 1)
    if fed[:n] == list(tokens[:n]):
        return n
    i = 0
    while i < n and fed[i] == tokens[i]:
        i += 1
    return i


def _choose(logits: Tensor, how: DraftSampling, index: int) -> tuple[int, Tensor | None]:
    """A greedy draft, or a draw from the temperature-scaled distribution with it."""
    if how.temperature == 0:
        return int(logits.argmax()), None
    probs = (logits / how.temperature).softmax(dim=-1)
    gen = None
    if how.seed is not None:
        gen = torch.Generator(device=logits.device)
        gen.manual_seed((how.seed + index) & ((1 << 63) - 1))
    return int(torch.multinomial(probs, 1, generator=gen)), probs

"""The persistent input batch: per-request rows kept between steps.

A request gets a row when the scheduler first hands it over (a
:class:`~tandem.v1.core.step.NewRequest`) and keeps it until the scheduler drops its
key (finished, aborted or preempted); each step only appends the tokens it sampled.
Sampling parameters live in ``[rows]`` tensors, penalty state (prompt mask, output
counts) in ``[rows, V]`` tensors, so the sampler gathers a step's rows with one index
instead of per-request Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tandem.core.inputs.engine_request import SamplingSpec
from tandem.v1.core.step import NewRequest

if TYPE_CHECKING:
    from tandem.core.structured.compiler import Grammars
    from tandem.core.structured.state import GrammarState


class InputBatch:
    def __init__(
        self,
        max_rows: int,
        max_model_len: int,
        vocab_size: int,
        grammars: Callable[[], Grammars] | None = None,
    ) -> None:
        self._grammars = grammars  # the compiled grammars, built on first use
        self.max_rows = max_rows
        self.vocab_size = vocab_size
        self.rows: dict[str, int] = {}
        self.free_rows = list(range(max_rows - 1, -1, -1))
        self.token_ids = torch.zeros((max_rows, max_model_len), dtype=torch.int64)
        self.num_tokens = [0] * max_rows
        f32 = dict(dtype=torch.float32)
        self.temperature = torch.zeros(max_rows, **f32)
        self.top_p = torch.ones(max_rows, **f32)
        self.top_k = torch.zeros(max_rows, dtype=torch.int64)
        self.min_p = torch.zeros(max_rows, **f32)
        self.presence = torch.zeros(max_rows, **f32)
        self.frequency = torch.zeros(max_rows, **f32)
        self.repetition = torch.ones(max_rows, **f32)
        self.seeds = torch.zeros(max_rows, dtype=torch.int64)
        self.prompt_mask = torch.zeros((max_rows, vocab_size), dtype=torch.bool)
        self.output_counts = torch.zeros((max_rows, vocab_size), dtype=torch.int32)
        self.specs: list[SamplingSpec | None] = [None] * max_rows
        self.grammars: list[GrammarState | None] = [None] * max_rows  # structured outputs

    def add(self, new: NewRequest) -> int:
        """Give the request a row and fill its state; on bad values, raise and keep none."""
        if new.key in self.rows:
            raise ValueError(f"request {new.key!r} already has a row")
        if not self.free_rows:
            raise RuntimeError(f"input batch is full ({self.max_rows} rows)")
        row = self.free_rows.pop()
        self.rows[new.key] = row
        try:
            self._fill(row, new)
        except BaseException:
            self.remove(new.key)
            raise
        return row

    def _fill(self, row: int, new: NewRequest) -> None:
        tokens = torch.tensor(new.token_ids, dtype=torch.int64)
        self.token_ids[row, : len(tokens)] = tokens
        self.num_tokens[row] = len(tokens)
        s = new.sampling
        self.specs[row] = s
        self.temperature[row] = s.temperature
        self.top_p[row] = s.top_p
        # a k past the vocabulary keeps every token; below 0 stays invalid for the kernel
        self.top_k[row] = max(min(s.top_k, self.vocab_size), -1)
        self.min_p[row] = s.min_p
        self.presence[row] = s.presence_penalty
        self.frequency[row] = s.frequency_penalty
        self.repetition[row] = s.repetition_penalty
        self.seeds[row] = new.seed
        self.prompt_mask[row].zero_()
        self.output_counts[row].zero_()
        prompt = tokens[: new.num_prompt_tokens].clamp(0, self.vocab_size - 1)
        self.prompt_mask[row, prompt] = True
        out = tokens[new.num_prompt_tokens :]
        if out.numel():
            self.output_counts[row].scatter_add_(0, out, torch.ones_like(out, dtype=torch.int32))
        if s.grammar is not None:  # back after a preemption: replayed over its output
            if self._grammars is None:
                raise ValueError("this worker has no grammar support for structured outputs")
            self.grammars[row] = self._grammars().matcher(s.grammar, out.tolist())

    def remove(self, key: str) -> None:
        row = self.rows.pop(key, None)
        if row is not None:
            self.specs[row] = None
            self.grammars[row] = None
            self.free_rows.append(row)

    def append(self, rows: Tensor, tokens: Tensor) -> None:
        """Record one new token per row. rows, tokens: [B] int64."""
        cols = torch.tensor([self.num_tokens[r] for r in rows.tolist()], dtype=torch.int64)
        self.token_ids[rows, cols] = tokens
        self.output_counts.index_put_(
            (rows, tokens), torch.ones_like(tokens, dtype=torch.int32), accumulate=True
        )
        for r in rows.tolist():
            self.num_tokens[r] += 1

"""The persistent input batch: per-request rows kept between steps.

A request gets a row when it is scheduled and keeps it until it finishes or is
preempted; each step only appends the new tokens of its rows. Sampling parameters
live in ``[rows]`` tensors, penalty state (prompt mask, output counts) in ``[rows, V]``
tensors, so the sampler gathers a step's rows with one index instead of per-request
Python.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.v1.core.request import Request


class InputBatch:
    def __init__(self, max_rows: int, max_model_len: int, vocab_size: int) -> None:
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
        self.requests: list[Request | None] = [None] * max_rows

    def row(self, req: Request) -> int:
        """The request's row, creating it (and filling its state) when new."""
        row = self.rows.get(req.key)
        if row is not None:
            return row
        if not self.free_rows:
            raise RuntimeError(f"input batch is full ({self.max_rows} rows)")
        row = self.free_rows.pop()
        self.rows[req.key] = row
        self.requests[row] = req
        tokens = req.all_token_ids
        self.token_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
        self.num_tokens[row] = len(tokens)
        s = req.sampling
        self.temperature[row] = s.temperature
        self.top_p[row] = s.top_p
        self.top_k[row] = s.top_k
        self.min_p[row] = s.min_p
        self.presence[row] = s.presence_penalty
        self.frequency[row] = s.frequency_penalty
        self.repetition[row] = s.repetition_penalty
        self.seeds[row] = req.seed
        self.prompt_mask[row].zero_()
        self.output_counts[row].zero_()
        ids = torch.tensor(req.prompt_token_ids, dtype=torch.int64).clamp(0, self.vocab_size - 1)
        self.prompt_mask[row, ids] = True
        if req.output_token_ids:
            out = torch.tensor(req.output_token_ids, dtype=torch.int64)
            self.output_counts[row].scatter_add_(0, out, torch.ones_like(out, dtype=torch.int32))
        return row

    def remove(self, key: str) -> None:
        row = self.rows.pop(key, None)
        if row is not None:
            self.requests[row] = None
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

"""Logprobs as the OpenAI completions API and vLLM's ``prompt_logprobs`` show them.

The engines give one ``{token id: Logprob}`` dict per position: the token that is there
(sampled, or the prompt's own) plus the top k by rank. The legacy completions shape is
four parallel lists (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``),
the prompt's positions first under ``echo`` (the first has no logprob: nothing precedes
it). ``text_offset`` is each token's start in the choice's ``text``: the running sum of
the tokens' decoded lengths, special tokens (which the text leaves out) counting 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tandem.core.outputs.request_output import CompletionOutput, Logprob, RequestOutput

FLOOR = -9999.0  # JSON has no -inf: a logprob below this is sent as this
Decode = Callable[[int, bool], str]  # (token id, skip special tokens) -> text


def finite(value: float) -> float:
    return value if math.isfinite(value) and value > FLOOR else FLOOR


def pick(entry: dict[int, Logprob], actual: int, k: int) -> dict[int, Logprob]:
    """The position's entries that ``k`` top logprobs ask for, with the actual token."""
    return {t: lp for t, lp in entry.items() if t == actual or (lp.rank or k + 1) <= k}


def prompt_logprobs(out: RequestOutput, k: int) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's ``prompt_logprobs``: per prompt token ``None`` (the first) or
    ``{token id: {logprob, rank, decoded_token}}``, the top ``k`` and the token itself."""
    rows: list[dict[str, dict[str, Any]] | None] = []
    entries = out.prompt_logprobs or []
    for j, tok in enumerate(out.prompt_token_ids):
        entry = entries[j] if j < len(entries) else None
        if entry is None:
            rows.append(None)
            continue
        rows.append(
            {
                str(t): {
                    "logprob": finite(lp.logprob),
                    "rank": lp.rank,
                    "decoded_token": lp.decoded_token,
                }
                for t, lp in pick(entry, tok, k).items()
            }
        )
    return rows


@dataclass(slots=True)
class LegacyLogprobs:
    """The completions API's four lists for one choice, built token by token."""

    decode: Decode
    offset: int = 0  # where the next token starts in the choice's text
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)

    def _add(self, tok: int, entry: dict[int, Logprob] | None, k: int) -> None:
        chosen = entry.get(tok) if entry is not None else None
        shown = chosen.decoded_token if chosen is not None else None
        self.tokens.append(shown if shown is not None else self.decode(tok, False))
        self.token_logprobs.append(finite(chosen.logprob) if chosen is not None else None)
        if entry is None:
            self.top_logprobs.append(None)
        else:
            tops = pick(entry, tok, k).values()
            self.top_logprobs.append({lp.decoded_token or "": finite(lp.logprob) for lp in tops})
        self.text_offset.append(self.offset)
        self.offset += len(self.decode(tok, True))

    def add_prompt(self, out: RequestOutput, k: int) -> None:
        entries = out.prompt_logprobs or []
        for j, tok in enumerate(out.prompt_token_ids):
            self._add(tok, entries[j] if j < len(entries) else None, k)

    def add_sample(self, comp: CompletionOutput, k: int) -> None:
        entries = comp.logprobs or []
        for j, tok in enumerate(comp.token_ids):
            self._add(tok, entries[j] if j < len(entries) else None, k)

    def take(self) -> dict[str, Any]:
        """The lists so far (then empty: a stream sends each token once)."""
        body = {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }
        self.tokens, self.token_logprobs, self.top_logprobs, self.text_offset = [], [], [], []
        return body


def chat_logprobs(comp: CompletionOutput, k: int) -> dict[str, Any] | None:
    """The chat API's ``logprobs.content``: each token with its top ``k``."""
    if comp.logprobs is None:
        return None
    content = []
    for tok, entry in zip(comp.token_ids, comp.logprobs):
        best = sorted(entry.values(), key=lambda lp: lp.rank or 0)[:k]
        chosen = entry[tok]
        content.append(
            {
                "token": chosen.decoded_token,
                "logprob": finite(chosen.logprob),
                "bytes": None,
                "top_logprobs": [
                    {"token": lp.decoded_token, "logprob": finite(lp.logprob), "bytes": None}
                    for lp in best
                ],
            }
        )
    return {"content": content}

"""OpenAI response bodies and stream chunks, built from ``RequestOutput``s.

``CompletionShape`` makes ``text_completion`` objects, ``ChatShape``
``chat.completion`` / ``chat.completion.chunk`` ones; the app picks one per endpoint.
Choice ``index`` runs over prompts, then samples: ``prompt_index * n + sample index``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tandem.core.outputs import CompletionOutput, RequestOutput

FINISH = {"stop": "stop", "length": "length"}  # an aborted sample has none


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish(comp: CompletionOutput) -> str | None:
    return FINISH.get(comp.finish_reason or "")


def _empty(comp: CompletionOutput) -> bool:
    return not comp.text and not comp.token_ids and comp.finish_reason is None


@dataclass(slots=True)
class CompletionShape:
    model: str
    top_logprobs: int | None = None  # asked per token (None: no logprobs)
    prefix: str = "cmpl"
    prompt_param: str = "prompt"
    kind: str = "text_completion"

    def where(self, count: int) -> list[str]:
        """How errors name each prompt of a body."""
        return ["prompt"] if count == 1 else [f"prompt[{i}]" for i in range(count)]

    def _head(self, rid: str, now: int) -> dict[str, Any]:
        return {"id": rid, "object": self.kind, "created": now, "model": self.model}

    def logprobs(self, comp: CompletionOutput) -> dict[str, Any] | None:
        if comp.logprobs is None:
            return None
        tokens, values, tops = [], [], []
        for tok, entry in zip(comp.token_ids, comp.logprobs):
            tokens.append(entry[tok].decoded_token)
            values.append(entry[tok].logprob)
            tops.append({lp.decoded_token: lp.logprob for lp in entry.values()})
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops}

    def choice(self, index: int, comp: CompletionOutput) -> dict[str, Any]:
        return {
            "index": index,
            "text": comp.text,
            "logprobs": self.logprobs(comp),
            "finish_reason": _finish(comp),
        }

    def whole(self, rid: str, now: int, finals: list[RequestOutput], n: int) -> dict[str, Any]:
        choices = [
            self.choice(i * n + c.index, c) for i, out in enumerate(finals) for c in out.outputs
        ]
        prompt = sum(len(o.prompt_token_ids) for o in finals)
        made = sum(len(c.token_ids) for o in finals for c in o.outputs)
        return {**self._head(rid, now), "choices": choices, "usage": usage(prompt, made)}

    def opening(self, rid: str, now: int, count: int) -> dict[str, Any] | None:
        return None

    def chunk(self, rid: str, now: int, index: int, comp: CompletionOutput) -> dict | None:
        if _empty(comp):
            return None
        return {**self._head(rid, now), "choices": [self.choice(index, comp)]}

    def usage_chunk(self, rid: str, now: int, prompt: int, made: int) -> dict[str, Any]:
        return {**self._head(rid, now), "choices": [], "usage": usage(prompt, made)}


@dataclass(slots=True)
class ChatShape(CompletionShape):
    prefix: str = "chatcmpl"
    prompt_param: str = "messages"
    kind: str = "chat.completion"

    def where(self, count: int) -> list[str]:
        return ["messages"] * count

    def logprobs(self, comp: CompletionOutput) -> dict[str, Any] | None:
        if comp.logprobs is None:
            return None
        content = []
        for tok, entry in zip(comp.token_ids, comp.logprobs):
            best = sorted(entry.values(), key=lambda lp: lp.rank or 0)[: self.top_logprobs or 0]
            tops = [
                {"token": lp.decoded_token, "logprob": lp.logprob, "bytes": None} for lp in best
            ]
            chosen = entry[tok]
            content.append(
                {
                    "token": chosen.decoded_token,
                    "logprob": chosen.logprob,
                    "bytes": None,
                    "top_logprobs": tops,
                }
            )
        return {"content": content}

    def whole(self, rid: str, now: int, finals: list[RequestOutput], n: int) -> dict[str, Any]:
        out = finals[0]
        choices = [
            {
                "index": c.index,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": self.logprobs(c),
                "finish_reason": _finish(c),
            }
            for c in out.outputs
        ]
        made = sum(len(c.token_ids) for c in out.outputs)
        usage_ = usage(len(out.prompt_token_ids), made)
        return {**self._head(rid, now), "choices": choices, "usage": usage_}

    def _frame(self, rid: str, now: int, choices: list[dict[str, Any]]) -> dict[str, Any]:
        head = {**self._head(rid, now), "object": "chat.completion.chunk"}
        return {**head, "choices": choices}

    def opening(self, rid: str, now: int, count: int) -> dict[str, Any] | None:
        delta = {"role": "assistant", "content": ""}
        return self._frame(
            rid,
            now,
            [
                {"index": i, "delta": delta, "logprobs": None, "finish_reason": None}
                for i in range(count)
            ],
        )

    def chunk(self, rid: str, now: int, index: int, comp: CompletionOutput) -> dict | None:
        if _empty(comp):
            return None
        choice = {
            "index": index,
            "delta": {"content": comp.text} if comp.text else {},
            "logprobs": self.logprobs(comp),
            "finish_reason": _finish(comp),
        }
        return self._frame(rid, now, [choice])

    def usage_chunk(self, rid: str, now: int, prompt: int, made: int) -> dict[str, Any]:
        return {**self._frame(rid, now, []), "usage": usage(prompt, made)}

"""OpenAI response bodies and stream chunks, built from ``RequestOutput``s.

``CompletionShape`` makes ``text_completion`` objects, ``ChatShape``
``chat.completion`` / ``chat.completion.chunk`` ones; the service makes one per HTTP
request. Choice ``index`` runs over prompts, then samples: ``prompt_index * n + sample
index``. Under ``echo`` a choice's first text (whole or first chunk) starts with the
prompt, and its logprobs with the prompt's; ``max_tokens: 0`` is served by generating
one token and leaving it out (:meth:`CompletionShape.view`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tandem.core.outputs.request_output import CompletionOutput, RequestOutput
from tandem.core.server.logprob_view import LegacyLogprobs, chat_logprobs, prompt_logprobs
from tandem.core.server.tool_view import ToolView
from tandem.core.server.tools import ToolPlan

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
    tokenizer: Any = None  # decodes prompts given as ids and tokens for their offsets
    logprobs: int | None = None  # top logprobs per token (None: none asked)
    echo: bool = False
    zero: bool = False  # max_tokens 0: the one token generated is not shown
    prompt_logprobs: int | None = None  # vLLM's field (None: not asked)
    include_usage: bool = False  # a stream ends with a usage chunk
    prefix: str = "cmpl"
    prompt_param: str = "prompt"
    kind: str = "text_completion"
    _started: dict[int, LegacyLogprobs | None] = field(default_factory=dict)

    def where(self, count: int) -> list[str]:
        """How errors name each prompt of a body."""
        return ["prompt"] if count == 1 else [f"prompt[{i}]" for i in range(count)]

    def view(self, out: RequestOutput) -> RequestOutput:
        """``out`` as the client sees it (under ``max_tokens: 0``, without its token)."""
        if not self.zero:
            return out
        shown = [
            replace(
                c,
                text="",
                token_ids=[],
                logprobs=[] if c.logprobs is not None else None,
                cumulative_logprob=None,
                finish_reason="length" if c.finish_reason in FINISH else c.finish_reason,
                stop_reason=None,
            )
            for c in out.outputs
        ]
        return replace(out, outputs=shown)

    def _decode(self, token: int, skip_special: bool) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=skip_special)

    def _prompt_text(self, out: RequestOutput) -> str:
        if out.prompt is not None:
            return out.prompt
        return self.tokenizer.decode(out.prompt_token_ids)

    def _head(self, rid: str, now: int) -> dict[str, Any]:
        return {"id": rid, "object": self.kind, "created": now, "model": self.model}

    def choice(self, index: int, out: RequestOutput, comp: CompletionOutput) -> dict[str, Any]:
        """One choice: the whole of it, or the next piece of a stream."""
        first = index not in self._started
        if first:
            wanted = self.logprobs is not None
            self._started[index] = LegacyLogprobs(self._decode) if wanted else None
        lps = self._started[index]
        text = comp.text
        if first and self.echo:
            echoed = self._prompt_text(out)
            text = echoed + text
            if lps is not None:
                lps.add_prompt(out, self.logprobs or 0)
                lps.offset = len(echoed)  # the completion starts right after the prompt
        if lps is not None:
            lps.add_sample(comp, self.logprobs or 0)
        body: dict[str, Any] = {
            "index": index,
            "text": text,
            "logprobs": lps.take() if lps is not None else None,
            "finish_reason": _finish(comp),
        }
        if self.prompt_logprobs is not None:
            body["prompt_logprobs"] = prompt_logprobs(out, self.prompt_logprobs) if first else None
        return body

    def whole(self, rid: str, now: int, finals: list[RequestOutput], n: int) -> dict[str, Any]:
        choices = [
            self.choice(i * n + c.index, out, c)
            for i, out in enumerate(finals)
            for c in out.outputs
        ]
        prompt = sum(len(o.prompt_token_ids) for o in finals)
        made = sum(len(c.token_ids) for o in finals for c in o.outputs)
        return {**self._head(rid, now), "choices": choices, "usage": usage(prompt, made)}

    def opening(self, rid: str, now: int, count: int) -> dict[str, Any] | None:
        return None

    def chunk(
        self, rid: str, now: int, index: int, out: RequestOutput, comp: CompletionOutput
    ) -> dict | None:
        if _empty(comp) and (index in self._started or not self.echo):
            return None
        return {**self._head(rid, now), "choices": [self.choice(index, out, comp)]}

    def usage_chunk(self, rid: str, now: int, prompt: int, made: int) -> dict[str, Any]:
        return {**self._head(rid, now), "choices": [], "usage": usage(prompt, made)}


@dataclass(slots=True)
class ChatShape(CompletionShape):
    prefix: str = "chatcmpl"
    prompt_param: str = "messages"
    kind: str = "chat.completion"
    tools: ToolPlan | None = None  # choices become tool calls (None or mode none: text)
    _prompt_sent: bool = False
    _views: dict[int, ToolView] = field(default_factory=dict)

    def _view(self, index: int) -> ToolView | None:
        if self.tools is None or not self.tools.active:
            return None
        if index not in self._views:
            self._views[index] = ToolView(self.tools)
        return self._views[index]

    def _message(self, comp: CompletionOutput) -> tuple[dict[str, Any], str | None]:
        view = self._view(comp.index)
        if view is None:
            return {"role": "assistant", "content": comp.text}, _finish(comp)
        return view.message(comp.text, _finish(comp))

    def where(self, count: int) -> list[str]:
        return ["messages"] * count

    def _prompt_part(self, out: RequestOutput) -> dict[str, Any]:
        """vLLM's response-level ``prompt_logprobs``, once per response or stream."""
        if self.prompt_logprobs is None or self._prompt_sent:
            return {}
        self._prompt_sent = True
        return {"prompt_logprobs": prompt_logprobs(out, self.prompt_logprobs)}

    def whole(self, rid: str, now: int, finals: list[RequestOutput], n: int) -> dict[str, Any]:
        out = finals[0]
        choices = []
        for c in out.outputs:
            message, reason = self._message(c)
            choices.append(
                {
                    "index": c.index,
                    "message": message,
                    "logprobs": chat_logprobs(c, self.logprobs or 0),
                    "finish_reason": reason,
                }
            )
        made = sum(len(c.token_ids) for c in out.outputs)
        usage_ = usage(len(out.prompt_token_ids), made)
        head = self._head(rid, now)
        return {**head, "choices": choices, "usage": usage_, **self._prompt_part(out)}

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

    def chunk(
        self, rid: str, now: int, index: int, out: RequestOutput, comp: CompletionOutput
    ) -> dict | None:
        if _empty(comp):
            return None
        view = self._view(index)
        if view is None:
            delta, reason = ({"content": comp.text} if comp.text else {}), _finish(comp)
        else:
            delta, reason = view.delta(comp.text, _finish(comp))
        choice = {
            "index": index,
            "delta": delta,
            "logprobs": chat_logprobs(comp, self.logprobs or 0),
            "finish_reason": reason,
        }
        return {**self._frame(rid, now, [choice]), **self._prompt_part(out)}

    def usage_chunk(self, rid: str, now: int, prompt: int, made: int) -> dict[str, Any]:
        return {**self._frame(rid, now, []), "usage": usage(prompt, made)}

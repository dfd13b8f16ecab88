"""The OpenAI API's request bodies (pydantic) and how they become ``SamplingParams``.

A field this server does not know is ignored (the route names it in a warning and the
``X-Tandem-Ignored-Fields`` header; ``--strict-fields`` refuses it instead). A field it
knows but cannot honour yet (:data:`NOT_YET`) is refused by name when it asks for
something, so that a client asking for a tool call or a JSON schema is never answered
with free text as if it had been honoured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tandem.core.sampling_params import SamplingParams
from tandem.core.validate import RequestError

MAX_LOGPROBS = 20


def _set(value: Any) -> bool:
    return value is not None and value != {} and value != [] and value != ""


# fields of the OpenAI API (and vLLM's) that need the engines' sampler: refused while
# they ask for something; an implementation declares the field and leaves this table
NOT_YET: dict[str, Callable[[Any], bool]] = {
    "response_format": lambda v: _set(v) and not (isinstance(v, dict) and v.get("type") == "text"),
    "tools": _set,
    "tool_choice": lambda v: _set(v) and v != "none",
    "functions": _set,
    "function_call": lambda v: _set(v) and v != "none",
    "structured_outputs": _set,
    "guided_json": _set,
    "guided_regex": _set,
    "guided_choice": _set,
    "guided_grammar": _set,
    "best_of": lambda v: _set(v) and v != 1,
    "suffix": _set,
}


class _Open(BaseModel):
    """A body part that keeps unknown fields aside (``model_extra``) instead of failing."""

    model_config = ConfigDict(extra="allow")

    def unknown(self, at: str = "") -> list[str]:
        """Every field this server does not read, as a path (``messages[0].tool_call_id``)."""
        found = [f"{at}{name}" for name in (self.model_extra or {})]
        for name in type(self).model_fields:
            value = getattr(self, name)
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                if isinstance(item, _Open):
                    where = f"{at}{name}[{i}]." if isinstance(value, list) else f"{at}{name}."
                    found += item.unknown(where)
        return found

    def refuse_not_yet(self) -> None:
        for name, asks in NOT_YET.items():
            value = (self.model_extra or {}).get(name)
            if asks(value):
                raise RequestError(name, f"{name} is not supported by this server yet")


class _Body(_Open):
    model: str | None = None
    # sampling fields left out take the model's defaults (its generation_config.json)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    user: str | None = None
    # beyond OpenAI, as vLLM's server accepts them
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    # OpenAI's shape: token id (a JSON key, so a string) -> bias in [-100, 100]
    logit_bias: dict[str, float] | None = None

    def sampling(
        self, defaults: SamplingParams, max_tokens: int | None, logprobs: int | None
    ) -> SamplingParams:
        """The body's params over the model's ``defaults`` (a field left out keeps its
        default; ``max_tokens`` as the endpoint reads it, 0 made 1: the token is dropped)."""
        given = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
        }
        return defaults.replace(
            **{k: v for k, v in given.items() if v is not None},
            n=self.n,
            seed=self.seed,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
            ignore_eos=self.ignore_eos,
            max_tokens=1 if max_tokens == 0 else max_tokens,
            min_tokens=0 if max_tokens == 0 else self.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=self.prompt_logprobs_asked,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            logit_bias=self.logit_bias,
        )

    @property
    def prompt_logprobs_asked(self) -> int | None:
        """How many top logprobs each prompt position needs (None: none)."""
        return self.prompt_logprobs

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class CompletionRequest(_Body):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=0)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False

    @property
    def prompt_logprobs_asked(self) -> int | None:
        wanted = [k for k in (self.prompt_logprobs, self.echo_logprobs) if k is not None]
        return max(wanted) if wanted else None

    @property
    def echo_logprobs(self) -> int | None:
        """The prompt's logprobs that ``echo`` with ``logprobs`` shows."""
        return self.logprobs if self.echo else None

    def prompts(self) -> list[str | list[int]]:
        """The prompts of the body (a batch when ``prompt`` is a list of them)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise RequestError(
                "prompt", "prompt is empty: give a string, a list of token ids or a list of those"
            )
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


class ChatMessage(_Open):
    role: Literal["system", "user", "assistant"]
    content: str
    name: str | None = None

    def turn(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


class ChatCompletionRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def top_k_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

"""The OpenAI API's request bodies (pydantic) and how they become ``SamplingParams``.

Only what Tandem can honour is accepted; an unknown field is refused by name (a client
that sends ``best_of`` or ``suffix`` learns it is not supported instead of being ignored).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tandem.core.sampling_params import SamplingParams
from tandem.core.validate import RequestError


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

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

    def sampling(
        self, defaults: SamplingParams, max_tokens: int | None, logprobs: int | None
    ) -> SamplingParams:
        """The body's params over the model's ``defaults`` (a field left out keeps its
        default; ``max_tokens`` as the endpoint reads it)."""
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
            max_tokens=max_tokens,
            min_tokens=self.min_tokens,
            logprobs=logprobs,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
        )

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class CompletionRequest(_Body):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False

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


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str
    name: str | None = None


class ChatCompletionRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def top_k_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


def error_body(
    message: str, param: str | None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}

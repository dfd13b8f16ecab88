"""The response bodies the server sends, declared for its OpenAPI description.

The routes build plain dicts (:mod:`~tandem.core.server.responses`); these models say
what those dicts hold, so that clients and schema-based fuzzers can check every answer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Finish = Literal["stop", "length"] | None
ChatFinish = Literal["stop", "length", "tool_calls"] | None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | int | None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok"]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class PromptLogprob(BaseModel):
    logprob: float
    rank: int | None
    decoded_token: str | None


PromptLogprobs = list[dict[str, PromptLogprob] | None] | None


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Finish
    prompt_logprobs: PromptLogprobs = None


class CompletionResponse(BaseModel):
    """A whole completion; streamed, each ``data:`` event holds one of these (with one
    choice, and ``usage`` in the last one when ``stream_options.include_usage``)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text


class ToolCall(BaseModel):
    id: str
    type: Literal["function"]
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None  # None when the message is tool calls only
    tool_calls: list[ToolCall] | None = None


class TopLogprob(BaseModel):
    token: str | None
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: ChatFinish


class ChatCompletionResponse(BaseModel):
    """A whole chat completion; streamed, each ``data:`` event is a
    ``chat.completion.chunk`` with ``delta`` in place of ``message``."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_logprobs: PromptLogprobs = None


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeResponse(BaseModel):
    prompt: str

"""``/tokenize`` and ``/detokenize`` in vLLM's shapes, and the bound on prompt length.

``POST /tokenize`` takes ``{"prompt": ...}`` (``add_special_tokens``, default true) or
``{"messages": [...]}`` (``add_generation_prompt``, default true) and answers ``{count,
max_model_len, tokens, token_strs}`` (``token_strs`` with ``return_token_strs``);
``POST /detokenize`` takes ``{"tokens": [...]}`` and answers ``{"prompt": text}``.

:class:`PromptBound`: no token of a vocabulary is longer than its longest entry, so a
prompt of more than ``max_model_len`` x that length x :data:`SLACK` characters cannot fit
and is refused before it is tokenized (a 50 MB prompt would hold a CPU for minutes).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tandem.core.inputs.context_limit import longer_context
from tandem.core.server.field_types import NonEmptyText, TokenId
from tandem.core.server.protocol import ChatMessage, _Open
from tandem.core.validate import ContextLengthExceeded, RequestError

SLACK = 4  # room for normalizers that fold several characters into one


class TokenizeCompletionRequest(_Open):
    model: str | None = None
    prompt: NonEmptyText
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChatRequest(_Open):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(_Open):
    model: str | None = None
    tokens: list[TokenId]


def tokenize_body(raw: Any) -> type[_Open]:
    """Which of the two ``/tokenize`` bodies ``raw`` (parsed JSON) is."""
    if isinstance(raw, dict) and "messages" in raw and "prompt" not in raw:
        return TokenizeChatRequest
    return TokenizeCompletionRequest


def tokenize(tokenizer: Any, body: _Open, max_model_len: int) -> dict[str, Any]:
    """The answer to a ``/tokenize`` body (run off the event loop: it tokenizes)."""
    if isinstance(body, TokenizeChatRequest):
        turns = [m.turn() for m in body.messages]
        try:
            ids = tokenizer.apply_chat_template(turns, body.add_generation_prompt)
        except (TypeError, ValueError) as exc:
            raise RequestError("messages", str(exc)) from None
    else:
        assert isinstance(body, TokenizeCompletionRequest)
        ids = tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    out: dict[str, Any] = {"count": len(ids), "max_model_len": max_model_len, "tokens": ids}
    out["token_strs"] = tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
    return out


def detokenize(tokenizer: Any, body: DetokenizeRequest) -> dict[str, Any]:
    bad = next((t for t in body.tokens if not 0 <= t < len(tokenizer)), None)
    if bad is not None:
        raise RequestError(
            "tokens", f"token id {bad} is outside the vocabulary [0, {len(tokenizer)})"
        )
    return {"prompt": tokenizer.decode(body.tokens)}


class PromptBound:
    """The most characters a prompt may have and still fit ``max_model_len`` tokens."""

    def __init__(self, tokenizer: Any, max_model_len: int, model_limit: int | None = None) -> None:
        vocab = tokenizer.hf.get_vocab() if hasattr(tokenizer, "hf") else {}
        longest = max((len(t) for t in vocab), default=0)
        self.chars = max_model_len * max(longest, 1) * SLACK if longest else None
        self.max_model_len = max_model_len
        self.model_limit = model_limit  # the model's own longest context

    def check(self, text: str, field: str) -> None:
        """RequestError naming ``field`` when ``text`` cannot fit, before tokenizing."""
        if self.chars is not None and len(text) > self.chars:
            raise ContextLengthExceeded(
                field,
                f"{field} has {len(text)} characters: more than max_model_len="
                f"{self.max_model_len} tokens can hold ({self.chars} characters at most; "
                f"{longer_context(self.max_model_len, self.model_limit)})",
            )

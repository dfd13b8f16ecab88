"""``SpeculativeConfig``: how a request's next tokens are guessed before the target
model checks them in one step.

Two ways in, both checked here: a dict (``speculative_config={"method": "ngram",
"num_speculative_tokens": 4}`` or ``{"model": path, ...}``) or the plain engine
arguments ``speculative_model=`` / ``num_speculative_tokens=``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Literal

from tandem.core.validate import RequestError, RequestTypeError, check_int

METHODS = ("ngram", "draft")
MAX_SPECULATIVE_TOKENS = 16
DEFAULT_SPECULATIVE_TOKENS = 4
DRAFT_QUANTIZATIONS = (None, "int8", "gguf")


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """``method``: "ngram" (drafts copied from an earlier occurrence of the request's
    last tokens) or "draft" (a small model with the target's vocabulary proposes);
    ``num_speculative_tokens``: drafts per step (1..16); ``prompt_lookup_min/max``: the
    n-gram lengths tried, longest first; ``model`` / ``quantization``: the draft model."""

    method: Literal["ngram", "draft"]
    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4
    model: str | None = None
    quantization: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise RequestError(
                "speculative_config.method",
                f"speculative_config.method must be one of {', '.join(METHODS)}, "
                f"got {self.method!r}",
            )
        check_int(
            "speculative_config.num_speculative_tokens",
            self.num_speculative_tokens,
            lo=1,
            hi=MAX_SPECULATIVE_TOKENS,
        )
        check_int("speculative_config.prompt_lookup_min", self.prompt_lookup_min, lo=1)
        check_int("speculative_config.prompt_lookup_max", self.prompt_lookup_max, lo=1)
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise RequestError(
                "speculative_config.prompt_lookup_min",
                "speculative_config.prompt_lookup_min must be <= prompt_lookup_max, got "
                f"{self.prompt_lookup_min} > {self.prompt_lookup_max}",
            )
        if self.method == "draft":
            if not isinstance(self.model, (str, os.PathLike)) or not str(self.model):
                raise RequestError(
                    "speculative_config.model",
                    "speculative_config.model must be a draft model path (a model "
                    f"directory or .gguf file) for method 'draft', got {self.model!r}",
                )
            object.__setattr__(self, "model", os.fspath(self.model))
        elif self.model is not None:
            raise RequestError(
                "speculative_config.model",
                f"speculative_config.model is only for method 'draft', got {self.model!r} "
                "with method 'ngram'",
            )
        if self.quantization not in DRAFT_QUANTIZATIONS:
            raise RequestError(
                "speculative_config.quantization",
                "speculative_config.quantization must be one of "
                f"{', '.join(map(str, DRAFT_QUANTIZATIONS))}, got {self.quantization!r}",
            )

    def check_parallel(self, parallel: Any) -> SpeculativeConfig:
        """``self``, unless the engine runs more than one model process: refused, named."""
        for name in ("tensor_parallel_size", "data_parallel_size"):
            size = getattr(parallel, name)
            if size > 1:
                raise RequestError(
                    name, f"speculative decoding runs with {name}=1 only, got {name}={size}"
                )
        return self

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_args(
        cls,
        speculative_config: dict[str, Any] | SpeculativeConfig | None = None,
        speculative_model: str | None = None,
        num_speculative_tokens: int | None = None,
    ) -> SpeculativeConfig | None:
        """The config the three engine arguments ask for, or None (no speculation).

        A dict without "method" means "draft" when it names a "model", else "ngram";
        ``speculative_model`` alone means method "draft" with 4 tokens; the plain
        arguments may not contradict the dict."""
        if speculative_model is not None and (
            not isinstance(speculative_model, (str, os.PathLike)) or not str(speculative_model)
        ):
            raise RequestTypeError(
                "speculative_model",
                f"speculative_model must be a non-empty path (str) or None, "
                f"got {speculative_model!r}",
            )
        check_int("num_speculative_tokens", num_speculative_tokens, lo=1, none_ok=True)
        if speculative_config is None:
            if speculative_model is None:
                if num_speculative_tokens is not None:
                    raise RequestError(
                        "num_speculative_tokens",
                        "num_speculative_tokens needs speculative_model or "
                        "speculative_config (a method to draft with)",
                    )
                return None
            return cls(
                method="draft",
                model=os.fspath(speculative_model),
                num_speculative_tokens=num_speculative_tokens or DEFAULT_SPECULATIVE_TOKENS,
            )
        if isinstance(speculative_config, SpeculativeConfig):
            given = {f: getattr(speculative_config, f) for f in cls.field_names()}
        elif isinstance(speculative_config, dict):
            given = dict(speculative_config)
        else:
            raise RequestTypeError(
                "speculative_config",
                "speculative_config must be a dict, a SpeculativeConfig or None, got "
                f"{type(speculative_config).__name__}",
            )
        unknown = sorted(set(map(str, given)) - set(cls.field_names()))
        if unknown:
            raise RequestError(
                "speculative_config",
                f"unknown speculative_config key(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(cls.field_names())}",
            )
        _merge(given, "model", speculative_model, "speculative_model")
        _merge(given, "num_speculative_tokens", num_speculative_tokens, "num_speculative_tokens")
        given.setdefault("method", "draft" if given.get("model") is not None else "ngram")
        return cls(**given)


def _merge(given: dict[str, Any], key: str, value: Any, arg: str) -> None:
    if value is None:
        return
    if given.get(key) is not None and given[key] != value:
        raise RequestError(
            arg,
            f"{arg}={value!r} contradicts speculative_config[{key!r}]={given[key]!r}; "
            "give one of them",
        )
    given[key] = value


def check_target(spec: SpeculativeConfig | None, target: Any) -> SpeculativeConfig | None:
    """``spec`` with its draft model's name resolved, once the draft model is found and
    its vocabulary matches the target's (``target``: a ``ModelConfig``)."""
    if spec is None or spec.method != "draft":
        return spec
    from dataclasses import replace

    from tandem.core.catalog.named_models import resolve_model
    from tandem.core.config.model import load_model_config

    try:
        path = resolve_model(spec.model)
        draft = load_model_config(path, names=True)  # its vocabulary, without torch
    except (OSError, ValueError) as exc:
        raise RequestError(
            "speculative_config.model", f"speculative_config.model {spec.model!r}: {exc}"
        ) from exc
    if draft.vocab_size != target.vocab_size:
        raise RequestError(
            "speculative_config.model",
            f"the draft model's vocabulary must match the target's: draft {path!r} has "
            f"vocab_size {draft.vocab_size}, the target {target.vocab_size}",
        )
    return replace(spec, model=path)

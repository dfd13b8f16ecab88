"""The front door: ``LLM(model=DIR, engine=None | "v0" | "v1", **engine_args)``.

The engine is chosen when an ``LLM`` is constructed (``engine`` if given, else the
``TANDEM_ENGINE`` env var, else the default) and found through the ``tandem.engines``
entry points, so nothing about the choice is frozen at import time. Every input of
:meth:`LLM.generate` is validated before the first request reaches the engine.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tandem.core.engines import load_engine_class, resolve_engine_name
from tandem.core.stats import EngineStats


def _token_list(value: Any, where: str) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            f"{where}: prompt_token_ids must be a list of ints, got {type(value).__name__}"
        )
    return list(value)


def _one_prompt(value: Any, i: int) -> str | list[int]:
    where = f"prompt {i}"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        keys = set(value)
        if keys == {"prompt"}:
            return _one_prompt(value["prompt"], i)
        if keys == {"prompt_token_ids"}:
            return _token_list(value["prompt_token_ids"], where)
        raise TypeError(
            f"{where}: a dict prompt must have exactly one key, 'prompt' or "
            f"'prompt_token_ids'; got keys {sorted(map(str, keys))}"
        )
    raise TypeError(
        f"{where} must be a str or a dict with 'prompt' or 'prompt_token_ids', "
        f"got {type(value).__name__}"
    )


def normalize_prompts(prompts: Any) -> list[str | list[int]]:
    """Every accepted prompt form as what the engine's input processor takes: text or ids."""
    if isinstance(prompts, (str, Mapping)):
        prompts = [prompts]
    elif not isinstance(prompts, (list, tuple)):
        raise TypeError(
            "prompts must be a str, a dict {'prompt': ...} / {'prompt_token_ids': [...]}, "
            f"or a list of those; got {type(prompts).__name__}"
        )
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt")
    return [_one_prompt(p, i) for i, p in enumerate(prompts)]


def _one_conversation(messages: Any) -> bool:
    """Whether ``messages`` is one conversation (a list of turns), not a list of them."""
    first = messages[0] if isinstance(messages, (list, tuple)) and messages else None
    return isinstance(first, Mapping)


def normalize_params(params: Any, count: int) -> list[Any]:
    """One SamplingParams per prompt: the default, one shared, or a list of ``count``."""
    from tandem.core.sampling_params import SamplingParams

    if params is None:
        return [SamplingParams() for _ in range(count)]
    if isinstance(params, SamplingParams):
        return [params] * count
    if isinstance(params, (list, tuple)):
        if len(params) != count:
            raise ValueError(
                f"sampling_params has {len(params)} entries but there are {count} prompts; "
                f"give one SamplingParams or exactly one per prompt"
            )
        for i, p in enumerate(params):
            if not isinstance(p, SamplingParams):
                raise TypeError(
                    f"sampling_params[{i}] must be a SamplingParams, got {type(p).__name__}"
                )
        return list(params)
    raise TypeError(
        "sampling_params must be None, a SamplingParams or a list of them, "
        f"got {type(params).__name__}"
    )


class LLM:
    """Offline generation over one engine: ``with LLM(model=DIR) as llm: llm.generate(...)``."""

    def __init__(
        self, model: str | os.PathLike[str], engine: str | None = None, **engine_args: Any
    ) -> None:
        from tandem.core.config import EngineArgs

        if not isinstance(model, (str, os.PathLike)):
            raise TypeError(f"model must be a directory path (str), got {type(model).__name__}")
        self._closed = True  # until the engine exists, shutdown() has nothing to do
        self.engine_name: str = resolve_engine_name(engine)
        self.engine_class: type[Any] = load_engine_class(self.engine_name)
        self.engine_args = EngineArgs.from_kwargs(os.fspath(model), **engine_args)
        self.engine: Any = self.engine_class.from_engine_args(self.engine_args)
        self._closed = False
        self.config = getattr(self.engine, "config", None) or self.engine_args.create_config()
        self._tokenizer: Any = getattr(self.engine, "tokenizer", None)
        self._ids = itertools.count()

    # properties ----------------------------------------------------------------------
    def get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            from tandem.core.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.config.model.tokenizer)
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        return int(self.config.model.max_model_len)

    # generation ----------------------------------------------------------------------
    def generate(
        self,
        prompts: Any,
        sampling_params: Any = None,
        use_tqdm: bool = True,
    ) -> list[Any]:
        """Generate completions for ``prompts``; returns RequestOutputs in input order.

        ``prompts``: a str, a ``{"prompt": str}`` or ``{"prompt_token_ids": [...]}`` dict,
        or a list of those. ``sampling_params``: None (defaults), one SamplingParams for
        all prompts, or a list with one per prompt.
        """
        if self._closed:
            raise RuntimeError("this LLM was shut down; create a new one")
        items = normalize_prompts(prompts)
        params = normalize_params(sampling_params, len(items))
        # each prompt is checked and tokenized once, here, before any reaches the engine
        requests = self.engine.inputs.process_all(
            [
                (f"gen-{next(self._ids)}", item, p, f"prompt {i}")
                for i, (item, p) in enumerate(zip(items, params))
            ]
        )
        added: list[str] = []
        try:
            for req in requests:
                self.engine.add(req)
                added.append(req.request_id)
            finals = self._run({r.request_id for r in requests}, use_tqdm)
        except BaseException:
            for rid in added:
                self.engine.abort_request(rid)
            raise
        return [finals[r.request_id] for r in requests]

    def chat(
        self,
        messages: Any,
        sampling_params: Any = None,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[Any]:
        """Answer conversations through the tokenizer's own chat template.

        ``messages``: one conversation (``[{"role": ..., "content": ...}, ...]``) or a list
        of them. Returns one RequestOutput per conversation, in order.
        """
        if self._closed:
            raise RuntimeError("this LLM was shut down; create a new one")
        conversations = [messages] if _one_conversation(messages) else messages
        if not isinstance(conversations, (list, tuple)) or not conversations:
            raise TypeError(
                "messages must be a conversation (a list of {'role', 'content'} dicts) "
                "or a non-empty list of conversations"
            )
        tokenizer = self.get_tokenizer()
        prompts = [
            {"prompt_token_ids": tokenizer.apply_chat_template(c, add_generation_prompt)}
            for c in conversations
        ]
        return self.generate(prompts, sampling_params, use_tqdm)

    def _run(self, pending: set[str], use_tqdm: bool) -> dict[str, Any]:
        finals: dict[str, Any] = {}
        bar = _progress(len(pending)) if use_tqdm else None
        start, out_tokens = time.perf_counter(), 0
        try:
            while len(finals) < len(pending):
                if not self.engine.has_unfinished_requests():
                    missing = sorted(pending - finals.keys())
                    raise RuntimeError(f"engine stopped before finishing requests {missing}")
                for out in self.engine.step():
                    if out.finished and out.request_id in pending:
                        finals[out.request_id] = out
                        if bar is not None:
                            out_tokens += sum(len(c.token_ids) for c in out.outputs)
                            rate = out_tokens / max(time.perf_counter() - start, 1e-9)
                            bar.set_postfix_str(f"output {rate:.1f} tok/s", refresh=False)
                            bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return finals

    def stats(self) -> EngineStats:
        """The engine's :class:`~tandem.core.stats.EngineStats` now."""
        if self._closed:
            raise RuntimeError("this LLM was shut down; create a new one")
        return self.engine.stats()

    # lifetime ------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Release the engine (its processes, caches). Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self.engine.shutdown()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"LLM(model={self.engine_args.model!r}, engine={self.engine_name!r})"


def _progress(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Processed prompts", unit="req", dynamic_ncols=True)

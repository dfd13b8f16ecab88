"""The front door: ``LLM(model=DIR, engine=None | "v0" | "v1", **engine_args)``.

The engine is chosen when an ``LLM`` is constructed (``engine`` if given, else the
``TANDEM_ENGINE`` env var, else the default; see :mod:`tandem.core.entrypoints.front_door`), so
nothing about the choice is frozen at import time. Every input of :meth:`LLM.generate`
is checked by the front door's input processor before the first request reaches the
engine; the engine takes the checked requests as they are.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tandem.core.engine.protocol import Engine
from tandem.core.engine.stats import EngineStats
from tandem.core.entrypoints.front_door import open_engine
from tandem.core.inputs.processor import InputProcessor, OutputKind
from tandem.core.inputs.prompts import normalize_params, normalize_prompts, one_conversation
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.outputs.request_output import RequestOutput
from tandem.core.validate import RequestError, RequestTypeError

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.core.text.tokenizer import Tokenizer

LOGGER = logging.getLogger("tandem")


class LLM:
    """Offline generation over one engine: ``with LLM(model=DIR) as llm: llm.generate(...)``.

    ``model`` is a Hugging Face directory, a ``.gguf`` file, or a name that
    :mod:`tandem.core.catalog.named_models` resolves (``"smollm2"``, ``"tiny"``); anything else
    is a ValueError that says what is accepted and the nearest name.
    """

    def __init__(
        self, model: str | os.PathLike[str], engine: str | None = None, **engine_args: Any
    ) -> None:
        self._closed = True  # until the engine exists, shutdown() has nothing to do
        opened = open_engine(model, engine, **engine_args)
        self.engine_name: str = opened.name
        self.engine_class: type[Engine] = opened.engine_class
        # the ids a server of this model answers to, the first announced
        self.model_names: tuple[str, ...] = opened.model_names
        self.engine_args = opened.engine_args
        self.engine: Engine = opened.engine
        self.inputs: InputProcessor = opened.inputs  # every request is checked here, once
        self._closed = False
        self.config: EngineConfig = self.engine.config
        self._ids = itertools.count()  # request ids: unique, so never one already running

    # properties ----------------------------------------------------------------------
    def get_tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    @property
    def max_model_len(self) -> int:
        return int(self.config.model.max_model_len)

    def default_sampling_params(self) -> SamplingParams:
        """What a request without ``sampling_params`` gets, and what the fields a
        ``SamplingParams`` leaves out take: the model's own defaults (its
        ``generation_config.json``, read as ``transformers`` reads it, or a GGUF file's
        ``general.sampling.*`` metadata)."""
        return self.inputs.defaults.clone()

    # generation ----------------------------------------------------------------------
    def generate(
        self,
        prompts: Any,
        sampling_params: Any = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Generate completions for ``prompts``; returns RequestOutputs in input order.

        ``prompts``: a str, a ``{"prompt": str}`` or ``{"prompt_token_ids": [...]}`` dict,
        or a list of those. ``sampling_params``: None (the model's defaults), one
        SamplingParams for all prompts, or a list with one per prompt; a field a
        SamplingParams leaves out takes the model's default. A request that
        failed inside the engine comes back with ``finish_reason="error"`` and its
        ``error``; the others are unaffected.
        """
        self._check_open()
        items = normalize_prompts(prompts)
        params = normalize_params(sampling_params, len(items), self.inputs.defaults)
        # each prompt is checked and tokenized once, here, before any reaches the engine
        requests = self.inputs.process_all(
            [
                (f"gen-{next(self._ids)}", item, p, f"prompt {i}")
                for i, (item, p) in enumerate(zip(items, params))
            ],
            OutputKind.FINAL_ONLY,
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

    def stream(
        self, prompt: Any, sampling_params: SamplingParams | None = None
    ) -> Iterator[RequestOutput]:
        """One prompt's outputs as they are made, each holding only what is new (a delta);
        the last one is finished. Closing the iterator early aborts the request."""
        self._check_open()
        item = normalize_prompts(prompt)
        if len(item) != 1:
            raise RequestError("prompt", f"stream takes one prompt, got {len(item)}")
        params = normalize_params(sampling_params, 1, self.inputs.defaults)[0]
        rid = f"gen-{next(self._ids)}"
        req = self.inputs.process(rid, item[0], params, "prompt", False, OutputKind.DELTA)
        self.engine.add(req)
        finished = False
        try:
            while not finished:
                for out in self.engine.step():
                    if out.request_id == rid:
                        finished = out.finished
                        yield out
        finally:
            if not finished:
                self.engine.abort_request(rid)

    def chat(
        self,
        messages: Any,
        sampling_params: Any = None,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[RequestOutput]:
        """Answer conversations through the tokenizer's own chat template.

        ``messages``: one conversation (``[{"role": ..., "content": ...}, ...]``) or a list
        of them. Returns one RequestOutput per conversation, in order.
        """
        self._check_open()
        return self.generate(
            self.chat_prompts(messages, add_generation_prompt), sampling_params, use_tqdm
        )

    def chat_prompts(self, messages: Any, add_generation_prompt: bool = True) -> list[Any]:
        """The token-id prompts of one conversation or a list of them (the chat template)."""
        conversations = [messages] if one_conversation(messages) else messages
        if not isinstance(conversations, (list, tuple)) or not conversations:
            raise RequestTypeError(
                "messages",
                "messages must be a conversation (a list of {'role', 'content'} dicts) "
                "or a non-empty list of conversations",
            )
        tokenizer = self.get_tokenizer()
        return [
            {"prompt_token_ids": tokenizer.apply_chat_template(c, add_generation_prompt)}
            for c in conversations
        ]

    def _run(self, pending: set[str], use_tqdm: bool) -> dict[str, RequestOutput]:
        finals: dict[str, RequestOutput] = {}
        bar = _progress(len(pending)) if use_tqdm else None
        start, out_tokens = time.perf_counter(), 0
        try:
            while len(finals) < len(pending):
                if not self.engine.has_unfinished_requests():
                    missing = sorted(pending - finals.keys())
                    raise RuntimeError(f"engine stopped before finishing requests {missing}")
                for out in self.engine.step():
                    if not (out.finished and out.request_id in pending):
                        continue
                    finals[out.request_id] = out
                    if out.error is not None:
                        LOGGER.warning("request %s failed: %s", out.request_id, out.error)
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
        """The engine's :class:`~tandem.core.engine.stats.EngineStats` now."""
        self._check_open()
        return self.engine.stats()

    # lifetime ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this LLM was shut down; create a new one")

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

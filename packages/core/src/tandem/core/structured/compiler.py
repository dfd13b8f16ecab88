"""Compiled grammars of one model's vocabulary, most recently used kept.

The process that samples owns one :class:`Grammars` (engine v0: the engine; engine v1:
the worker in the engine core process) and builds it on the first constrained request,
so a server that never sees one never loads the grammar engine.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

from tandem.core.structured.engine import GrammarError, clean, compile_spec, xgrammar
from tandem.core.structured.spec import GrammarSpec
from tandem.core.structured.state import GrammarState
from tandem.core.structured.utf8_guard import Utf8Guard, pack_words

DEFAULT_CACHE = 256


class Grammars:
    """``matcher(spec)``: a fresh :class:`GrammarState`; compilations are cached (LRU)."""

    def __init__(
        self,
        hf_tokenizer: Any,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        cache_size: int = DEFAULT_CACHE,
        threads: int = 2,
    ) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        xgr = xgrammar()
        stops = list(stop_token_ids) or None
        info = xgr.TokenizerInfo.from_huggingface(
            hf_tokenizer, vocab_size=int(vocab_size), stop_token_ids=stops
        )
        self.vocab_size = int(vocab_size)
        self._xgr = xgr
        self._compiler = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=False)
        self._cache: OrderedDict[GrammarSpec, Any] = OrderedDict()
        self._size = cache_size
        self._lock = threading.Lock()
        self.compilations = 0  # how many specs were compiled (not found in the cache)
        # JSON (written with fixed separators) never holds a raw control character,
        # but a grammar's bounded strings may let one through: such tokens are refused
        self._json_words = _without_control_bytes(info.decoded_vocab, self.vocab_size)
        # and no grammar lets an encoded surrogate through (it is not UTF-8)
        self._guard = Utf8Guard.for_vocab(info.decoded_vocab, self.vocab_size)

    @classmethod
    def for_config(cls, config: Any, tokenizer: Any = None) -> Grammars:
        """The grammars of the engine built on ``config`` (an ``EngineConfig``); its
        tokenizer is loaded when not given (engine v1's core process has none)."""
        mc = config.model
        if tokenizer is None:
            from tandem.core.text.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(mc.tokenizer)
        stops = list(mc.eos_token_ids)
        if not stops and tokenizer.eos_token_id is not None:
            stops = [int(tokenizer.eos_token_id)]
        return cls(tokenizer.hf, mc.vocab_size, stops)

    def compiled(self, spec: GrammarSpec) -> Any:
        with self._lock:
            hit = self._cache.get(spec)
            if hit is not None:
                self._cache.move_to_end(spec)
                return hit
        try:
            made = compile_spec(self._compiler, spec)
        except GrammarError:
            raise
        except Exception as exc:
            raise GrammarError(
                f"the {spec.kind} constraint cannot be compiled: {clean(exc)}"
            ) from None
        with self._lock:
            self.compilations += 1
            self._cache[spec] = made
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return made

    def matcher(self, spec: GrammarSpec, accepted: Sequence[int] = ()) -> GrammarState:
        """A matcher at the start of ``spec``, advanced over ``accepted`` (a sample's
        output so far, when its state is rebuilt after a preemption)."""
        also = self._json_words if spec.is_json else None
        state = GrammarState(self._xgr.GrammarMatcher(self.compiled(spec)), also, self._guard)
        for token in accepted:
            state.accept(int(token))
        return state

    def __len__(self) -> int:
        return len(self._cache)


def _without_control_bytes(decoded: Sequence[bytes], vocab_size: int) -> torch.Tensor:
    """[ceil(V / 32)] int32 words: every token allowed but those holding a byte < 0x20."""
    ok = torch.ones(((vocab_size + 31) // 32) * 32, dtype=torch.bool)
    for token, raw in enumerate(decoded[:vocab_size]):
        if any(b < 0x20 for b in raw):
            ok[token] = False
    return pack_words(ok)


class LazyGrammars:
    """``lazy()``: the :class:`Grammars` of an engine's config, built on the first call
    (so an engine that never sees a constrained request never loads the grammar engine)."""

    __slots__ = ("_config", "_made", "_tokenizer")

    def __init__(self, config: Any, tokenizer: Any = None) -> None:
        self._config = config
        self._tokenizer = tokenizer
        self._made: Grammars | None = None

    def __call__(self) -> Grammars:
        if self._made is None:
            self._made = Grammars.for_config(self._config, self._tokenizer)
        return self._made

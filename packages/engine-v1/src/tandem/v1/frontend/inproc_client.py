"""The engine core, its worker and the detokenizer logic in the caller's process (tests,
debugging): the same parts the child processes run, called directly (a tensor-parallel
group's ranks are still processes of their own, started from here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from tandem.v1 import messages as m
from tandem.v1.core.engine_core import EngineCore
from tandem.v1.detokenizer.processor import OutputProcessor
from tandem.v1.errors import EngineDeadError, EngineStartupError
from tandem.v1.proc.executors import make_executor
from tandem.v1.proc.ranks import RankLost

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.core.text.tokenizer import Tokenizer

T = TypeVar("T")


class InprocClient:
    def __init__(self, config: EngineConfig, tokenizer: Tokenizer) -> None:
        config.with_torch()  # a config made with names runs here too
        try:
            self.runner = runner = make_executor(config)
        except RankLost as exc:
            raise EngineStartupError(_lost(exc, "failed to start"), exc.error) from None
        self.core = EngineCore(config, runner)
        self.outputs = OutputProcessor(tokenizer)
        self.num_kv_blocks = self.core.num_kv_blocks
        self.attention_backend = runner.attention_backend
        self.plan = getattr(runner, "plan", "")
        self.dead: str | None = None
        self._pending: list[m.Result] = []  # requests the detokenizer logic refused

    def kv_cache(self) -> tuple[int, int, int, str]:
        """The core's KV cache: (blocks, the local layers' blocks, the context it was
        sized for, what sized it)."""
        cache = self.core.config.cache
        local = cache.num_local_blocks or 0
        return self.num_kv_blocks, local, cache.max_model_len, cache.kv_source

    def send(self, msg: m.AddRequest | m.Abort) -> None:
        if isinstance(msg, m.AddRequest):
            failed = self.outputs.add(msg)
            if failed is not None:
                self._pending.append(failed)
                return
        else:
            self.outputs.abort(msg.request_ids)
        # an abort's outputs end the samples (the streams are gone); a refused request's
        # outputs are its results
        self._pending += self.outputs.process(self.core.handle(msg))[0]

    def results(self, block: bool) -> list[m.Result]:
        out, self._pending = self._pending, []
        if not self.core.has_work():
            return out
        results, stopped = self.outputs.process(self._guard(self.core.step))
        if stopped:
            self.outputs.process(self.core.handle(m.Abort([], stopped)))
        return out + results

    def check(self) -> None:
        """The core runs in this process; its executor may have processes to watch."""
        self._guard(self.runner.check_health)

    def _guard(self, call: Callable[[], T]) -> T:
        """``call()``; a lost tensor-parallel rank ends the engine (EngineDeadError)."""
        if self.dead is not None:
            raise EngineDeadError(f"{self.dead}\nThe engine is unusable; create a new one.")
        try:
            return call()
        except RankLost as exc:
            self.dead = _lost(exc, "died" if exc.error is None else "failed")
            self.runner.shutdown()
            unusable = "\nThe engine is unusable; create a new one."
            raise EngineDeadError(self.dead + unusable, exc.error) from None

    def stats(self) -> m.CoreStats:
        return self.core.stats()

    def shutdown(self) -> None:
        self.runner.shutdown()
        self.core = None  # type: ignore[assignment]


def _lost(exc: RankLost, stage: str) -> str:
    why = exc.error.describe() if exc.error is not None else exc.text
    return f"engine v1: the {exc.who} process (pid {exc.pid}) {stage}: {why}"

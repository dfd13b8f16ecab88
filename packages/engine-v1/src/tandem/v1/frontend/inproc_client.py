"""The engine core and the output processor in the caller's process (tests, debugging)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.v1.core.engine_core import EngineCore
from tandem.v1.frontend.output_processor import OutputProcessor
from tandem.v1.proc import messages as m

if TYPE_CHECKING:
    from tandem.core.config import EngineConfig
    from tandem.core.tokenizer import Tokenizer


class InprocClient:
    def __init__(self, config: EngineConfig, tokenizer: Tokenizer) -> None:
        self.core = EngineCore(config)
        self.outputs = OutputProcessor(tokenizer)
        self.num_kv_blocks = self.core.num_kv_blocks
        self.dead: str | None = None

    def send(self, msg: m.AddRequest | m.Abort) -> None:
        if isinstance(msg, m.AddRequest):
            self.outputs.add(msg)
        else:
            self.outputs.abort(msg.request_ids)
        self.core.handle(msg)  # an abort's outputs are dropped: the streams are gone

    def results(self, block: bool) -> list[m.Result]:
        if not self.core.has_work():
            return []
        results, stopped = self.outputs.process(self.core.step())
        if stopped:
            self.core.handle(m.Abort([], stopped))
        return results

    def stats(self) -> m.CoreStats:
        return self.core.stats()

    def shutdown(self) -> None:
        self.core = None  # type: ignore[assignment]

"""``EngineStats``: one engine-agnostic snapshot of an engine's scheduler and KV cache.

Both engines answer ``engine.stats()`` with it, so tests and tools can check
preemption, block usage and prefix-cache hits without reaching into engine internals.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True, frozen=True)
class EngineStats:
    """Counts at one moment; samples of an ``n > 1`` request count one each.

    * ``num_running`` / ``num_waiting``: samples holding a slot in the running batch /
      queued for admission (preempted samples waiting to be recomputed included);
    * ``num_preemptions``: preemptions since the engine started;
    * ``num_kv_blocks``: KV cache blocks in all;
    * ``num_free_kv_blocks``: blocks no sample uses now. A block that only the prefix
      cache remembers (engine v1) counts as free: it is handed out again on demand, its
      cached prefix forgotten at that moment. So once every request has finished (or
      been aborted), ``num_free_kv_blocks == num_kv_blocks`` on both engines;
    * ``num_cached_prompt_tokens``: prompt tokens served from the prefix cache so far,
      summed over admitted samples (always 0 on engine v0, which has no prefix cache);
    * ``num_draft_tokens`` / ``num_accepted_tokens``: speculative drafts proposed / kept
      by the target model since the engine started (0 without speculative decoding).
    """

    num_running: int = 0
    num_waiting: int = 0
    num_preemptions: int = 0
    num_kv_blocks: int = 0
    num_free_kv_blocks: int = 0
    num_cached_prompt_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"EngineStats.{name} must be an int, got {type(value).__name__} {value!r}"
                )
            if value < 0:
                raise ValueError(f"EngineStats.{name} must be >= 0, got {value}")
        if self.num_free_kv_blocks > self.num_kv_blocks:
            raise ValueError(
                f"EngineStats.num_free_kv_blocks={self.num_free_kv_blocks} exceeds "
                f"num_kv_blocks={self.num_kv_blocks}"
            )
        if self.num_accepted_tokens > self.num_draft_tokens:
            raise ValueError(
                f"EngineStats.num_accepted_tokens={self.num_accepted_tokens} exceeds "
                f"num_draft_tokens={self.num_draft_tokens}"
            )

    @property
    def num_used_kv_blocks(self) -> int:
        """Blocks some running or partly computed sample holds now."""
        return self.num_kv_blocks - self.num_free_kv_blocks

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

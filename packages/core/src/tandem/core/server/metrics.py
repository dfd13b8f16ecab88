"""Prometheus text for ``GET /metrics``: the server's counters and the engine's gauges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("ok", "error", "aborted")


@dataclass(slots=True)
class Metrics:
    """Counters since the server started."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    prompt_tokens: int = 0
    generation_tokens: int = 0

    def ended(self, outcome: str, requests: int = 1) -> None:
        self.outcomes[outcome] += requests

    def tokens(self, prompt: int, generated: int) -> None:
        self.prompt_tokens += prompt
        self.generation_tokens += generated

    def render(self, stats: Any, admission: Any = None) -> str:
        """The exposition text, with ``stats`` (an ``EngineStats``) as the gauges; ``None``
        (the engine failed) gives the counters and ``tandem_engine_alive 0``. With
        ``admission`` (the server's queue), its sequences waiting and let in."""
        lines: list[str] = []

        def metric(name: str, kind: str, text: str, value: float | dict[str, int]) -> None:
            lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}"])
            if isinstance(value, dict):
                lines.extend(f'{name}{{outcome="{k}"}} {v}' for k, v in value.items())
            else:
                lines.append(f"{name} {value}")

        metric("tandem_requests_total", "counter", "Requests ended, by outcome.", self.outcomes)
        metric("tandem_prompt_tokens_total", "counter", "Prompt tokens.", self.prompt_tokens)
        metric(
            "tandem_generation_tokens_total", "counter", "Tokens generated.", self.generation_tokens
        )
        metric("tandem_engine_alive", "gauge", "1 while the engine serves.", int(stats is not None))
        if admission is not None:
            text = "Sequences waiting in the server's admission queue."
            metric("tandem_admission_waiting_sequences", "gauge", text, admission.waiting)
            text = "Sequences let into the engine and not yet done."
            metric("tandem_admission_engine_sequences", "gauge", text, admission.inside)
        if stats is None:
            return "\n".join(lines) + "\n"
        used = 1.0 - stats.num_free_kv_blocks / max(stats.num_kv_blocks, 1)
        metric("tandem_requests_running", "gauge", "Requests running.", stats.num_running)
        metric("tandem_requests_waiting", "gauge", "Requests waiting.", stats.num_waiting)
        metric("tandem_preemptions_total", "counter", "Preemptions.", stats.num_preemptions)
        metric("tandem_kv_cache_blocks", "gauge", "KV cache blocks.", stats.num_kv_blocks)
        metric("tandem_kv_cache_usage", "gauge", "Fraction of KV blocks in use.", round(used, 6))
        text = "Speculative draft tokens proposed."
        metric("tandem:spec_decode_num_draft_tokens_total", "counter", text, stats.num_draft_tokens)
        text = "Speculative draft tokens the target model accepted."
        accepted = stats.num_accepted_tokens
        metric("tandem:spec_decode_num_accepted_tokens_total", "counter", text, accepted)
        return "\n".join(lines) + "\n"

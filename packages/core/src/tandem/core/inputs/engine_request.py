"""The request an engine consumes: one checked :class:`EngineRequest` per prompt.

:mod:`tandem.core.inputs.processor` builds it (tokenized, ids checked, seed drawn, stop rules
resolved); engines read it as it is. It is a msgspec Struct, so engine v1 sends it to its
children unchanged. ``OutputKind`` says what an engine hands back for it at each step.
"""

from __future__ import annotations

import enum

import msgspec

from tandem.core.structured.spec import GrammarSpec


class OutputKind(enum.IntEnum):
    """What an engine hands back for a request at each step.

    ``CUMULATIVE``: the whole output so far (text, ids, logprobs), every step;
    ``DELTA``: only what is new since the last output (streaming clients);
    ``FINAL_ONLY``: nothing until the request finishes, then the whole output (batch
    generation). Each layer does the work its kind needs once, so a long stream costs
    O(tokens), not O(tokens^2).
    """

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


NEUTRAL_PENALTIES = (0.0, 0.0, 1.0)  # presence, frequency, repetition: each one's "off"


def is_greedy(temperature: float) -> bool:
    """Whether a sample picks the most likely token. ``SamplingParams`` stores every
    temperature below its ``GREEDY_EPS`` as exactly 0, so this is the one comparison."""
    return temperature == 0.0


def has_penalties(presence: float, frequency: float, repetition: float) -> bool:
    """Whether any penalty changes the logits (each one away from its neutral value)."""
    return (presence, frequency, repetition) != NEUTRAL_PENALTIES


class SamplingSpec(msgspec.Struct, array_like=True, frozen=True):
    """What the sampler reads. ``seed`` is always set; top-k counts fit the vocabulary."""

    seed: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    logprobs: int | None  # top entries per output token (None: not asked)
    prompt_logprobs: int | None  # top entries per prompt position (None: not asked)
    logit_bias: dict[int, float] = {}  # token id -> added to its logit before sampling
    grammar: GrammarSpec | None = None  # the constraint on the output (None: free)

    @property
    def greedy(self) -> bool:
        return is_greedy(self.temperature)

    @property
    def has_penalties(self) -> bool:
        return has_penalties(self.presence_penalty, self.frequency_penalty, self.repetition_penalty)


class StopRules(msgspec.Struct, array_like=True, frozen=True):
    """When a sample ends (applied by :mod:`tandem.core.engine.stopping`)."""

    max_tokens: int  # clamped: prompt + max_tokens never exceeds max_model_len
    min_tokens: int
    eos_token_ids: list[int]  # empty under ignore_eos
    stop_token_ids: list[int]
    stop: list[str]  # stop strings
    include_stop_str_in_output: bool
    banned: list[int]  # ids the sampler masks while fewer than min_tokens were drawn


class EngineRequest(msgspec.Struct, array_like=True, frozen=True):
    request_id: str
    prompt: str | None  # the text, when the prompt was given as text
    prompt_token_ids: list[int]
    n: int
    sampling: SamplingSpec
    stop: StopRules
    skip_special_tokens: bool
    output_kind: OutputKind = OutputKind.CUMULATIVE

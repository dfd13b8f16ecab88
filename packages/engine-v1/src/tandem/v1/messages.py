"""Typed messages between the client, the engine core and the detokenizer (msgspec).

Every layer may import this module and it imports none of them: it is the contract.

Paths (every path is one ordered ZMQ PUSH -> PULL pipe):

* client -> detokenizer: ``AddRequest`` / ``Abort`` / ``GetStats`` (the detokenizer
  registers the request, then forwards it to the core, so an abort can never overtake
  its request);
* detokenizer -> core: the same messages, plus ``Abort`` when a stop string ends a request;
* core -> detokenizer: ``CoreOutputs`` (new token ids, logprobs, finish flags, the core's
  stats after the step), ``StatsReply`` and status;
* detokenizer -> client: ``Results`` (what each request gained since its previous
  Result: new text, ids and logprobs, never the whole output), ``StatsReply`` and status.

A ``GetStats`` travels the same ordered pipes as aborts, so the ``StatsReply`` it gets
reflects every abort sent before it (a stop-string abort of the detokenizer included).
"""

from __future__ import annotations

import msgspec

from tandem.core.child_failure import ChildError
from tandem.core.inputs.engine_request import EngineRequest
from tandem.core.outputs.logprobs import LogprobDict, TopEntry


class AddRequest(msgspec.Struct, tag="add", array_like=True, frozen=True):
    """A request as the front door checked it (``tandem.core.inputs.engine_request``), sent
    unchanged."""

    request: EngineRequest


class Abort(msgspec.Struct, tag="abort", array_like=True, frozen=True):
    """Stop whole requests (``request_ids``) and single samples (``(request_id, index)``)."""

    request_ids: list[str]
    samples: list[tuple[str, int]] = []


class GetStats(msgspec.Struct, tag="get_stats", array_like=True, frozen=True):
    """Ask the core for a :class:`CoreStats` snapshot, answered with ``StatsReply``."""


class CoreStats(msgspec.Struct, array_like=True, frozen=True):
    """The fields of ``tandem.core.engine.stats.EngineStats``, as the core counts them."""

    num_running: int
    num_waiting: int
    num_preemptions: int
    num_kv_blocks: int
    num_free_kv_blocks: int
    num_cached_prompt_tokens: int
    num_draft_tokens: int = 0  # speculative drafts verified since the core started
    num_accepted_tokens: int = 0  # of them, accepted


class StatsReply(msgspec.Struct, tag="stats", array_like=True, frozen=True):
    stats: CoreStats


class Ready(msgspec.Struct, tag="ready", array_like=True, frozen=True):
    who: str
    pid: int
    num_kv_blocks: int = 0
    attention_backend: str = ""  # the core's: what TANDEM_ATTENTION_BACKEND chose there
    workers: dict[str, int] = {}  # the core's own children (tensor-parallel ranks) by name
    # the context the KV cache was sized for (the model's, or shorter where it did not
    # fit and max_model_len was not given) and what sized the cache; 0 and "" from a
    # process without a cache (the detokenizer)
    max_model_len: int = 0
    kv_source: str = ""
    num_local_kv_blocks: int = 0  # the local layers' pool, where they have one
    plan: str = ""  # the model's execution plan (ExecutionPlan.table), from a model's process


class Failed(msgspec.Struct, tag="failed", array_like=True, frozen=True):
    """A child's fatal error; ``during_startup`` tells a start-up failure from a crash.

    ``error`` is the exception it raised; a process that ended without one (a rank the
    core saw exit) has none, and ``ended`` says how it ended instead. A child sends it
    on its socket and down its report pipe (:mod:`tandem.core.child_failure`).
    """

    who: str
    pid: int
    during_startup: bool
    error: ChildError | None = None
    ended: str = ""

    def describe(self) -> str:
        """What went wrong: the exception's type, message and traceback tail, else how
        the process ended."""
        return self.error.describe() if self.error is not None else self.ended


class CoreOutput(msgspec.Struct, array_like=True, frozen=True):
    request_id: str
    index: int
    new_token_ids: list[int]
    new_logprobs: list[float] = []  # raw logprob of each new token
    # one list of top entries per new token (the sampled token first), when asked
    logprobs: list[list[TopEntry]] | None = None
    # one list per prompt position (position 0 has none: an empty list), when asked
    prompt_logprobs: list[list[TopEntry]] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_cached_tokens: int = 0
    error: str | None = None  # why the sample failed (finish_reason "error")


class CoreOutputs(msgspec.Struct, tag="outputs", array_like=True, frozen=True):
    outputs: list[CoreOutput]
    stats: CoreStats | None = None  # the core's counts once these outputs were made


class Completion(msgspec.Struct, array_like=True, frozen=True):
    """What one sample gained since its request's previous :class:`Result` (a sample's
    shown text only grows: ``text`` is appended to what was sent before)."""

    index: int
    text: str
    new_token_ids: list[int]
    cumulative_logprob: float | None
    # per new output token: {token id: Logprob}, when asked
    new_logprobs: list[LogprobDict] | None
    finish_reason: str | None
    stop_reason: int | str | None


class Result(msgspec.Struct, array_like=True, frozen=True):
    """A request's progress since its previous Result: only new tokens and text travel
    (the client holds the prompt and, for a cumulative request, what came before; see
    ``tandem.v1.frontend.streams``). ``outputs`` holds the samples that changed."""

    request_id: str
    # prompt positions scored since the previous Result, when prompt logprobs are asked
    new_prompt_logprobs: list[LogprobDict | None] | None
    outputs: list[Completion]
    finished: bool
    num_cached_tokens: int
    error: str | None = None  # why the request failed, once a sample failed


class Results(msgspec.Struct, tag="results", array_like=True, frozen=True):
    results: list[Result]
    stats: CoreStats | None = None  # passed on from the CoreOutputs these came from


ToCore = AddRequest | Abort | GetStats
FromCore = CoreOutputs | StatsReply | Ready | Failed
ToClient = Results | StatsReply | Ready | Failed

_encoder = msgspec.msgpack.Encoder()
to_core = msgspec.msgpack.Decoder(ToCore)
from_core = msgspec.msgpack.Decoder(FromCore)
to_client = msgspec.msgpack.Decoder(ToClient)


def encode(msg: msgspec.Struct) -> bytes:
    return _encoder.encode(msg)


def decode_failed(data: bytes) -> Failed | None:
    """A report read from a child's report pipe; None when it holds no whole ``Failed``
    (the child wrote nothing, or died while writing)."""
    try:
        msg = from_core.decode(data)
    except msgspec.DecodeError:
        return None
    return msg if isinstance(msg, Failed) else None

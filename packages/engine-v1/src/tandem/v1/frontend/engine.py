"""``tandem.v1.LLMEngine``: the same interface as engine v0, served by child processes.

``add`` sends a request the front door checked; ``step`` returns every output
that arrived (waiting for at least one while requests are unfinished). A dead child
turns into :class:`EngineDeadError` within a fraction of a second, and every later call
says the engine is unusable.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tandem.core import envs
from tandem.core.engine.context_fit import warn_shortened
from tandem.core.engine.stats import EngineStats
from tandem.core.heap import release_free_heap
from tandem.core.inputs.engine_request import EngineRequest
from tandem.core.outputs.request_output import RequestOutput
from tandem.core.text.tokenizer import load_tokenizer
from tandem.v1 import messages as m
from tandem.v1.errors import EngineDeadError
from tandem.v1.frontend.streams import RequestStream

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineArgs, EngineConfig
    from tandem.core.config.parallel import ParallelConfig
    from tandem.v1.frontend.client import MPClient
    from tandem.v1.frontend.dp_client import DPClient
    from tandem.v1.frontend.inproc_client import InprocClient


class LLMEngine:
    def __init__(
        self,
        config: EngineConfig,
        multiprocess: bool = True,
        client: MPClient | DPClient | None = None,
    ) -> None:
        if not isinstance(multiprocess, bool):
            raise TypeError(f"multiprocess must be a bool, got {multiprocess!r}")
        _check_parallel(config.parallel, multiprocess)
        self.config = config
        self._streams: dict[str, RequestStream] = {}
        self._closed = False
        model_len = config.model.max_model_len
        if not multiprocess:
            from tandem.v1.frontend.inproc_client import InprocClient

            self.tokenizer = load_tokenizer(config.model.tokenizer)
            self.client: MPClient | InprocClient = InprocClient(config, self.tokenizer)
            self._adopt_kv_cache(model_len)
            return
        from tandem.v1.frontend.client import MPClient
        from tandem.v1.frontend.dp_client import DPClient

        if client is None:
            client = _new_client(config.parallel.data_parallel_size)
        elif not isinstance(client, (MPClient, DPClient)):
            kind = type(client).__name__
            raise TypeError(f"client must be an MPClient or a DPClient, got {kind}")
        try:
            client.configure(config)
            # the core builds the model meanwhile; this process never runs it, so its
            # tokenizer goes without transformers where it can
            light_cache = os.path.join(
                os.path.expanduser(envs.TANDEM_CACHE_DIR), "tokenizers-light"
            )
            self.tokenizer = load_tokenizer(config.model.tokenizer, light_cache=light_cache)
            client.attach(self.tokenizer)
            release_free_heap()  # parsing the tokenizer's JSON (here and for the detokenizer)
        except BaseException:
            client.shutdown()
            raise
        self.client = client
        self._adopt_kv_cache(model_len)

    def _adopt_kv_cache(self, model_len: int) -> None:
        """Take the KV cache the core sized (a context shorter than the model's
        ``model_len`` where the whole did not fit: said here, once); the front door
        checks prompts against the context the config then says."""
        config = self.config
        config.adopt_kv_cache(*self.client.kv_cache())
        if config.model.max_model_len != model_len:
            warn_shortened(config, model_len)

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs, multiprocess: bool = True) -> LLMEngine:
        """Build from ``EngineArgs``; the children start before the config is resolved,
        so their imports overlap the parent's reading of the model directory."""
        from tandem.core.config.engine_args import EngineArgs

        if not isinstance(engine_args, EngineArgs):
            raise TypeError(f"engine_args must be an EngineArgs, got {type(engine_args).__name__}")
        if not isinstance(multiprocess, bool):
            raise TypeError(f"multiprocess must be a bool, got {multiprocess!r}")
        _check_parallel(engine_args.parallel_config(), multiprocess)
        if not multiprocess or not _checkpoint_exists(engine_args.model):
            # no children to overlap (or a model path that create_config will refuse)
            return cls(engine_args.create_config(), multiprocess=multiprocess)
        client = _new_client(engine_args.data_parallel_size)
        try:
            # names, not torch's objects: this process never runs the model, and need
            # not import torch (the core process turns them into torch's)
            config = engine_args.create_config(names=True)
        except BaseException:
            client.shutdown()
            raise
        return cls(config, client=client)

    # -- the engine interface ---------------------------------------------------------
    def _usable(self) -> None:
        if self._closed:
            raise RuntimeError("this engine was shut down; create a new one")

    def add(self, request: EngineRequest) -> None:
        """Send a request the front door checked
        (:class:`~tandem.core.inputs.processor.InputProcessor`; its id is not one already
        running): the children trust it as it is."""
        self._usable()
        assert request.request_id not in self._streams, request.request_id
        self.client.send(m.AddRequest(request))
        self._streams[request.request_id] = RequestStream.start(request)

    def abort_request(self, request_id: str | list[str]) -> None:
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        live = [rid for rid in ids if self._streams.pop(rid, None) is not None]
        if not live or self._closed or self.client.dead is not None:
            return
        self.client.send(m.Abort(live))

    def has_unfinished_requests(self) -> bool:
        return bool(self._streams)

    def get_num_unfinished_requests(self) -> int:
        return len(self._streams)

    def stats(self) -> EngineStats:
        """The engine core's counts now (a round trip to the core process when multiprocess).

        The answer reflects every request, abort and stop sent before the call. A block
        that only the prefix cache holds counts as free, so once all requests are done
        ``num_free_kv_blocks == num_kv_blocks`` (the cached prefixes stay reusable until
        their blocks are handed out again).
        """
        self._usable()
        snap = self.client.stats()
        return EngineStats(**{f: getattr(snap, f) for f in snap.__struct_fields__})

    def step(self) -> list[RequestOutput]:
        """Outputs of the requests that progressed, each of its request's kind: a delta,
        the final output, or (cumulative) one whole output per request."""
        self._usable()
        if not self._streams:
            return []
        outs: list[RequestOutput] = []
        whole: dict[str, RequestStream] = {}  # cumulative: one output once all is read
        for res in self.client.results(block=True):
            stream = self._streams.get(res.request_id)
            if stream is None:
                continue  # aborted: late results are dropped
            out = stream.apply(res)
            if out is None:
                whole[res.request_id] = stream
            else:
                outs.append(out)
            if stream.finished:
                del self._streams[res.request_id]
        return outs + [stream.output() for stream in whole.values()]

    @property
    def attention_backend(self) -> str:
        """The attention backend the engine core runs (``TANDEM_ATTENTION_BACKEND``, or
        the device's default), as the core process chose it."""
        return self.client.attention_backend

    @property
    def plan(self) -> str:
        """The model's execution plan (:class:`tandem.core.models.plan.ExecutionPlan`'s
        table), as the process that loaded the model made it."""
        return self.client.plan

    # -- life cycle -------------------------------------------------------------------
    @property
    def is_dead(self) -> bool:
        return self.client.dead is not None

    def check_health(self) -> None:
        """EngineDeadError when a child process has died, even while no request runs."""
        self._usable()
        self.client.check()

    def shutdown(self) -> None:
        """Stop the children, close the sockets, remove the socket dir; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._streams.clear()
        self.client.shutdown()

    def __enter__(self) -> LLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _checkpoint_exists(model: str | os.PathLike[str]) -> bool:
    """Whether ``model`` is a Hugging Face directory (its config.json) or a .gguf file:
    a checkpoint worth starting the children for before its config is read."""
    path = os.fspath(model)
    if path.endswith(".gguf"):
        return os.path.isfile(path)
    return os.path.isfile(os.path.join(path, "config.json"))


def _check_parallel(parallel: ParallelConfig, multiprocess: bool) -> None:
    """What the parallel arguments need, checked before any process starts."""
    if parallel.distributed_executor_backend == "ray" and parallel.tensor_parallel_size > 1:
        from tandem.v1.proc.ray_rank import require_ray

        require_ray()
    size = parallel.data_parallel_size
    if size > 1 and not multiprocess:
        raise ValueError(
            f"data_parallel_size={size} runs one engine-core process per replica: "
            "it needs multiprocess=True (or data_parallel_size=1)"
        )


def _new_client(replicas: int) -> MPClient | DPClient:
    """One engine core's client, or the client of ``replicas`` engine cores."""
    timeout = float(envs.TANDEM_ENGINE_READY_TIMEOUT)
    if replicas > 1:
        from tandem.v1.frontend.dp_client import DPClient

        return DPClient(replicas, timeout)
    from tandem.v1.frontend.client import MPClient

    return MPClient(timeout)


__all__ = ["EngineDeadError", "LLMEngine"]

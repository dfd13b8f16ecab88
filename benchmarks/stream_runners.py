"""The runners of ``single_stream.py``: one prompt, greedy, every token stamped as it comes.

Each runner runs in a fresh process of its own and returns, per timed run, the time to
the first token, the decode seconds (first token to last) and the token count, and once
the resident size of its process tree after those runs (weights, cache and runtime). A tandem
runner also times one more run with its step taken apart (:class:`PhaseClock`): the
scheduler, the model forward, the logits, the sampler and the detokenizer of the engine
in this process (v1's parts are timed with its in-process client; the processes' IPC is
what the multi-process engine takes beyond that).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench_runners import cpu_seconds
from process_tree import tree_rss


@dataclass(slots=True)
class Run:
    ttft: float  # prompt in -> first token out
    decode: float  # first token -> last token
    tokens: int
    cpu: float = 0.0  # CPU seconds of this process and its children over the whole run


@dataclass(slots=True)
class Result:
    runs: list[Run] = field(default_factory=list)
    answers: list[Run] = field(default_factory=list)  # final-only runs (one output at the end)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per decode token
    note: str = ""
    plan: str = ""  # a tandem engine's execution plan (``engine.plan``)
    resident: int = 0  # bytes: the runner's process tree's RSS after its timed runs


class PhaseClock:
    """Seconds spent in wrapped callables, by phase name (nested calls are not told apart)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.on = False

    def wrap(self, owner: Any, attr: str, phase: str) -> None:
        """Time ``owner.attr`` under ``phase``; an instance attribute shadows the method."""
        inner = getattr(owner, attr)
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not clock.on:
                return inner(*args, **kwargs)
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                clock.seconds[phase] = clock.seconds.get(phase, 0.0) + time.perf_counter() - start

        setattr(owner, attr, timed)


class _TimedSampler:
    """A sampler that adds its calls to a clock; everything else is the sampler's."""

    def __init__(self, inner: Any, clock: PhaseClock) -> None:
        self._inner = inner
        self._call = inner.__call__
        clock.wrap(self, "_call", "sampler")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def instrument(engine: Any, clock: PhaseClock) -> None:
    """Wrap the parts of a v0 engine, or of a v1 engine with an in-process client."""
    clock.wrap(engine, "step", "step")
    if hasattr(engine, "runner"):  # v0
        runner, model = engine.runner, engine.runner.model
        clock.wrap(engine.scheduler, "schedule", "scheduler")
        clock.wrap(engine.scheduler, "update", "scheduler")
        clock.wrap(engine.outputs, "append", "detokenizer")
        clock.wrap(engine.outputs, "make_output", "detokenizer")
    else:  # v1, InprocClient
        core = engine.client.core
        runner, model = core.runner, core.runner.model
        clock.wrap(core.scheduler, "schedule", "scheduler")
        clock.wrap(core.scheduler, "update_from_output", "scheduler")
        clock.wrap(engine.client.outputs, "process", "detokenizer")
    clock.wrap(model, "forward", "model forward")
    clock.wrap(model, "compute_logits", "logits")
    runner.sampler = _TimedSampler(runner.sampler, clock)
    if hasattr(runner, "draw"):  # v1: the step's draws hold the sampler they call
        runner.draw.sampler = runner.sampler


def stamp(tokens: Callable[[], Any]) -> tuple[Run, list[int]]:
    """Drain an iterator factory of token-id lists, stamping the first and the last."""
    cpu = cpu_seconds()
    start = time.perf_counter()
    first = last = 0.0
    ids: list[int] = []
    for new in tokens():
        if not new:
            continue
        last = time.perf_counter()
        if not ids:
            first = last
        ids += list(new)
    return Run(first - start, last - first, len(ids), cpu_seconds() - cpu), ids


def _engine(path: str, engine: str, kwargs: dict[str, Any], multiprocess: bool = True) -> Any:
    from tandem.core.config.engine_args import EngineArgs

    args = EngineArgs.from_kwargs(path, **kwargs)
    if engine == "v0":
        from tandem.v0 import LLMEngine as V0

        return V0.from_engine_args(args)
    from tandem.v1 import LLMEngine as V1

    return V1.from_engine_args(args, multiprocess=multiprocess)


def _stream(engine: Any, prompt: list[int], params: Any, final: bool = False) -> Callable[[], Any]:
    """A factory of one request's new token ids, step by step (delta outputs), or all at
    once at the end (``final``: what ``LLM.generate`` asks for)."""
    from tandem.core.inputs.processor import OutputKind
    from tandem.core.testing import inputs_of

    count = iter(range(1 << 30))
    kind = OutputKind.FINAL_ONLY if final else OutputKind.DELTA

    def tokens() -> Any:
        rid = f"s{next(count)}"
        req = inputs_of(engine).process(rid, prompt, params, "prompt", False, kind)
        engine.add(req)
        while engine.has_unfinished_requests():
            for out in engine.step():
                yield out.outputs[0].token_ids

    return tokens


def run_tandem(
    path: str,
    engine: str,
    prompt: list[int],
    new: int,
    threads: int,
    repeats: int,
    quant: str,
    max_model_len: int | None = None,
    detail: bool = True,
) -> Result:
    """Timed runs of the engine as users get it, then one run taken apart (v1: in process);
    ``max_model_len`` None: the model's own. ``detail`` False: streamed runs only (no
    final-only answers, no run taken apart)."""
    from tandem.core.inputs.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True)
    kwargs: dict[str, Any] = {"dtype": "float32", "num_threads": threads}
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if quant != "fp32":
        kwargs["quantization"] = quant
    out = Result()
    with _engine(path, engine, kwargs) as eng:
        out.plan = getattr(eng, "plan", "")  # an engine at an older --baseline has none
        go = _stream(eng, prompt, params)
        whole = _stream(eng, prompt, params, final=True)
        stamp(go)  # warm-up
        for _ in range(repeats):
            out.runs.append(stamp(go)[0])
            if detail:
                out.answers.append(stamp(whole)[0])
        out.resident = tree_rss()  # v1's engine core and detokenizer included
    if not detail:
        return out
    with _engine(path, engine, kwargs, multiprocess=False) as eng:
        clock = PhaseClock()
        instrument(eng, clock)
        go = _stream(eng, prompt, params)
        stamp(go)
        tokens = 0
        for new in go():  # the clock runs from the first token on: decode steps only
            tokens += len(new)
            clock.on = tokens > 0
    out.phases = {name: s / max(tokens - 1, 1) for name, s in clock.seconds.items()}
    return out


class _Stamps:
    """A transformers streamer that stamps each put (the first put is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def run_hf(path: str, prompt: list[int], new: int, threads: int, repeats: int) -> Result:
    """transformers ``generate`` (sdpa, fp32), greedy, one sequence."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    pad = model.generation_config.pad_token_id or 0

    def once() -> Run:
        stamps = _Stamps()
        cpu = cpu_seconds()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=pad,
                streamer=stamps,
            )
        t = stamps.times[1:]
        return Run(t[0] - start, t[-1] - t[0], len(t), cpu_seconds() - cpu)

    once()
    runs = [once() for _ in range(repeats)]
    return Result(runs, resident=tree_rss())


def run_llama_cpp(gguf: str, prompt: list[int], new: int, threads: int, repeats: int) -> Result:
    """llama.cpp through ``llama-cpp-python``, only where it is importable (not built here)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return Result(note="skipped: llama_cpp is not importable")
    from llama_cpp import Llama  # type: ignore[import-not-found]

    llm = Llama(model_path=gguf, n_threads=threads, n_ctx=2048, verbose=False)

    def tokens() -> Any:
        llm.reset()
        for i, tok in enumerate(llm.generate(prompt, temp=0.0, top_k=1, reset=True)):
            yield [tok]
            if i + 1 >= new:
                return

    stamp(tokens)
    runs = [stamp(tokens)[0] for _ in range(repeats)]
    return Result(runs, resident=tree_rss())  # the file's mapped pages it read count

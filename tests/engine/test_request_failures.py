"""One request never kills the engine: a failure inside a batched step fails that request.

The poisoned requests are built past the front door (an ``EngineRequest`` whose sampling
spec holds a value the kernels refuse), as a request would look if a check were missing.
Engines do not check a request again, so what refuses it is the kernel or the float32
tensor the value is written to; either way the request fails alone.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import psutil
import pytest

from tandem.core.inputs.processor import EngineRequest
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.outputs.request_output import RequestOutput
from tandem.core.testing import inputs_of

pytestmark = pytest.mark.engines("v0", "v1")

SEEDED = SamplingParams(temperature=1.0, seed=11, max_tokens=6, ignore_eos=True)
GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=2)
POISONS = {
    "top_p 0": dict(temperature=1.0, top_p=0.0),  # 1e-300 as a float32
    "repetition 1e-45": dict(repetition_penalty=1e-45),
    "repetition 3.5e38": dict(repetition_penalty=3.5e38),  # no float32
    "nan temperature": dict(temperature=float("nan")),
}


def request(engine: Any, rid: str, prompt: list[int], params: SamplingParams) -> EngineRequest:
    return inputs_of(engine).process(rid, prompt, params)


def poisoned(engine: Any, rid: str, prompt: list[int], **spec: Any) -> EngineRequest:
    """A checked request with ``spec`` written into its sampling spec afterwards."""
    good = request(engine, rid, prompt, SamplingParams(max_tokens=6, ignore_eos=True))
    return msgspec.structs.replace(good, sampling=msgspec.structs.replace(good.sampling, **spec))


def finish(engine: Any, requests: list[EngineRequest]) -> dict[str, RequestOutput]:
    for r in requests:
        engine.add(r)
    done: dict[str, RequestOutput] = {}
    for _ in range(200):
        if not engine.has_unfinished_requests():
            return done
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    raise AssertionError("requests did not finish")


def assert_failed(out: RequestOutput) -> None:
    assert [c.finish_reason for c in out.outputs] == ["error"] * len(out.outputs)
    assert out.finished and out.error, out
    assert len(out.error) <= 200 and "Traceback" not in out.error and "\n" not in out.error
    assert not re.search(r"/\w+/\w+", out.error), out.error  # no file path


def assert_serving(engine: Any) -> None:
    """The engine is alive and answers a next request; v1's core process still runs."""
    out = finish(engine, [request(engine, "next", [1, 40, 41], GREEDY)])["next"]
    assert len(out.outputs[0].token_ids) == 6 and out.error is None
    assert not engine.is_dead
    pids = getattr(getattr(engine, "client", None), "pids", {})
    assert all(psutil.pid_exists(pid) for pid in pids.values())
    stats = engine.stats()
    assert (stats.num_running, stats.num_waiting) == (0, 0)
    assert stats.num_free_kv_blocks == stats.num_kv_blocks


@pytest.mark.parametrize("poison", list(POISONS))
def test_a_poisoned_sample_fails_alone_in_its_batch(shared_engine, poison: str) -> None:
    eng = shared_engine
    alone = finish(
        eng, [request(eng, "a", [1, 40, 41, 42], SEEDED), request(eng, "b", [1, 99], GREEDY)]
    )
    batch = [
        request(eng, "a2", [1, 40, 41, 42], SEEDED),
        poisoned(eng, "bad", [1, 300, 7], **POISONS[poison]),
        request(eng, "b2", [1, 99], GREEDY),
    ]
    done = finish(eng, batch)
    assert_failed(done["bad"])
    assert re.match(r"(ValueError|RuntimeError): ", done["bad"].error), done["bad"].error
    assert done["a2"].outputs[0].token_ids == alone["a"].outputs[0].token_ids
    assert done["b2"].outputs[0].token_ids == alone["b"].outputs[0].token_ids
    for got, ref in zip(done["b2"].outputs[0].logprobs, alone["b"].outputs[0].logprobs):
        assert got.keys() == ref.keys()
        assert [v.logprob for v in got.values()] == pytest.approx(
            [v.logprob for v in ref.values()], abs=1e-4
        )
    assert done["a2"].error is None and done["b2"].error is None
    assert_serving(eng)


def test_each_poisoned_sample_of_n_fails(shared_engine) -> None:
    eng = shared_engine
    bad = poisoned(eng, "bad", [1, 300, 7], temperature=1.0, top_p=0.0)
    done = finish(eng, [msgspec.structs.replace(bad, n=3)])
    assert_failed(done["bad"])
    assert [c.index for c in done["bad"].outputs] == [0, 1, 2]
    assert_serving(eng)


def test_a_forward_that_raises_fails_its_step_only(shared_engine) -> None:
    eng = shared_engine
    good = request(eng, "bad", [1, 40, 41], GREEDY)
    bad = msgspec.structs.replace(good, prompt_token_ids=[1, 40, 10**6])  # no such embedding
    assert_failed(finish(eng, [bad])["bad"])
    assert_serving(eng)

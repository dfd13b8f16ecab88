"""A step is plain data: the scheduler describes it, any worker runs it, the scheduler
applies the result (the worker never holds the KV cache manager or a live request)."""

from __future__ import annotations

import dataclasses

import msgspec
from v1_support import engine_request, sample

from tandem.core.config.engine_args import EngineArgs
from tandem.v1 import messages as m
from tandem.v1.core.engine_core import EngineCore
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.scheduler import Scheduler
from tandem.v1.core.step import SchedulerOutput, StepOutput

PLAIN = (str, int, float, bool, type(None))


def plain(value: object) -> bool:
    """Builtins, the request contract's msgspec structs and the step's dataclasses."""
    if isinstance(value, PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(plain(k) and plain(v) for k, v in value.items())
    if isinstance(value, msgspec.Struct):
        return all(plain(getattr(value, f)) for f in value.__struct_fields__)
    if dataclasses.is_dataclass(value) and type(value).__module__ == "tandem.v1.core.step":
        return all(plain(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def run(s: Scheduler, out: SchedulerOutput, failed: dict[str, str] | None = None) -> list:
    """What a worker reports: token 7 for every row that samples, ``failed`` failed."""
    failed = failed or {}
    done = [r.key for r in out.scheduled if r.sample and r.key not in failed]
    result = StepOutput({k: [7] for k in done}, {k: [-1.0] for k in done}, failed=failed)
    return s.update_from_output(out, result)


def test_a_step_holds_plain_data_and_new_state_once() -> None:
    s = Scheduler(KVCacheManager(4, 2, False), 8, 64, True)
    a, b = (
        sample("a", [10, 11, 12, 13]),
        sample("b", [20, 21, 22], min_tokens=2, stop_token_ids=[9]),
    )
    s.add(a)
    s.add(b)
    first = s.schedule()
    assert plain(first)
    assert [n.key for n in first.new] == ["a", "b"] and first.new[1].token_ids == [20, 21, 22]
    assert [(r.start, r.num_tokens, r.sample) for r in first.scheduled] == [
        (0, 4, True),
        (0, 3, True),
    ]
    assert first.scheduled[1].banned == [9]  # below min_tokens: the stop id is masked
    assert first.scheduled[0].block_table == s.kv.table("a")
    run(s, first)
    second = s.schedule()  # a needs a 3rd block: b is preempted, its state dropped
    assert plain(second) and second.new == [] and second.dropped == ["b"]
    assert [(r.key, r.start, r.counter) for r in second.scheduled] == [("a", 4, 1)]
    run(s, second)
    s.finish(a, "length")
    third = s.schedule()  # b comes back with every token it knows
    assert third.dropped == ["a"] and [n.key for n in third.new] == ["b"]
    assert third.new[0].token_ids == [20, 21, 22, 7] and third.new[0].num_prompt_tokens == 3


def test_prompt_logprobs_are_scored_once_across_chunks_and_preemption() -> None:
    s = Scheduler(KVCacheManager(16, 2, False), 8, 3, True)
    a = sample("a", list(range(30, 38)), prompt_logprobs=1)
    s.add(a)
    spans = []
    for _ in range(3):
        out = s.schedule()
        spans.append(out.scheduled[0].prompt_logprobs)
        run(s, out)
    spans.append(a.take_prompt_logprobs(0, 8))  # a preempted request computes it again
    got = [(p.first, p.end, p.lead) if p else None for p in spans]
    assert got == [(0, 3, True), (3, 6, False), (6, 7, False), None]


def test_a_failed_row_finishes_with_error_and_frees_its_blocks() -> None:
    s = Scheduler(KVCacheManager(8, 2, False), 8, 64, True)
    s.add(sample("a", [10, 11, 12]))
    s.add(sample("b", [20, 21]))
    outs = run(s, s.schedule(), failed={"b": "ValueError: no"})
    by_key = {o.request_id: o for o in outs}
    assert (by_key["b"].finish_reason, by_key["b"].error) == ("error", "ValueError: no")
    assert by_key["a"].new_token_ids == [7] and by_key["a"].error is None
    assert "b" not in s.requests and s.schedule().dropped == ["b"]
    assert s.kv.num_free == 8 - len(s.kv.table("a"))
    s.kv.check()


class FakeRunner:
    """A worker without a model: greedy token 5 everywhere, one key failing."""

    num_kv_blocks = 32
    attention_backend = "none"
    max_model_len = 64
    kv_source = "num_kv_blocks=32"
    num_local_kv_blocks = 0

    def __init__(self, fail: str) -> None:
        self.fail = fail
        self.seen: list[SchedulerOutput] = []

    def execute(self, step: SchedulerOutput) -> StepOutput:
        self.seen.append(step)
        keys = [r.key for r in step.scheduled if r.sample]
        out = StepOutput({k: [5] for k in keys}, {k: [-0.1] for k in keys})
        if any(r.key.endswith(self.fail) for r in step.scheduled):
            out.failed[f"0/{self.fail}"] = "RuntimeError: boom"
        return out


def test_the_engine_core_drives_any_worker(tiny_model) -> None:
    config = EngineArgs(model=str(tiny_model), max_model_len=64).create_config()
    runner = FakeRunner(fail="bad")
    core = EngineCore(config, runner)
    core.handle(m.AddRequest(engine_request("ok", [1, 2, 3], max_tokens=2, temperature=0.0)))
    core.handle(m.AddRequest(engine_request("bad", [1, 2], max_tokens=2, temperature=0.0)))
    outs = core.step() + core.step()
    assert [(o.request_id, o.new_token_ids, o.finish_reason) for o in outs] == [
        ("ok", [5], None),
        ("bad", [], "error"),
        ("ok", [5], "length"),
    ]
    assert not core.has_work() and core.kv.num_free == core.kv.num_blocks
    assert all(plain(step) for step in runner.seen)

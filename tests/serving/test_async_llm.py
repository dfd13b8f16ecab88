"""``AsyncLLM``: streamed outputs, deltas, cancellation, bad input, many requests at once."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tandem.core.entrypoints.async_llm import AsyncLLM, EngineStopped
from tandem.core.inputs.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


async def _all(llm: AsyncLLM, prompt, params=GREEDY, **kw) -> list:
    return [out async for out in llm.generate(prompt, params, **kw)]


async def _idle(llm: AsyncLLM, within: float = 60.0) -> None:
    """Wait until the engine holds no request (generous: a loaded machine steps slowly)."""
    deadline = time.monotonic() + within
    while True:
        stats = await llm.stats()
        if stats.num_running == stats.num_waiting == 0:
            assert stats.num_free_kv_blocks == stats.num_kv_blocks
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the engine never went idle: {stats}")
        await asyncio.sleep(0.02)


def test_outputs_stream_one_token_at_a_time_and_match_generate(async_llm, tiny_model, engine):
    outs = asyncio.run(_all(async_llm, "a b c"))
    counts = [len(o.outputs[0].token_ids) for o in outs]
    # one output per step that advanced the request (v1 may fold steps that arrived together)
    assert counts[-1] == 8 and all(a < b for a, b in itertools.pairwise(counts)) and counts[0] >= 1
    assert outs[-1].finished and not any(o.finished for o in outs[:-1])
    from tandem.core import LLM

    with LLM(model=tiny_model, engine=engine, max_model_len=128) as ref:
        want = ref.generate("a b c", GREEDY, use_tqdm=False)[0].outputs[0]
    assert outs[-1].outputs[0].token_ids == want.token_ids
    assert outs[-1].outputs[0].text == want.text


def test_deltas_add_up_to_the_whole(async_llm):
    whole = asyncio.run(_all(async_llm, "x y"))[-1].outputs[0]
    parts = asyncio.run(_all(async_llm, "x y", delta=True))
    assert "".join(p.outputs[0].text for p in parts) == whole.text
    assert [t for p in parts for t in p.outputs[0].token_ids] == whole.token_ids


def test_leaving_early_aborts_and_frees_the_kv_cache(async_llm):
    long = SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True)

    async def main() -> int:
        seen = 0
        async for out in async_llm.generate("a", long):  # a consumer that breaks
            seen = len(out.outputs[0].token_ids)
            if seen >= 3:
                break
        await _idle(async_llm)
        gen = async_llm.generate("b", long)  # a consumer cancelled while it waits
        first = await gen.__anext__()
        waiting = asyncio.ensure_future(gen.__anext__())
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert gen.ag_frame is None and not first.finished  # closed: its request aborted
        await _idle(async_llm)
        return seen

    assert 3 <= asyncio.run(main()) < 120


def test_bad_input_raises_before_anything_is_queued(async_llm):
    async def main() -> None:
        before = await async_llm.stats()
        for prompt, params, exc, match in [
            ("", GREEDY, ValueError, "empty"),
            ([1, 10**6], GREEDY, ValueError, "outside the vocabulary"),
            ("a", {"temperature": 0}, TypeError, "must be a SamplingParams"),
        ]:
            with pytest.raises(exc, match=match):
                await _all(async_llm, prompt, params)
        with pytest.raises(ValueError, match="max_tokens=500 does not fit"):
            async_llm.process("a", SamplingParams(max_tokens=500), strict=True)
        assert await async_llm.stats() == before

    asyncio.run(main())


def test_many_concurrent_requests_each_get_their_own_tokens(async_llm):
    async def main() -> list:
        prompts = [f"item {i}" for i in range(24)]
        return await asyncio.gather(*(_all(async_llm, p) for p in prompts))

    results = asyncio.run(main())
    alone = asyncio.run(_all(async_llm, "item 7"))[-1].outputs[0].token_ids
    assert all(len(r[-1].outputs[0].token_ids) == 8 for r in results)
    assert results[7][-1].outputs[0].token_ids == alone
    assert len({r[-1].request_id for r in results}) == 24


def _hold_after_first_token(llm: AsyncLLM) -> None:
    """The engine's steps after the first that gave an output wait until shutdown has
    begun, so the request cannot end before it (on a loaded machine the engine's thread
    ran all 60 tokens before the test's own thread called shutdown)."""
    step, gave = llm.engine.step, []

    def held() -> list:
        deadline = time.monotonic() + 60
        while gave and llm.is_alive and time.monotonic() < deadline:
            time.sleep(0.002)
        outs = step()
        gave.extend(outs[:1])
        return outs

    llm.engine.step = held


def test_shutdown_ends_waiters_and_refuses_new_work(tiny_model, engine):
    llm = AsyncLLM(tiny_model, engine=engine, max_model_len=64)
    _hold_after_first_token(llm)

    async def main() -> None:
        long = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
        gen = llm.generate("a", long)
        await gen.__anext__()
        llm.shutdown()
        with pytest.raises(EngineStopped):
            async for _ in gen:
                pass
        with pytest.raises(EngineStopped, match="shut down"):
            await _all(llm, "b")

    try:
        asyncio.run(main())
    finally:
        llm.shutdown()


@pytest.mark.engines("v1")
def test_an_engine_that_dies_while_idle_is_noticed(tiny_model) -> None:
    """No request needed: the idle engine thread checks its engine, so a server's health
    check and its supervisor learn of the death at once; callers get one clean line."""
    import psutil

    from tandem.v1 import EngineDeadError

    with AsyncLLM(tiny_model, engine="v1", max_model_len=64) as llm:
        core = llm.engine.client.pids["core"]
        psutil.Process(core).kill()
        assert llm.stopped.wait(15), "the death of the core process went unnoticed"
        assert isinstance(llm.failure, EngineDeadError) and not llm.is_alive
        with pytest.raises(EngineStopped) as info:
            llm.process("a b")
        message = str(info.value)
        assert f"pid {core}" in message and "\n" not in message and "Traceback" not in message


def test_a_loop_that_closes_with_a_request_in_flight_leaves_the_engine_serving(async_llm):
    """A server's event loop may end (shutdown) while its request still runs in the
    engine: outputs for it have no one to go to, and the engine thread carries on."""
    long = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)

    streams = []  # held, so that closing the loop does not finalise (abort) the stream

    async def start() -> None:
        streams.append(async_llm.generate("a b", long))
        await streams[0].__anext__()  # in the engine now; the loop closes under it

    loop = asyncio.new_event_loop()
    loop.run_until_complete(start())
    loop.close()
    assert asyncio.run(_all(async_llm, "c d"))[-1].finished
    assert async_llm.failure is None and not async_llm.stopped.is_set()
    # the orphaned request runs on to its end: the module's next test starts from an idle engine
    asyncio.run(_idle(async_llm))

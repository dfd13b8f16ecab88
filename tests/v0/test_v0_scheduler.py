from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.kv.window import blocks_behind, peak_blocks
from tandem.v0.block_manager import BlockManager, blocks_for
from tandem.v0.scheduler import Scheduler, SchedulerOutput
from tandem.v0.sequence import Sequence, SequenceStatus


def make_seq(seq_id: int, prompt_len: int, max_tokens: int) -> Sequence:
    return Sequence(seq_id, f"r{seq_id}", 0, [7] * prompt_len, max_tokens, seed=seq_id)


def make_scheduler(
    blocks: int = 16,
    size: int = 4,
    seqs: int = 8,
    tokens: int = 64,
    max_len: int = 64,
    chunked: bool = True,
) -> Scheduler:
    return Scheduler(BlockManager(blocks, size), seqs, tokens, max_len, chunked)


def run_step(sched: Scheduler) -> SchedulerOutput:
    """One fake engine step: every sequence that completes samples token 1."""
    out = sched.schedule()
    sched.update(out)
    for item in out.scheduled:
        if item.completes:
            item.seq.output_token_ids.append(1)
            if item.seq.num_output_tokens >= item.seq.max_tokens:
                sched.finish(item.seq)
    return out


def test_prefill_then_decodes() -> None:
    sched = make_scheduler()
    a, b = make_seq(0, 5, 3), make_seq(1, 3, 3)
    sched.add(a)
    sched.add(b)
    out = run_step(sched)
    assert [(s.seq.seq_id, s.num_new_tokens, s.is_decode) for s in out.scheduled] == [
        (0, 5, False),
        (1, 3, False),
    ]
    out = run_step(sched)
    assert [(s.seq.seq_id, s.num_new_tokens, s.is_decode) for s in out.scheduled] == [
        (0, 1, True),
        (1, 1, True),
    ]
    run_step(sched)
    assert a.is_finished and b.is_finished and not sched.has_unfinished()
    assert sched.block_manager.num_free_blocks == 16


def test_new_request_joins_running_batch_prefills_first() -> None:
    sched = make_scheduler()
    sched.add(make_seq(0, 4, 4))
    run_step(sched)
    sched.add(make_seq(1, 6, 4))
    out = run_step(sched)
    assert [(s.seq.seq_id, s.is_decode) for s in out.scheduled] == [(1, False), (0, True)]


def test_max_num_seqs_limits_running() -> None:
    sched = make_scheduler(seqs=2)
    for i in range(3):
        sched.add(make_seq(i, 2, 2))
    out = run_step(sched)
    assert [s.seq.seq_id for s in out.scheduled] == [0, 1]
    assert len(sched.waiting) == 1


def test_token_budget_chunks_prefill() -> None:
    sched = make_scheduler(tokens=4)
    seq = make_seq(0, 10, 2)
    sched.add(seq)
    sizes = []
    while not seq.num_output_tokens:
        out = run_step(sched)
        sizes.append([(s.num_new_tokens, s.completes) for s in out.scheduled])
    assert sizes == [[(4, False)], [(4, False)], [(2, True)]]


def test_token_budget_without_chunking_waits() -> None:
    sched = make_scheduler(tokens=8, max_len=8, chunked=False)
    sched.add(make_seq(0, 6, 2))
    sched.add(make_seq(1, 6, 1))
    out = run_step(sched)
    assert [s.seq.seq_id for s in out.scheduled] == [0]
    out = run_step(sched)
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(1, 6), (0, 1)]


def test_preemption_by_recompute() -> None:
    # 3 blocks of 2: two sequences of 2 prompt tokens each grow until one is evicted
    sched = make_scheduler(blocks=3, size=2)
    a, b = make_seq(0, 2, 3), make_seq(1, 2, 3)
    sched.add(a)
    sched.add(b)
    run_step(sched)  # both prefilled: 2 blocks, each sampled 1 token
    out = run_step(sched)  # both need a new block for slot 2: only one is left
    assert out.preempted == [b] and b.status is SequenceStatus.PREEMPTED
    assert b.num_computed_tokens == 0 and b.block_table == [] and b.num_output_tokens == 1
    assert [s.seq for s in out.scheduled] == [a]
    while not a.is_finished:
        run_step(sched)
    out = run_step(sched)  # b comes back as a 3-token prefill (prompt + its output)
    assert [(s.seq, s.num_new_tokens, s.completes) for s in out.scheduled] == [(b, 3, True)]
    while sched.has_unfinished():
        run_step(sched)
    assert b.num_output_tokens == 3 and sched.num_preemptions == 1


def test_preempted_goes_before_waiting() -> None:
    sched = make_scheduler(blocks=3, size=2)
    a, b, c = make_seq(0, 2, 3), make_seq(1, 2, 3), make_seq(2, 1, 1)
    sched.add(a)
    sched.add(b)
    run_step(sched)
    run_step(sched)  # b preempted
    sched.add(c)
    seen = []
    while sched.has_unfinished():
        seen += [s.seq.seq_id for s in run_step(sched).scheduled if not s.is_decode]
    assert seen.index(1) < seen.index(2)


@pytest.mark.parametrize(
    ("kwargs", "prompt", "max_tokens", "match"),
    [
        ({"blocks": 2, "size": 4}, 6, 4, "KV cache has only 2 blocks"),
    ],
)
def test_request_that_can_never_fit_is_rejected(kwargs, prompt, max_tokens, match) -> None:
    sched = make_scheduler(**kwargs)
    with pytest.raises(ValueError, match=match):
        sched.check_fits(prompt, max_tokens)
    assert not sched.has_unfinished()


def test_unchunked_budget_must_hold_a_whole_context() -> None:
    """Without chunked prefill a recompute is one prefill of up to max_model_len - 1
    tokens: a budget below max_model_len is refused when the scheduler is made (the
    config refuses it first), so no request can meet it later."""
    with pytest.raises(ValueError, match=r"max_num_batched_tokens must be >= max_model_len=64"):
        make_scheduler(tokens=8, chunked=False)


def test_a_window_bounds_what_a_request_needs() -> None:
    """A 60-token request in a cache of 4 blocks of 4: too many without a window, enough
    with one of 6 (its window and a chunk of 4 tokens span 3 blocks at most)."""
    with pytest.raises(ValueError, match="KV cache has only 4 blocks"):
        make_scheduler(blocks=4, tokens=4).check_fits(30, 30)
    sched = Scheduler(BlockManager(4, 4, window=6), 8, 4, 64, True)
    seq = make_seq(0, 30, 30)
    sched.add(seq)
    while sched.has_unfinished():
        run_step(sched)
        assert sched.block_manager.num_used_blocks <= peak_blocks(6, 4, 4) == 3
    assert seq.num_output_tokens == 30 and sched.block_manager.num_free_blocks == 4


def test_abort_from_each_queue_frees_blocks() -> None:
    sched = make_scheduler(blocks=4, size=2, seqs=1)
    a, b = make_seq(0, 3, 4), make_seq(1, 1, 4)
    sched.add(a)
    sched.add(b)
    run_step(sched)
    sched.finish(a)
    sched.finish(b)
    assert not sched.has_unfinished() and sched.block_manager.num_free_blocks == 4


@settings(max_examples=40, deadline=None)
@given(
    blocks=st.integers(4, 24),
    size=st.integers(1, 4),
    max_seqs=st.integers(1, 5),
    budget=st.integers(4, 20),
    chunked=st.booleans(),
    reqs=st.lists(
        st.tuples(st.integers(1, 8), st.integers(1, 6), st.integers(0, 3)), min_size=1, max_size=8
    ),
    window=st.one_of(st.none(), st.integers(1, 12)),
)
def test_scheduler_invariants(blocks, size, max_seqs, budget, chunked, reqs, window) -> None:
    """Any traffic runs to the end, blocks conserved; with a sliding window, each table's
    null entries are exactly the blocks behind its window, the rest at most a window and
    a step."""
    bm = BlockManager(blocks, size, window)
    max_len = 64 if chunked else budget  # unchunked: a step holds a whole context
    sched = Scheduler(bm, max_seqs, budget, max_len, chunked)
    pending = []
    for i, (plen, mt, delay) in enumerate(reqs):
        seq = make_seq(i, plen, mt)
        if plen + mt > max_len:
            continue  # the input processor cuts max_tokens to the room left
        try:
            sched.check_fits(plen, mt)
        except ValueError:
            continue
        pending.append((delay, seq))
    seqs = [s for _, s in pending]
    for step in range(2000):
        for delay, seq in pending:
            if delay == step:
                sched.add(seq)
        if not sched.has_unfinished() and step > 3:
            break
        out = sched.schedule()
        tokens = [s.num_new_tokens for s in out.scheduled]
        assert sum(tokens) <= budget and all(t >= 1 for t in tokens)
        assert len(sched.running) <= max_seqs
        flags = [s.is_decode for s in out.scheduled]
        assert flags == sorted(flags)  # prefills first
        assert len({id(s.seq) for s in out.scheduled}) == len(out.scheduled)
        if sched.has_unfinished() and not sched.running:
            raise AssertionError("no progress: work left but nothing running")
        for item in out.scheduled:
            need = blocks_for(item.start + item.num_new_tokens, size)
            assert len(item.seq.block_table) >= need
            if not chunked:
                assert item.completes
        run_step_update(sched, out)
        bm.check()
        live = [[b for b in s.block_table if b != bm.null_block] for s in sched.running]
        assert sum(map(len, live)) == bm.num_used_blocks
        for seq, kept in zip(sched.running, live):
            behind = len(seq.block_table) - len(kept)
            assert seq.block_table[:behind] == [bm.null_block] * behind
            if window is not None:
                assert behind == blocks_behind(seq.num_computed_tokens, window, size)
                assert len(kept) <= peak_blocks(window, budget, size)
    assert all(s.is_finished and s.num_output_tokens == s.max_tokens for s in seqs)
    assert sched.block_manager.num_free_blocks == blocks


def run_step_update(sched: Scheduler, out: SchedulerOutput) -> None:
    sched.update(out)
    for item in out.scheduled:
        if item.completes:
            item.seq.output_token_ids.append(1)
            if item.seq.num_output_tokens >= item.seq.max_tokens:
                sched.finish(item.seq)

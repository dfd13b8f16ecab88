"""Engine v0's scheduling of speculative drafts: fed after the last token when the budget
and the free blocks allow, cut or dropped otherwise (never a preemption for a draft), and
the blocks held only for refused drafts returned."""

from __future__ import annotations

from tandem.v0.block_manager import BlockManager
from tandem.v0.scheduler import Scheduler
from tandem.v0.sequence import Sequence


def _decoding(sched: Scheduler, prompt_len: int = 6, max_tokens: int = 20) -> Sequence:
    seq = Sequence(0, "r0", 0, [7] * prompt_len, max_tokens, seed=0)
    sched.add(seq)
    out = sched.schedule()
    sched.update(out)
    seq.output_token_ids.append(1)  # one sampled token: ready to decode
    return seq


def test_drafts_fed_after_the_last_token() -> None:
    sched = Scheduler(BlockManager(8, 4), 4, 64, 64)
    seq = _decoding(sched)
    seq.draft_token_ids = [5, 6, 7]
    item = sched.schedule().scheduled[0]
    assert (item.start, item.num_new_tokens, item.num_drafts, item.completes) == (6, 4, 3, True)
    assert len(seq.block_table) == 3  # 10 slots: the drafts' K/V have room


def test_drafts_cut_to_budget_and_dropped_without_blocks() -> None:
    sched = Scheduler(BlockManager(8, 4), 4, 3, 64)
    seq = _decoding(sched, prompt_len=3)
    seq.draft_token_ids = [5, 6, 7, 8]
    item = sched.schedule().scheduled[0]
    assert (item.num_new_tokens, item.num_drafts, seq.draft_token_ids) == (3, 2, [5, 6])

    tight = Scheduler(BlockManager(2, 4), 4, 64, 8)
    seq = _decoding(tight, prompt_len=4, max_tokens=4)  # 2 blocks: the next 4 tokens fit, not 6
    seq.draft_token_ids = [5, 6, 7, 8, 9]
    out = tight.schedule()
    assert (out.scheduled[0].num_drafts, out.preempted) == (0, [])


def test_refused_drafts_blocks_go_back() -> None:
    bm = BlockManager(8, 4)
    sched = Scheduler(bm, 4, 64, 64)
    seq = _decoding(sched, prompt_len=7)
    seq.draft_token_ids = [5, 6, 7, 8]
    out = sched.schedule()
    sched.update(out)
    assert seq.num_computed_tokens == 8 and len(seq.block_table) == 3  # 12 slots held
    seq.output_token_ids.append(5)  # one draft kept, then one token of the target's
    seq.output_token_ids.append(2)
    seq.num_computed_tokens = seq.num_tokens - 1
    assert bm.trim(seq, seq.num_tokens) == 0  # 10 tokens still need 3 blocks
    seq.output_token_ids[-2:] = []  # as if none was kept: 8 tokens, 2 blocks
    assert bm.trim(seq, seq.num_tokens) == 1 and bm.num_free_blocks == 6
    bm.check()

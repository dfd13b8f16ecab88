"""Counter-based uniforms and seed derivation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import reference
from tandem.kernels.rng import GAMMA, mix, mix_int, stream_keys
from tandem.kernels.sampling import derive_seed, seeded_uniform

INT64 = st.integers(-(2**63), 2**63 - 1)
U64 = (1 << 64) - 1


def _uniform_ref(seed: int, counter: int, column: int) -> float:
    return reference.seeded_uniform_value(seed, counter, column)


def test_splitmix64_known_values():
    # splitmix64 seeded with 0: its first outputs are well known
    assert mix_int(GAMMA & U64) == 0xE220A8397B1DCDAF
    assert mix_int(2 * GAMMA & U64) == 0x6E789E6AA1B965F4
    assert reference.splitmix64_mix(GAMMA & U64) == 0xE220A8397B1DCDAF
    second = (2 * GAMMA) & U64
    as_tensor = mix(torch.tensor([GAMMA, second - (1 << 64) if second >> 63 else second]))
    assert [v & U64 for v in as_tensor.tolist()] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


@settings(max_examples=40, deadline=None)
@given(seeds=st.lists(INT64, min_size=1, max_size=4), counter=INT64, vocab=st.integers(1, 7))
def test_tensor_hash_matches_python_reference(seeds, counter, vocab):
    s = torch.tensor(seeds, dtype=torch.int64)
    c = torch.full_like(s, counter)
    got = seeded_uniform(s, c, vocab)
    want = [[_uniform_ref(x, counter, j) for j in range(vocab)] for x in seeds]
    assert got.tolist() == want
    assert stream_keys(s, c).dtype == torch.int64


def test_open_interval_and_roughly_uniform():
    u = seeded_uniform(torch.arange(64), torch.zeros(64, dtype=torch.int64), 1000)
    assert u.dtype == torch.float64 and u.shape == (64, 1000)
    assert bool((u > 0).all()) and bool((u < 1).all())
    assert abs(u.mean().item() - 0.5) < 0.01
    hist = torch.histc(u.float(), bins=10, min=0, max=1)
    assert (hist - 6400).abs().max() < 400  # ~5 sigma for a binomial count


def test_rows_are_independent_of_the_batch():
    seeds = torch.tensor([11, 12, 13])
    counters = torch.tensor([0, 4, 9])
    whole = seeded_uniform(seeds, counters, 50)
    for b in range(3):
        assert torch.equal(whole[b], seeded_uniform(seeds[b : b + 1], counters[b : b + 1], 50)[0])
    flipped = seeded_uniform(seeds.flip(0), counters.flip(0), 50)
    assert torch.equal(flipped, whole.flip(0))


def test_counter_and_seed_change_the_stream():
    base = seeded_uniform(torch.tensor([5]), torch.tensor([0]), 20)
    assert not torch.equal(base, seeded_uniform(torch.tensor([5]), torch.tensor([1]), 20))
    assert not torch.equal(base, seeded_uniform(torch.tensor([6]), torch.tensor([0]), 20))


def test_derive_seed():
    assert derive_seed(1234, 0) == 1234
    seeds = [derive_seed(1234, i) for i in range(50)]
    assert len(set(seeds)) == 50
    assert all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(1234, 3) == derive_seed(1234, 3)
    assert derive_seed(1235, 3) != derive_seed(1234, 3)


@pytest.mark.parametrize(
    ("args", "error", "field"),
    [
        ((-1, 0), ValueError, "seed"),
        ((2**63, 0), ValueError, "seed"),
        ((1, -2), ValueError, "index"),
        (("1", 0), TypeError, "seed"),
        ((1, True), TypeError, "index"),
    ],
)
def test_derive_seed_bad_input(args, error, field):
    with pytest.raises(error, match=field):
        derive_seed(*args)


def test_seeded_uniform_bad_input():
    with pytest.raises(ValueError, match="seeds must have dtype"):
        seeded_uniform(torch.tensor([1], dtype=torch.int32), torch.tensor([0]), 4)
    with pytest.raises(ValueError, match=r"counters\.shape"):
        seeded_uniform(torch.tensor([1, 2]), torch.tensor([0]), 4)
    with pytest.raises(ValueError, match="vocab_size"):
        seeded_uniform(torch.tensor([1]), torch.tensor([0]), 0)

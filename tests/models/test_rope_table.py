"""The rope tables cover the context the engine runs with, not the model's whole native
context: a model of 4096 positions run with 48 holds 48 rows per rope, the same rows the
long table starts with, and a context shortened after loading shrinks them again."""

from __future__ import annotations

import pytest
import torch

from tandem.core.config.model import load_model_config
from tandem.core.engine.loader import load_model
from tandem.core.layers.rotary import RotaryEmbedding
from tandem.core.models.architectures import build_spec
from tandem.core.testing import make_model

CPU = torch.device("cpu")
NATIVE = 4096


def ropes(model: torch.nn.Module) -> list[RotaryEmbedding]:
    """The model's distinct rope modules (Gemma 3: a local and a global one)."""
    found: dict[int, RotaryEmbedding] = {}
    for layer in model.model.layers:
        found.setdefault(id(layer.self_attn.rotary), layer.self_attn.rotary)
    return list(found.values())


@pytest.fixture(scope="module")
def gemma3_dir():
    return make_model(arch="gemma3", max_position_embeddings=NATIVE)


def load(path, max_model_len: int) -> torch.nn.Module:
    return load_model(load_model_config(path, max_model_len=max_model_len, device=CPU))


def test_tables_hold_the_configured_context(gemma3_dir) -> None:
    model = load(gemma3_dir, 48)
    tables = [r.table(CPU) for r in ropes(model)]
    assert len(tables) == 2  # local and global ropes
    assert [t.shape[0] for t in tables] == [48, 48]
    # the same rows as tables of the model's own length
    for rope, table in zip(ropes(model), tables):
        full = RotaryEmbedding(rope.head_dim, NATIVE, rope.rope).table(CPU)
        assert full.shape[0] == NATIVE
        torch.testing.assert_close(table, full[:48], rtol=0, atol=0)


def test_without_a_context_the_tables_cover_the_models_own(gemma3_dir) -> None:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(gemma3_dir)
    arch = cfg.architectures[0]
    assert build_spec(cfg, arch, None).max_position == NATIVE
    assert build_spec(cfg, arch, 100).max_position == 100
    with pytest.raises(ValueError, match="max_model_len must be a positive int"):
        build_spec(cfg, arch, 0)


def test_a_shortened_context_shrinks_the_tables(gemma3_dir) -> None:
    model = load(gemma3_dir, 64)
    before = [r.table(CPU) for r in ropes(model)]
    model.set_max_model_len(32)
    after = [r.table(CPU) for r in ropes(model)]
    assert [t.shape[0] for t in after] == [32, 32]
    for old, new in zip(before, after):
        torch.testing.assert_close(new, old[:32], rtol=0, atol=0)
    rope = ropes(model)[0]
    q, k = torch.zeros(3, 2, rope.head_dim), torch.zeros(3, 1, rope.head_dim)
    with pytest.raises(ValueError, match=r"positions must be in \[0, 32\)"):
        rope(torch.tensor([0, 1, 32]), q, k)


def test_use_checks_its_positions() -> None:
    from tandem.core.spec.rope import RopeSpec

    rope = RotaryEmbedding(16, 8, RopeSpec(10000.0))
    with pytest.raises(ValueError, match="max_position must be a positive int"):
        rope.use(RopeSpec(10000.0), 0)
    rope.use(RopeSpec(10000.0), 4)
    assert rope.table(CPU).shape == (4, 16)

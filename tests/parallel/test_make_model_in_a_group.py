"""A tiny checkpoint made inside a process group is whole on every rank: transformers'
``save_pretrained`` writes nothing on a rank other than 0, and a rank that made a model
would once leave one without its config and weights in the run's cache."""

from __future__ import annotations

from pathlib import Path

from tandem.core.testing import make_model

from .test_sharded_forward import run_ranks

RANK = Path(__file__).with_name("rank_make.py")


def test_every_rank_writes_the_whole_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "ranks"
    run_ranks(2, ["qwen2"], out, dtype=None, script=RANK, premake=False)
    want = make_model(tmp_path / "here", size="tiny", arch="qwen2")
    for rank in (0, 1):
        got = out / f"rank{rank}" / "qwen2"
        names = sorted(p.name for p in got.iterdir())
        assert names == sorted(p.name for p in want.iterdir()), (rank, names)
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            assert (got / name).read_bytes() == (want / name).read_bytes(), (rank, name)

"""``tandem cache list|size|clear`` over a cache folder made here."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.core import disk_cache
from tandem.core.cli import main


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    (root / "models" / "llama-tiny-1").mkdir(parents=True)
    (root / "models" / "llama-tiny-1" / "model.safetensors").write_bytes(b"x" * 3000)
    (root / "models" / "qwen2-tiny-2").mkdir()
    (root / "models" / "qwen2-tiny-2" / "config.json").write_bytes(b"x" * 500)
    (root / "downloads" / "pkg-1").mkdir(parents=True)
    (root / "downloads" / "pkg-1" / "model.gguf").write_bytes(b"x" * 2_000_000)
    (root / "stray.txt").write_bytes(b"x" * 7)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.bin").write_bytes(b"x" * 10_000)
    (root / "tokenizers").mkdir()
    (root / "tokenizers" / "linked").symlink_to(outside)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(root))
    return root


def test_list_shows_each_entry_kind_and_size(cache: Path, capsys) -> None:
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{cache}: 5 entries, 2.0 MB")
    rows = [line.split() for line in out[1:]]
    assert ["2.0", "MB", "downloads", "downloads/pkg-1"] in rows
    assert ["3.0", "kB", "models", "models/llama-tiny-1"] in rows
    assert ["500", "B", "models", "models/qwen2-tiny-2"] in rows
    assert ["7", "B", "other", "stray.txt"] in rows
    link = next(r for r in rows if r[-1] == "tokenizers/linked")
    assert link[1] == "B"  # the link itself, not the 10 kB it points to
    assert main(["cache", "list", "--kind", "models"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{cache}: 2 entries of kind models, 3.5 kB") and "downloads" not in out


def test_size_is_the_total_per_kind(cache: Path, capsys) -> None:
    assert main(["cache", "size"]) == 0
    out = capsys.readouterr().out
    assert "3.5 kB  models" in out and "2.0 MB  downloads" in out
    assert out.splitlines()[-1] == f"2.0 MB in {cache}"


def test_clear_with_yes_removes_only_the_kinds_asked(cache: Path, tmp_path: Path, capsys):
    assert main(["cache", "clear", "--kind", "models", "--yes"]) == 0
    assert "removed 2 entries of kind models (3.5 kB)" in capsys.readouterr().out
    assert not any((cache / "models").iterdir()) and (cache / "downloads" / "pkg-1").is_dir()
    assert main(["cache", "clear", "-y"]) == 0
    assert [e.name(cache) for e in disk_cache.entries(cache)] == []
    assert (tmp_path / "outside" / "keep.bin").is_file()  # a link is removed, not followed
    assert main(["cache", "clear", "--yes"]) == 0
    assert "nothing to clear" in capsys.readouterr().out


@pytest.mark.parametrize(("answer", "removed"), [("y\n", True), ("no\n", False), ("", False)])
def test_clear_asks_first(cache: Path, monkeypatch, capsys, answer: str, removed: bool) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
    code = main(["cache", "clear", "--kind", "downloads"])
    out, err = capsys.readouterr()
    assert "remove 1 entry of kind downloads (2.0 MB) from" in out
    assert ("removed 1 entry" in out) == removed
    assert code == (0 if removed else 1)
    assert (cache / "downloads" / "pkg-1").exists() != removed
    assert ("nothing removed" in err) != removed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cache", "lst"], "invalid choice: 'lst' (choose from 'list', 'size', 'clear'); did you"),
        (["cache", "list", "--kind", "model"], "did you mean 'models'?"),
        (["cahce", "list"], "did you mean 'cache'?"),
        (["cache", "clear", "--yess"], "unrecognized argument --yess; did you mean --yes?"),
        (["cache"], "the following arguments are required: ACTION"),
    ],
)
def test_mistakes_are_answered_with_the_nearest(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert message in capsys.readouterr().err


def test_every_flag_has_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tandem.core.cli", "cache", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    for flag in ("--kind KIND", "--yes", "ACTION"):
        line = next(x for x in done.stdout.splitlines() if x.strip().startswith(flag))
        assert len(line.split()) > len(flag.split()), line
    for kind in disk_cache.KINDS:
        assert kind in done.stdout


def test_a_missing_cache_holds_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "none"))
    assert main(["cache", "size"]) == 0
    assert capsys.readouterr().out.strip() == f"0 B in {tmp_path / 'none'}"

"""A directory built beside its place and renamed in: whole or not at all, and one copy
when two builders race."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.core.atomic_dir import build_into


def _writes(text: str):
    def build(tmp: Path) -> bool:
        (tmp / "data").write_text(text)
        (tmp / "DONE").write_text("")
        return True

    return build


def test_a_build_lands_whole_and_leaves_no_scratch(tmp_path):
    target = tmp_path / "cache" / "entry"
    assert build_into(target, "DONE", _writes("one"))
    assert (target / "data").read_text() == "one"
    assert sorted(p.name for p in target.parent.iterdir()) == ["entry"]


def test_a_refused_build_puts_nothing_in_place(tmp_path):
    target = tmp_path / "entry"
    assert not build_into(target, "DONE", lambda tmp: False)
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_a_failing_build_raises_and_removes_its_scratch(tmp_path):
    def broken(tmp: Path) -> bool:
        (tmp / "half").write_text("")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_into(tmp_path / "entry", "DONE", broken)
    assert list(tmp_path.iterdir()) == []


def test_the_second_of_two_racing_builds_keeps_the_first_copy(tmp_path):
    target = tmp_path / "entry"

    def racing(tmp: Path) -> bool:  # another process lands its copy meanwhile
        build_into(target, "DONE", _writes("first"))
        return _writes("second")(tmp)

    assert build_into(target, "DONE", racing)
    assert (target / "data").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_a_half_copy_in_the_way_is_an_error(tmp_path):
    target = tmp_path / "entry"
    target.mkdir()
    (target / "stray").write_text("")  # not empty, no DONE: not a whole copy
    with pytest.raises(OSError):
        build_into(target, "DONE", _writes("x"))

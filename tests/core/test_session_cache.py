"""A test run's own cache: started from the user's without writing to it."""

from __future__ import annotations

from pathlib import Path

from tandem.core.testing.session_cache import PREFIX, session_cache


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
    }


def test_it_links_downloads_copies_kernels_and_leaves_the_source_as_it_was(tmp_path: Path):
    user = tmp_path / "user"
    (user / "downloads" / "pkg-1").mkdir(parents=True)
    (user / "downloads" / "pkg-1" / "model.gguf").write_bytes(b"g" * 100)
    (user / "native").mkdir()
    (user / "native" / "tandem_kernels-abc.so").write_bytes(b"so")
    (user / "models" / "llama-tiny-1").mkdir(parents=True)
    before = _listing(user)
    root = session_cache(user, parent=str(tmp_path))
    assert root.name.startswith(PREFIX) and root.parent == tmp_path
    linked = root / "downloads" / "pkg-1"
    assert linked.is_symlink() and (linked / "model.gguf").read_bytes() == b"g" * 100
    copied = root / "native" / "tandem_kernels-abc.so"
    assert copied.read_bytes() == b"so" and not copied.is_symlink()
    assert not (root / "models").exists()  # made by the run itself
    (root / "tokenizers").mkdir()  # the run writes here, never to the source
    assert _listing(user) == before


def test_an_empty_source_gives_an_empty_cache(tmp_path: Path) -> None:
    root = session_cache(tmp_path / "missing", parent=str(tmp_path))
    assert list(root.iterdir()) == []

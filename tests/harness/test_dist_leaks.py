"""Distributed leak kinds: a torch.distributed process group, a Ray runtime, a listening
socket and a /dev/shm segment left by a test fail that test, named, and are undone."""

from __future__ import annotations

import importlib.util
import os
import time
import types
from pathlib import Path

import pytest
from hx_support import run


@pytest.fixture
def demo(suite: pytest.Pytester) -> pytest.Pytester:
    suite.makepyfile(demo="")
    return suite


def test_listening_socket_and_shm_segment_are_named_and_undone(demo: pytest.Pytester) -> None:
    demo.makepyfile(
        test_x="""
        import mmap, os, socket, uuid

        KEEP = []

        def segment():
            # what shm_open does: a file in /dev/shm, mapped (no resource-tracker process)
            path = f"/dev/shm/demo-{uuid.uuid4().hex}"
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            os.ftruncate(fd, 64)
            return path, mmap.mmap(fd, 64), fd

        def test_leaks():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            KEEP.extend([s, *segment()])

        def test_closed_and_unlinked():
            assert KEEP[0].fileno() == -1
            assert not os.path.exists(KEEP[1])

        def test_closed_in_time_is_fine():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            s.close()
            path, mem, fd = segment()
            mem.close()
            os.close(fd)
            os.unlink(path)
    """
    )
    result = run(demo, "--isolate", "none", "-p", "no:randomly")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaks*",
            "*listening socket on 127.0.0.1:* is still open (fd *, held by a socket object)*",
            "*shared-memory segment /dev/shm/demo-* is still there*",
        ]
    )


def test_ray_runtime_left_up_is_named_and_shut_down(demo: pytest.Pytester) -> None:
    # a stand-in for the ray module: the check reads only is_initialized / shutdown
    demo.makepyfile(
        ray="""
        UP = []

        def init():
            UP.append(1)

        def is_initialized():
            return bool(UP)

        def shutdown():
            UP.clear()
    """,
        test_x="""
        import ray

        def test_leaks():
            ray.init()

        def test_after():
            assert not ray.is_initialized()
    """,
    )
    result = run(demo, "--isolate", "none", "-p", "no:randomly")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*Ray runtime is still up*; call ray.shutdown()*"])


def test_process_group_left_initialised_is_named_and_destroyed(demo: pytest.Pytester) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    demo.makepyfile(
        test_x="""
        import torch.distributed as dist

        def test_leaks():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

        def test_after():
            assert not dist.is_initialized()
    """
    )
    result = run(demo, "--isolate", "none", "-p", "no:randomly")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*torch.distributed process group is still initialised (backend gloo, rank 0 of 1);"
            " call torch.distributed.destroy_process_group()*"
        ]
    )


def test_shm_listing_is_reused_only_while_the_folder_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder is listed again whenever a name came or went (its stat changes), and
    whenever its last change was too recent to be sure the listing holds it; otherwise the
    last listing is the answer, with no listing made."""
    from tandem.harness.leaks import shm

    folder = tmp_path / "shm"
    folder.mkdir()
    ahead = [0]  # how far the clock the check reads runs ahead of the folder's times
    clock = types.SimpleNamespace(time_ns=lambda: time.time_ns() + ahead[0])
    monkeypatch.setattr(shm, "time", clock)
    monkeypatch.setattr(shm, "SHM", str(folder))
    listings: list[str] = []
    real = os.listdir
    monkeypatch.setattr(shm.os, "listdir", lambda p: listings.append(p) or real(p))
    names = shm._Listing()
    assert names() == frozenset() and names() == frozenset()
    assert len(listings) == 2  # changed just now: not trusted
    ahead[0] = 10 * shm.STEP_NS
    assert names() == frozenset() and len(listings) == 3
    assert names() == frozenset() and len(listings) == 3  # trusted: not listed
    (folder / "seg").write_bytes(b"")
    assert names() == frozenset({"seg"}) and len(listings) == 4
    assert names() == frozenset({"seg"}) and len(listings) == 4
    (folder / "seg").unlink()
    assert names() == frozenset() and len(listings) == 5

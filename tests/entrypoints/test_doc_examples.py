"""The examples of the README and of ``docs/*.md``, run as a reader would paste them.

Python blocks run in a fresh interpreter (one per page, each block in a namespace of its
own), shell blocks in bash from the repository root, served examples against a real
``tandem serve`` on a free port; every ``tandem`` command of every block is parsed by the
real parser, and every benchmark named must exist with the flags given. How each block is
run is written beside it in the page (``docpages`` says how). The README's examples use the
real default model, ``smollm2``; the docs' the tiny one where the example allows.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from docpages import (
    HOWS,
    PAGES,
    ROOT,
    Block,
    all_blocks,
    blocks,
    broken_links,
    commands,
    python_program,
    served,
    with_port,
)

from tandem.core.cli import build_parser

# the examples run on the default engine; the harness runs this module once, on it
pytestmark = pytest.mark.engines("v1")

README_MAX_LINES = 150
MAX_COLUMNS = 100
TIMEOUT = 600  # seconds for one page's examples (a loaded 2-core machine)


def _run(argv: list[str], what: str, timeout: float = TIMEOUT) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _pages_with(how: str) -> list[str]:
    return [p for p in PAGES if any(b.how == how for b in blocks(p))]


def _served_pages() -> list[object]:
    slow = [pytest.param(p, marks=pytest.mark.slow) for p in _pages_with("slow-server")]
    return [*_pages_with("server"), *slow]


def test_pages_fit_the_rules() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= README_MAX_LINES, f"README.md has {len(readme)} lines"
    long = [
        f"{page}:{n}: {len(line)} columns"
        for page in PAGES
        for n, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > MAX_COLUMNS
    ]
    assert not long, long
    assert not [p for page in PAGES for p in broken_links(page)]
    unknown = [f"{b.where}: {b.how!r}" for b in all_blocks() if b.how not in HOWS]
    assert not unknown, f"unknown doc-test directives (known: {HOWS}): {unknown}"
    untested = [b.where for b in all_blocks() if b.lang not in ("python", "bash", "toml", "")]
    assert not untested, f"blocks in a language the tests do not run: {untested}"


def test_every_tandem_command_parses() -> None:
    found = [(b, w) for b in all_blocks() if b.lang == "bash" for w in commands(b)]
    tandem = [(b, w) for b, w in found if w[0] == "tandem"]
    assert len(tandem) >= 10, tandem
    parser = build_parser()
    for block, words in tandem:
        try:
            parser.parse_args(words[1:])
        except SystemExit as exc:
            pytest.fail(f"{block.where}: {' '.join(words)!r} does not parse (exit {exc.code})")


def test_every_benchmark_named_exists_with_its_flags() -> None:
    found = [(b, w) for b in all_blocks() if b.lang == "bash" for w in commands(b)]
    scripts = [(b, w) for b, w in found if w[0] in ("python", "bash") and w[1:2]]
    scripts = [(b, w) for b, w in scripts if w[1].startswith("benchmarks/")]
    assert len(scripts) >= 10
    for block, words in scripts:
        source = ROOT / words[1]
        assert source.is_file(), f"{block.where}: {words[1]} does not exist"
        text = source.read_text(encoding="utf-8")
        for flag in (w for w in words[2:] if w.startswith("--")):
            assert f'"{flag}"' in text, f"{block.where}: {words[1]} has no flag {flag}"


def test_the_readme_shows_the_default_model() -> None:
    readme = [b for b in blocks("README.md") if b.how != "parse"]
    assert readme and all("smollm2" in b.code for b in readme), [b.where for b in readme]


def _examples(how: str, lang: str) -> list[Block]:
    return [b for b in all_blocks() if b.how == how and b.lang == lang]


def _shell(examples: list[Block], port: int | None = None) -> None:
    for b in examples:
        code = b.code if port is None else with_port(b.code, port)
        _run(["bash", "-euo", "pipefail", "-c", code], f"{b.where} (shell)")


@pytest.mark.parametrize("how", ["run", pytest.param("slow", marks=pytest.mark.slow)])
def test_python_examples_run(how: str) -> None:
    """Every page's Python examples in one fresh interpreter (each block in a namespace of
    its own), so the interpreter and its imports are paid once."""
    examples = _examples(how, "python")
    if how == "run":
        assert len(examples) >= 5, [b.where for b in examples]
    if examples:
        _run([sys.executable, "-c", python_program(examples)], f"the {how!r} Python examples")


@pytest.mark.parametrize("how", ["run", pytest.param("slow", marks=pytest.mark.slow)])
def test_shell_examples_run(how: str) -> None:
    examples = _examples(how, "bash")
    if how == "slow":
        assert examples
    _shell(examples)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[int]:
    """The page's ``tandem serve`` command, on a free port, until the test ends."""
    block, _ = served(request.param)
    assert block is not None
    (words,) = commands(block)
    assert words[:2] == ["tandem", "serve"] and "--port" not in words, block.where
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([*words, "--port", str(port)], cwd=ROOT, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert proc.poll() is None, f"{block.where}: exited\n{_tail(tmp_path)}"
            assert time.monotonic() < deadline, f"{block.where}: not up\n{_tail(tmp_path)}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                time.sleep(0.5)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _tail(tmp_path: Path) -> str:
    return (tmp_path / "server.log").read_text(errors="replace")[-3000:]


@pytest.mark.parametrize("server", _served_pages(), indirect=True)
def test_served_examples_run(server: int, request: pytest.FixtureRequest) -> None:
    page = request.node.callspec.params["server"]
    _, clients = served(page)
    assert clients, f"{page}: a server block without client blocks"
    python = [b for b in clients if b.lang == "python"]
    if python:
        program = with_port(python_program(python), server)
        _run([sys.executable, "-c", program], f"{page}'s client examples")
    _shell([b for b in clients if b.lang == "bash"], port=server)


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with("pytest"))
def test_pytest_examples_pass(page: str, tmp_path: Path) -> None:
    for n, block in enumerate(b for b in blocks(page) if b.how == "pytest"):
        test_file = tmp_path / f"test_doc_example_{n}.py"
        test_file.write_text(block.code)
        env = {k: v for k, v in os.environ.items() if k != "TANDEM_ENGINE"}
        argv = [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:randomly"]
        argv += ["-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml")]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
        assert done.returncode == 0, f"{block.where}:\n{done.stdout[-3000:]}"

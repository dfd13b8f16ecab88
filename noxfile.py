"""nox sessions: tests per engine, kernels, harness, lint and benchmarks.

Every session installs the same thing (requirements-dev.txt: the five packages editable
plus the dev tools, with torch pinned to the CPU build by constraints.txt).
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "kernels", "harness", "tests"]
nox.options.reuse_existing_virtualenvs = True

ENGINES = ["v0", "v1"]


def install(session: nox.Session) -> None:
    session.install("-r", "requirements-dev.txt")


@nox.session
@nox.parametrize("engine", ENGINES)
def tests(session: nox.Session, engine: str) -> None:
    """The project's suites on one engine (`nox -s "tests(engine='v1')"`)."""
    install(session)
    session.run("pytest", "--engines", engine, *session.posargs)


@nox.session
def kernels(session: nox.Session) -> None:
    """Kernel ops: opcheck and property tests against the references."""
    install(session)
    session.run("pytest", "tests/kernels", *session.posargs)


@nox.session
def harness(session: nox.Session) -> None:
    """The harness plugin's own pytester suite."""
    install(session)
    session.run("pytest", "tests/harness", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks with their side-by-side baselines (slow)."""
    install(session)
    session.run("python", "benchmarks/forward.py", *session.posargs)
    session.run("python", "benchmarks/throughput.py", *session.posargs)

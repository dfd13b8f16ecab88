"""Outside suites: well-known projects' own tests, plain pytest beside the harness, one run.

    python benchmarks/outside_suites.py [--projects click,attrs] [--repeats 1] [--forked]
                                        [--harness-ref REF] [--watch] [--fresh] [--timeout 900]

For each project (versions pinned below) it makes a virtual environment under
``benchmarks/results/outside/<name>-<version>/venv`` holding only the local
``tandem-harness`` (``./harness`` as it is in the working tree, or as committed at
``--harness-ref``; reinstalled every run), pytest and the project with its test
dependencies from PyPI; it fetches the project's sdist (``pip download --no-binary :all:
--no-deps``) for its tests, and gives it an empty ``pytest.ini`` when it has no pytest
configuration of its own (else pytest would take this repository's). Then it runs the
project's own suite four ways, in turn: plain pytest (``-p no:tandem_harness``), the
harness with its defaults (switched on by ``--isolate engine``: one child forked per
engine, here one for the whole run), ``--isolate module`` (a fresh child per test
module) and ``--isolate none`` (no child: the leak checks in the pytest process).
``--watch`` adds a run of the defaults with ``harness_watch_prefixes`` set to the
project's own packages; ``--forked`` adds pytest-forked (``--forked``: a fork of the
pytest process per test, the harness off) to the venv and a run with it, the yardstick
for ``--isolate test``. Beside the ratios the tables give each mode's cost per test in
milliseconds ((mode - plain) / tests). Each run writes a JUnit XML file; the outcomes (passed,
failed, error, skipped, xfailed) are compared per test id against the plain run. Prints a
table of wall times, ratios and whether the outcomes match, then the same for CPU time
(user + system of pytest and every process it waited for: steadier than wall time on a
machine other work shares), lists every mismatch with the harness's message, and writes
``summary.json`` beside the environments. With ``--repeats`` the best run of each mode
counts. Exits 1 when a run broke or
an outcome differs. Nothing here is a test; the first run downloads and installs (about a
minute per project), later runs reuse the environments (``--fresh`` rebuilds them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
import venv
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"
RESULTS = ROOT / "benchmarks" / "results" / "outside"
PYTEST = "pytest==9.0.3"
FORKED = "pytest-forked==1.6.0"
MODES = {
    "plain": ("-p", "no:tandem_harness"),
    "default": ("--isolate", "engine"),
    "module": ("--isolate", "module"),
    "none": ("--isolate", "none"),
}
OPTIONAL = {"forked": ("-p", "no:tandem_harness", "--forked")}


@dataclass(frozen=True, slots=True)
class Project:
    """A PyPI project whose sdist ships its tests; ``tests``: pytest's paths in the sdist."""

    name: str
    version: str
    deps: tuple[str, ...] = ()
    tests: tuple[str, ...] = ("tests",)
    packages: tuple[str, ...] = ()  # its import names, for --watch


PROJECTS = {
    p.name: p
    for p in (
        Project("click", "8.3.1", packages=("click",)),
        Project("more-itertools", "10.8.0", packages=("more_itertools",)),
        Project("toolz", "1.1.0", tests=("toolz",), packages=("toolz", "tlz")),
        Project(
            "attrs",
            "25.4.0",
            deps=("hypothesis==6.170.17", "pympler==1.1", "cloudpickle==3.1.3"),
            packages=("attr", "attrs"),
        ),
    )
}
DEFAULT = ("click", "more-itertools", "toolz", "attrs")


@dataclass(slots=True)
class Run:
    seconds: float
    code: int
    cpu: float = 0.0  # user + system seconds of the run's whole process tree
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    tail: str = ""


def _sh(cmd: list[str], cwd: Path | None = None, timeout: float | None = None) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env(), check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def _env() -> dict[str, str]:
    """This environment less what would steer the outside interpreter or the harness."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "HARNESS_ENGINES")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TANDEM_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _harness_source(ref: str, into: Path) -> Path:
    """``./harness`` as it is now (no ref), or as committed at ``ref`` (unpacked into ``into``)."""
    if not ref:
        return HARNESS
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "harness"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "harness"


def _prepare(
    project: Project, harness: Path, fresh: bool, say, forked: bool = False
) -> tuple[Path, Path]:
    """The project's venv python and its unpacked sdist (made once, reused after)."""
    home = RESULTS / f"{project.name}-{project.version}"
    env_dir, src_dir = home / "venv", home / "src"
    pins = [PYTEST, f"{project.name}=={project.version}", *project.deps]
    pins += [FORKED] if forked else []
    stamp = env_dir / "outside-pins.txt"
    python = env_dir / "bin" / "python"
    if fresh or not stamp.exists() or stamp.read_text() != "\n".join(pins):
        shutil.rmtree(env_dir, ignore_errors=True)
        say(f"  {project.name}: venv with {' '.join(pins)} and ./harness")
        venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        _sh([str(python), "-m", "pip", "install", "-q", *pins, str(harness)], timeout=900)
        stamp.write_text("\n".join(pins))
    else:
        # the harness is reinstalled every run: its code is what is measured
        pip = [str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps"]
        _sh([*pip, str(harness)], timeout=600)
    if fresh or not (src_dir / "PKG-INFO").exists():
        shutil.rmtree(src_dir, ignore_errors=True)
        download = home / "sdist"
        shutil.rmtree(download, ignore_errors=True)
        say(f"  {project.name}: sdist {project.name}=={project.version}")
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps"]
        _sh([*pip, f"{project.name}=={project.version}", "-d", str(download)], timeout=600)
        (archive,) = download.glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(home / "unpack", filter="data")
        (top,) = (home / "unpack").iterdir()
        top.rename(src_dir)
        shutil.rmtree(home / "unpack")
        if not _has_pytest_config(src_dir):
            # without one pytest would climb out of the sdist and take this repository's
            # configuration (its harness_* options): stop it at the project's root
            (src_dir / "pytest.ini").write_text("[pytest]\n")
    return python, src_dir


def _has_pytest_config(src: Path) -> bool:
    """Whether pytest finds its configuration in ``src`` itself (as in the project's checkout)."""
    if (src / "pytest.ini").exists() or (src / ".pytest.ini").exists():
        return True
    marks = {
        "pyproject.toml": "[tool.pytest",
        "tox.ini": "[pytest]",
        "setup.cfg": "[tool:pytest]",
    }
    for name, mark in marks.items():
        file = src / name
        if file.exists() and mark in file.read_text(errors="replace"):
            return True
    return False


def _outcome(case: ET.Element) -> tuple[str, str]:
    """(outcome, message) of a JUnit ``testcase``; the worst phase wins."""
    by_tag = {child.tag: child for child in case}
    for tag, name in (("failure", "failed"), ("error", "error")):
        if tag in by_tag:
            el = by_tag[tag]
            text = (el.get("message") or "") + "\n" + (el.text or "")
            return name, text.strip()
    if "skipped" in by_tag:
        el = by_tag["skipped"]
        kind = "xfailed" if el.get("type") == "pytest.xfail" else "skipped"
        return kind, (el.get("message") or "").strip()
    return "passed", ""


def _parse(xml: Path) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = _outcome(case)
        if test in outcomes:  # one id reported twice (a teardown error after a pass)
            rank = ("passed", "xfailed", "skipped", "error", "failed")
            if rank.index(outcome) <= rank.index(outcomes[test]):
                continue
        outcomes[test], messages[test] = outcome, message
    return outcomes, messages


def _flags(project: Project, mode: str) -> tuple[str, ...]:
    if mode == "watch":
        return (*MODES["default"], "-o", "harness_watch_prefixes=" + " ".join(project.packages))
    return MODES.get(mode) or OPTIONAL[mode]


def _run(python: Path, src: Path, project: Project, mode: str, timeout: float) -> Run:
    xml = src.parent / f"junit-{mode}.xml"
    xml.unlink(missing_ok=True)
    cmd = [str(python), "-m", "pytest", *project.tests, *_flags(project, mode)]
    cmd += ["-q", "-p", "no:cacheprovider", f"--junitxml={xml}", "-o", "junit_family=xunit1"]
    start = time.perf_counter()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(
            cmd, cwd=src, capture_output=True, text=True, timeout=timeout, env=_env(), check=False
        )
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out = -1, f"timed out after {timeout:g} s\n{exc.stdout or ''}{exc.stderr or ''}"
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    (src.parent / f"output-{mode}.txt").write_text(out if isinstance(out, str) else repr(out))
    run = Run(seconds, code, cpu, tail=out[-2500:] if isinstance(out, str) else "")
    if xml.exists():
        run.outcomes, run.messages = _parse(xml)
    return run


def _counts(outcomes: dict[str, str]) -> str:
    tally: dict[str, int] = {}
    for outcome in outcomes.values():
        tally[outcome] = tally.get(outcome, 0) + 1
    return " ".join(f"{k} {v}" for k, v in sorted(tally.items()))


def _harness_version(ref: str) -> str:
    if ref:
        return _sh(["git", "-C", str(ROOT), "rev-parse", "--short", ref]).strip() + f" ({ref})"
    try:
        head = _sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]).strip()
        dirty = _sh(["git", "-C", str(ROOT), "status", "--porcelain", "--", "harness/src"])
    except (RuntimeError, OSError):
        return "unknown"
    return head + (" + uncommitted harness/src changes" if dirty.strip() else "")


def _table(summary: dict[str, dict], modes: list[str], key: str, title: str) -> list[str]:
    """One line per project: each mode's best ``key`` (seconds), ratios to plain, outcomes."""
    head = f"{title}\n{'project':<22}{'tests':>6}" + "".join(f"{m + ' s':>10}" for m in modes)
    head += "".join(f"{m + '/plain':>15}" for m in modes[1:])
    lines = [head + "".join(f"{m + ' ms/test':>16}" for m in modes[1:]) + "  outcomes"]
    for name, row in summary.items():
        s = row[key]
        same = "same" if not row["mismatches"] and not row["broken_runs"] else "DIFFER"
        if row["broken_runs"]:
            same += f" (broken: {', '.join(row['broken_runs'])})"
        elif row["mismatches"]:
            same += f" ({len(row['mismatches'])})"
        line = f"{name + ' ' + row['version']:<22}{row['tests']:>6}"
        line += "".join(f"{s[m]:>10.1f}" for m in modes)
        line += "".join(f"{s[m] / max(s['plain'], 1e-9):>14.2f}x" for m in modes[1:])
        tests = max(row["tests"], 1)
        line += "".join(f"{(s[m] - s['plain']) * 1000 / tests:>16.2f}" for m in modes[1:])
        lines.append(f"{line}  {same}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="projects: "
        + ", ".join(f"{p.name} {p.version}" for p in PROJECTS.values())
        + f" (default: {','.join(DEFAULT)})",
    )
    parser.add_argument("--projects", default=",".join(DEFAULT), help="comma-separated names")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode, best counts")
    parser.add_argument(
        "--watch",
        action="store_true",
        help="a fourth run: the defaults with harness_watch_prefixes set to the project's "
        "packages (patches, caches and env writes of its code are checked too)",
    )
    parser.add_argument(
        "--forked",
        action="store_true",
        help=f"add {FORKED} to the venvs and a run with --forked (the harness off)",
    )
    parser.add_argument("--fresh", action="store_true", help="rebuild venvs and sdists")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per pytest run")
    parser.add_argument(
        "--harness-ref",
        default="",
        metavar="REF",
        help="install the harness as committed at this git ref (default: the working tree)",
    )
    parser.add_argument("--list", action="store_true", help="print the pinned projects and stop")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.projects.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROJECTS]
    if unknown or not names:
        parser.error(f"--projects: unknown {unknown or 'none given'}; known: {', '.join(PROJECTS)}")
    if args.repeats < 1:
        parser.error(f"--repeats: expected a positive integer, got {args.repeats}")
    if args.list:
        for p in PROJECTS.values():
            print(f"{p.name}=={p.version}  tests: {' '.join(p.tests)}  deps: {' '.join(p.deps)}")
        return 0

    def say(text: str) -> None:
        print(text, flush=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    harness = _harness_source(args.harness_ref, RESULTS / "harness-src")
    version = _harness_version(args.harness_ref)
    say(f"harness: {harness} at {version}; {PYTEST}; python {sys.version.split()[0]}")
    modes = [*MODES, *(["watch"] if args.watch else []), *(["forked"] if args.forked else [])]
    summary: dict[str, dict] = {}
    broken = False
    for name in names:
        project = PROJECTS[name]
        python, src = _prepare(project, harness, args.fresh, say, args.forked)
        runs: dict[str, Run] = {}
        cpus: dict[str, float] = {}  # best CPU time per mode (its run may not be the fastest)
        for _ in range(args.repeats):
            for mode in modes:  # the modes take turns, so a slow spell hits all of them
                run = _run(python, src, project, mode, args.timeout)
                counts = _counts(run.outcomes)
                say(
                    f"  {name} {mode:<7} {run.seconds:7.1f} s  cpu {run.cpu:7.1f} s  "
                    f"exit {run.code}  {counts}"
                )
                if mode not in runs or run.seconds < runs[mode].seconds:
                    runs[mode] = run
                if mode not in cpus or run.cpu < cpus[mode]:
                    cpus[mode] = run.cpu
        base = runs["plain"]
        mismatches = []
        for mode in modes[1:]:
            run = runs[mode]
            for test in sorted(set(base.outcomes) | set(run.outcomes)):
                ours, theirs = base.outcomes.get(test, "absent"), run.outcomes.get(test, "absent")
                if ours != theirs:
                    mismatches.append(
                        {
                            "mode": mode,
                            "test": test,
                            "plain": ours,
                            "harness": theirs,
                            "message": run.messages.get(test, "")[:1500],
                        }
                    )
        empty = [m for m, r in runs.items() if not r.outcomes or r.code not in (0, 1)]
        broken |= bool(empty) or bool(mismatches)
        summary[name] = {
            "version": project.version,
            "tests": len(base.outcomes),
            "seconds": {m: round(r.seconds, 2) for m, r in runs.items()},
            "cpu": {m: round(c, 2) for m, c in cpus.items()},
            "exit": {m: r.code for m, r in runs.items()},
            "counts": {m: _counts(r.outcomes) for m, r in runs.items()},
            "broken_runs": {m: runs[m].tail for m in empty},
            "mismatches": mismatches,
        }

    for key, title in (("seconds", "wall time"), ("cpu", "CPU time (user + system)")):
        say("")
        for line in _table(summary, modes, key, title):
            say(line)
    for name, row in summary.items():
        for mode, tail in row["broken_runs"].items():
            code = row["exit"][mode]
            say(f"\n{name} {mode}: exit {code}, no usable report; last output:\n{tail}")
        for m in row["mismatches"]:
            say(f"\n{name} [{m['mode']}] {m['test']}: plain {m['plain']}, harness {m['harness']}")
            if m["message"]:
                say("    " + m["message"][:800].replace("\n", "\n    "))
    data = {"harness": version, "pytest": PYTEST, "projects": summary}
    (RESULTS / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
    say(f"\nwritten: {RESULTS / 'summary.json'} (outputs and JUnit files beside each venv)")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())

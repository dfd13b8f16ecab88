"""The local runner: results, timeouts, empty runs, GPU skips, parallelism, logs and the CLI."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cihelpers import commit

from ci import cli, parse
from ci.counts import parse_closing
from ci.model import Pipeline
from ci.runner import Result, Runner, table

WAIT = (
    "import pathlib, sys, time\n"
    "pathlib.Path(sys.argv[1]).touch()\n"
    "end = time.monotonic() + 20\n"
    "while not pathlib.Path(sys.argv[2]).exists():\n"
    "    if time.monotonic() > end: sys.exit(1)\n"
    "    time.sleep(0.02)\n"
)


def pipeline(tmp: Path, steps: list[dict[str, Any]]) -> Pipeline:
    data = {
        "settings": {"python": ["3.11"], "install": "true", "engines": ["v0", "v1"], "always": []},
        "step": steps,
    }
    return parse(data, [f"{t}/test_a.py" for s in steps for t in s.get("tests", [])])


def run(tmp: Path, steps: list[dict[str, Any]], **options: Any) -> tuple[list[Result], str]:
    out = io.StringIO()
    pipe = pipeline(tmp, steps)
    results = Runner(pipe, tmp, out=out, **options).run(pipe.jobs())
    return results, out.getvalue()


def py(code: str) -> str:
    return f"python -c {code!r}"


def test_pass_fail_and_streamed_output(tmp_path: Path) -> None:
    results, out = run(
        tmp_path,
        [
            {"label": "good", "command": py("print('hello from good')")},
            {"label": "bad", "command": py("import sys; print('oops'); sys.exit(3)")},
        ],
    )
    assert [(r.job, r.status, r.returncode) for r in results] == [
        ("good", "passed", 0),
        ("bad", "failed", 3),
    ]
    assert "[good] hello from good" in out and "[bad] oops" in out
    assert results[1].note == "exit 3" and not results[1].ok


def test_engine_slot_reaches_the_command(tmp_path: Path) -> None:
    step = {"label": "e", "command": py("import sys; print('ran', sys.argv[1])") + " {engine}"}
    results, out = run(tmp_path, [{**step, "engines": ["v0", "v1"]}])
    assert [r.status for r in results] == ["passed", "passed"]
    assert "[e-v0] ran v0" in out and "[e-v1] ran v1" in out


def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    results, _ = run(tmp_path, [{"label": "slow", "command": py(code), "timeout": 2}])
    assert results[0].status == "timeout" and "killed after 2s" in results[0].note
    assert results[0].seconds < 15
    pid = int(marker.read_text())
    alive = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    state = alive.stdout.strip()[:1]  # "ZN" under nice: the first letter is the state
    assert state in ("", "Z"), "the job's own child outlived the timeout"


def test_unstartable_command_fails_cleanly(tmp_path: Path) -> None:
    results, _ = run(tmp_path, [{"label": "x", "command": "no-such-program-for-ci --flag"}])
    assert results[0].status == "failed" and "could not start" in results[0].note


def test_gpu_step_is_skipped_without_cuda(tmp_path: Path) -> None:
    step = {"label": "g", "command": py("raise SystemExit(1)"), "gpu": True}
    results, out = run(tmp_path, [step], cuda=False)
    assert results[0].status == "skipped" and results[0].ok
    assert "no CUDA" in out


@pytest.mark.slow
def test_pytest_exit_five_passes_only_when_allowed(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_none.py").write_text("X = 1\n")
    results, _ = run(
        tmp_path,
        [
            {"label": "empty-ok", "tests": ["suite"], "allow_empty": True},
            {"label": "empty-bad", "tests": ["suite"]},
        ],
        parallel=2,
    )
    assert [(r.status, r.returncode) for r in results] == [("passed", 5), ("failed", 5)]
    assert results[0].note == "no tests collected (allowed)"
    assert results[1].note == "no tests collected"


def test_parallel_runs_jobs_at_the_same_time(tmp_path: Path) -> None:
    """Each job waits for the other's marker: only concurrent jobs can both pass."""
    a, b, script = tmp_path / "a", tmp_path / "b", tmp_path / "wait.py"
    script.write_text(WAIT)
    steps = [
        {"label": "a", "command": f"python {script} {a} {b}"},
        {"label": "b", "command": f"python {script} {b} {a}"},
    ]
    results, _ = run(tmp_path, steps, parallel=2)
    assert [r.status for r in results] == ["passed", "passed"]


def test_logs_hold_output_and_failures_show_their_tail(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    steps = [
        {"label": "ok", "command": py("print('quiet line')")},
        {"label": "ko", "command": py("import sys; print('last words'); sys.exit(2)")},
    ]
    results, out = run(tmp_path, steps, logs=logs)
    assert "quiet line" in (logs / "ok.log").read_text() and "[ok] quiet line" not in out
    assert "[ko] last words" in out
    assert [r.status for r in results] == ["passed", "failed"]


def test_bad_parallel(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="parallel: expected a whole number >= 1, got 0"):
        Runner(pipeline(tmp_path, [{"label": "a", "command": "true"}]), tmp_path, parallel=0)


def test_table() -> None:
    text = table([Result("kernels", "passed", 1.25), Result("docs", "failed", 0.5, 1, "exit 1")], 2)
    lines = text.splitlines()
    assert lines[0].split() == ["job", "result", "duration", "note"]
    assert lines[2].split() == ["kernels", "passed", "1.2s"]
    assert lines[3].split() == ["docs", "failed", "0.5s", "exit", "1"]
    assert lines[-2] == "2 jobs: 1 passed, 1 failed; wall time 2.0s"
    assert lines[-1] == "tests: 0 passed, 0 failed, 0 skipped"


def test_table_sums_the_pytest_counts_of_every_job() -> None:
    one = Result("a", "passed", 1.0, 0, "", {"passed": 40, "skipped": 2, "xfailed": 1})
    two = Result("b", "failed", 1.0, 1, "", {"passed": 3, "failed": 2, "error": 1})
    lines = table([one, two], 2).splitlines()
    assert lines[-2] == "also: 1 xfailed"
    assert lines[-1] == "tests: 43 passed, 3 failed, 2 skipped"


@pytest.mark.parametrize(
    ("line", "counts"),
    [
        (
            "===== 3 failed, 40 passed, 2 skipped, 1 warning in 9.12s =====",
            {"failed": 3, "passed": 40, "skipped": 2},
        ),
        ("=== 51 passed, 1 xfailed in 23.45s (0:00:23) ===", {"passed": 51, "xfailed": 1}),
        ("==== 1 error in 1.93s ====", {"error": 1}),
        ("==== no tests ran in 0.01s ====", None),
        ("[ok] passed in 0.0s", None),
    ],
)
def test_parse_closing(line: str, counts: dict[str, int] | None) -> None:
    assert parse_closing(line) == counts


def make_repo(tmp_path: Path, body: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "ci").mkdir(parents=True)
    (repo / "ci" / "pipeline.toml").write_text(body)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    commit(repo, "pipeline")
    return repo


HEAD = '[settings]\npython = ["3.11"]\ninstall = "true"\nengines = ["v0"]\nalways = []\n'


def test_cli_run_exit_status_and_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = HEAD + (
        '[[step]]\nlabel = "ok"\ncommand = "python -c pass"\n'
        '[[step]]\nlabel = "ko"\ncommand = "python -c \'raise SystemExit(4)\'"\n'
    )
    toml = make_repo(tmp_path, body) / "ci" / "pipeline.toml"
    assert cli.main(["--pipeline", str(toml), "run", "--jobs", "ok"]) == 0
    assert "1 jobs: 1 passed" in capsys.readouterr().out
    assert cli.main(["--pipeline", str(toml), "run"]) == 1
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    assert ["ko", "failed", rows[-3][2], "exit", "4"] in rows
    assert "2 jobs: 1 passed, 1 failed" in out
    assert cli.main(["--pipeline", str(toml), "run", "--jobs", "zz"]) == 2
    assert "jobs: 'zz' matches no job" in capsys.readouterr().err


@pytest.mark.slow
def test_args_after_dashes_reach_pytest_jobs_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "suite").mkdir()
    body = HEAD + (
        '[[step]]\nlabel = "cmd"\ncommand = "python -c pass"\n'
        '[[step]]\nlabel = "unit"\ntests = ["suite"]\nallow_empty = true\n'
    )
    repo = make_repo(tmp_path, body)
    (repo / "suite").mkdir()
    (repo / "suite" / "test_none.py").write_text("X = 1\n")
    commit(repo, "suite")
    toml = repo / "ci" / "pipeline.toml"
    assert cli.main(["--pipeline", str(toml), "run", "--", "-q", "-k", "nothing"]) == 0
    out = capsys.readouterr().out
    assert "-m pytest suite -q -k nothing" in out
    assert "python -c pass\n" in out


def test_cli_reports_a_bad_pipeline(tmp_path: Path) -> None:
    toml = make_repo(tmp_path, HEAD + '[[step]]\nlabel = "x"\nengines = ["v9"]\n')
    proc = subprocess.run(
        [sys.executable, "-m", "ci", "--pipeline", str(toml / "ci" / "pipeline.toml"), "list"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "step 'x': field" in proc.stderr


def test_cli_run_prepares_once_before_the_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `prepare` command runs once, in the repository, before any job; a job sees
    what it made."""
    body = HEAD.replace("always = []\n", 'always = []\nprepare = "echo x >> prepared"\n') + (
        '[[step]]\nlabel = "one"\ncommand = "test -f prepared"\n'
        '[[step]]\nlabel = "two"\ncommand = "test -f prepared"\n'
    )
    repo = make_repo(tmp_path, body)
    assert cli.main(["--pipeline", str(repo / "ci" / "pipeline.toml"), "run"]) == 0
    assert (repo / "prepared").read_text() == "x\n"
    assert "prepare: echo x >> prepared" in capsys.readouterr().out


def test_cli_run_stops_where_prepare_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = HEAD.replace("always = []\n", 'always = []\nprepare = "exit 5"\n') + (
        '[[step]]\nlabel = "one"\ncommand = "touch ran"\n'
    )
    repo = make_repo(tmp_path, body)
    assert cli.main(["--pipeline", str(repo / "ci" / "pipeline.toml"), "run"]) == 1
    assert not (repo / "ran").exists()
    assert "prepare: `exit 5` exited with 5" in capsys.readouterr().err

"""Run jobs locally as subprocesses, each in its own process group with its step's timeout.

Output is streamed line by line, prefixed with `[job]`, or written to one log file per job
(`logs=`), in which case a failing job's last lines are printed. A timeout kills the whole
process group (pytest and anything it started). `extra` arguments go to pytest jobs only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ci import counts as tallies
from ci.model import Job, Pipeline

TAIL_LINES = 40
GRACE_S = 5.0


@dataclass(slots=True)
class Result:
    job: str
    status: str  # passed | failed | timeout | skipped
    seconds: float
    returncode: int | None = None
    note: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # from pytest's closing line

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped")


def has_cuda(python: str = sys.executable) -> bool:
    """Whether a CUDA device is usable, asked of torch in a child (never in this process)."""
    if not shutil.which("nvidia-smi") and not Path("/dev/nvidiactl").exists():
        return False
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    proc = subprocess.run([python, "-c", probe], capture_output=True, check=False)
    return proc.returncode == 0


class Runner:
    """Runs a list of jobs with at most `parallel` at a time and collects their results."""

    def __init__(
        self,
        pipeline: Pipeline,
        root: Path,
        *,
        parallel: int = 1,
        extra: Sequence[str] = (),
        logs: Path | None = None,
        out: TextIO | None = None,
        cuda: bool | None = None,
    ) -> None:
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ValueError(f"parallel: expected a whole number >= 1, got {parallel!r}")
        self.pipeline = pipeline
        self.root = root
        self.parallel = parallel
        self.extra = tuple(extra)
        self.logs = logs
        self.out = out if out is not None else sys.stdout
        self.cuda = cuda
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[str]] = set()

    def say(self, text: str) -> None:
        with self._lock:
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        if any(j.step.gpu for j in jobs) and self.cuda is None:
            self.cuda = has_cuda()
        if self.logs is not None:
            self.logs.mkdir(parents=True, exist_ok=True)
        try:
            with ThreadPoolExecutor(max_workers=self.parallel) as pool:
                return list(pool.map(self.one, jobs))
        except KeyboardInterrupt:
            self.stop_all()
            raise

    def stop_all(self) -> None:
        with self._lock:
            live = list(self._live)
        for proc in live:
            _kill(proc)

    def one(self, job: Job) -> Result:
        if job.step.gpu and not self.cuda:
            note = "no CUDA device on this machine"
            self.say(f"[{job.name}] skipped: {note}")
            return Result(job.name, "skipped", 0.0, None, note)
        extra = self.extra if job.step.is_pytest else ()
        argv = job.argv(self.pipeline.settings, sys.executable, extra)
        self.say(f"[{job.name}] $ {' '.join(argv)}")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        sink = self._sink(job)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=self.root,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:
            if sink is not None:
                sink.close()
            self.say(f"[{job.name}] failed to start: {exc}")
            return Result(job.name, "failed", 0.0, None, f"could not start: {exc.strerror}")
        with self._lock:
            self._live.add(proc)
        seen: dict[str, int] = {}
        reader = threading.Thread(target=self._pump, args=(job, proc, sink, seen), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=job.step.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill(proc)
            timed_out = True
        reader.join()
        with self._lock:
            self._live.discard(proc)
        seconds = time.monotonic() - start
        if sink is not None:
            sink.close()
        result = self._result(job, proc.returncode, seconds, timed_out)
        result.counts = seen
        return result

    def _sink(self, job: Job) -> TextIO | None:
        if self.logs is None:
            return None
        return (self.logs / f"{job.name}.log").open("w", encoding="utf-8")

    def _pump(
        self, job: Job, proc: subprocess.Popen[str], sink: TextIO | None, seen: dict[str, int]
    ) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            found = tallies.parse_closing(line)
            if found is not None:
                seen.clear()
                seen.update(found)
            if sink is not None:
                sink.write(line)
            else:
                self.say(f"[{job.name}] {line.rstrip()}")
        proc.stdout.close()

    def _result(self, job: Job, code: int | None, seconds: float, timed_out: bool) -> Result:
        if timed_out:
            status, note = "timeout", f"killed after {job.step.timeout}s"
        elif code is not None and job.passed(code):
            status, note = "passed", "no tests collected (allowed)" if code == 5 else ""
        else:
            status = "failed"
            note = "no tests collected" if code == 5 and job.step.is_pytest else f"exit {code}"
        result = Result(job.name, status, seconds, code, note)
        self.say(f"[{job.name}] {status} in {seconds:.1f}s" + (f" ({note})" if note else ""))
        if self.logs is not None:
            log = self.logs / f"{job.name}.log"
            if not result.ok:
                lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
                tail = "\n".join(f"[{job.name}] {line}" for line in lines[-TAIL_LINES:])
                self.say(tail)
            self.say(f"[{job.name}] log: {log}")
        return result


def _kill(proc: subprocess.Popen[str]) -> None:
    """Terminate a job's whole process group, then kill it if it lingers."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def prepare(command: str, root: Path, timeout: int) -> bool:
    """Runs the pipeline's ``prepare`` command in ``root`` (a shell line), its output
    passed through; False, with the reason printed, where it fails or runs past
    ``timeout`` seconds."""
    print(f"prepare: {command}", flush=True)
    try:
        proc = subprocess.run(command, shell=True, cwd=root, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"prepare: `{command}` ran past {timeout} s", file=sys.stderr, flush=True)
        return False
    if proc.returncode != 0:
        print(f"prepare: `{command}` exited with {proc.returncode}", file=sys.stderr, flush=True)
    return proc.returncode == 0


def table(results: Sequence[Result], wall: float) -> str:
    """The summary: one row per job (job, result, duration, note) and a totals line."""
    rows = [("job", "result", "duration", "note")]
    rows += [(r.job, r.status, f"{r.seconds:.1f}s", r.note) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items()) or "no jobs"
    lines.append(f"{len(results)} jobs: {summary}; wall time {wall:.1f}s")
    summed = tallies.total(r.counts for r in results)
    extra = ", ".join(f"{summed[k]} {k}" for k in ("xfailed", "xpassed", "deselected") if summed[k])
    if extra:
        lines.append(f"also: {extra}")
    lines.append(tallies.closing_line(summed))
    return "\n".join(lines)

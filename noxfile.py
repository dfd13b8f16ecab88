"""nox sessions, derived from ci/pipeline.toml: one per step, parametrized by engine where the
step covers engines (`nox -s engine`, `nox -s "engine(v1)"`).

Each session installs the pipeline's install command and runs its job through
`python -m ci run`, so timeouts, GPU skips and empty-run rules are the pipeline's own.
Arguments after `--` reach pytest: `nox -s kernels -- -x -k rms`.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ci.config import PipelineError, load  # noqa: E402
from ci.model import Pipeline, Step  # noqa: E402

try:
    PIPELINE: Pipeline = load(ROOT / "ci" / "pipeline.toml")
except PipelineError as exc:
    raise SystemExit(f"noxfile: {exc}") from None

nox.options.sessions = [step.label for step in PIPELINE.steps]
nox.options.reuse_existing_virtualenvs = True


def install(session: nox.Session) -> None:
    session.run(*shlex.split(PIPELINE.settings.install))


def job_name(step: Step, engine: str | None) -> str:
    """The pipeline job a session runs (the same rule as `ci.model.Job.name`)."""
    return next(j.name for j in PIPELINE.jobs() if j.step is step and j.engine == engine)


def define(step: Step) -> None:
    """Register the session of one step."""

    def session(session: nox.Session, engine: str | None = None) -> None:
        install(session)
        job = job_name(step, engine)
        session.run("python", "-m", "ci", "run", "--jobs", job, "--", *session.posargs)

    session.__doc__ = step.help or step.label
    session.__name__ = step.label.replace("-", "_")
    if step.engines:
        engines = list(step.engines)
        session = nox.parametrize("engine", engines, ids=engines)(session)
    nox.session(name=step.label)(session)


for _step in PIPELINE.steps:
    define(_step)


# not a pipeline step: a check of the suite itself, run by hand or on a schedule
FAST = ("-m", "not slow and not reliability", "-n", "2")


@nox.session(name="fast-under-load", default=False)
def fast_under_load(session: nox.Session) -> None:
    """The fast suite beside a CPU hog on every core (busy loops at nice 19), so a test that
    depends on timing fails here first; arguments after `--` replace the fast selection
    (`nox -s fast-under-load -- tests/parallel -p no:randomly`)."""
    install(session)
    if PIPELINE.settings.prepare:  # what `python -m ci run` does before its jobs
        session.run("bash", "-c", PIPELINE.settings.prepare, external=True)
    args = session.posargs or ["tests", *FAST]
    session.run("python", "-m", "ci.hog", "--", "python", "-m", "pytest", *args)

"""`python -m ci`: list, affected, run, github, tox and docs over ci/pipeline.toml."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ci import choose, docs, generate, paths
from ci.config import PIPELINE, load
from ci.model import Job, Pipeline
from ci.runner import Runner, prepare, table


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci", description=__doc__)
    parser.add_argument("--pipeline", type=Path, default=PIPELINE, help="pipeline file")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = sub.add_parser("list", help="steps and the jobs they expand to")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    aff = sub.add_parser("affected", help="jobs whose dependencies changed since --base")
    aff.add_argument("--base", required=True, metavar="REV", help="git revision to diff from")
    aff.add_argument("--json", action="store_true", help="machine-readable output")
    run = sub.add_parser("run", help="run jobs locally (args after `--` go to each pytest job)")
    run.add_argument("--base", metavar="REV", help="only jobs affected since REV")
    run.add_argument("--jobs", nargs="+", metavar="LABEL", help="job names, labels or globs")
    run.add_argument(
        "--parallel",
        type=int,
        default=None,
        metavar="N",
        help="jobs at once (default: the pipeline's `parallel` setting)",
    )
    run.add_argument("--logs", type=Path, metavar="DIR", help="one log file per job here")
    for name, what in (("github", ".github/workflows/ci.yml"), ("tox", "tox.ini")):
        gen = sub.add_parser(name, help=f"write {what} from the pipeline")
        gen.add_argument("--check", action="store_true", help="fail if the file is stale")
    sub.add_parser("docs", help="check the README quick start against the pipeline")
    return parser


def _describe(job: Job) -> dict[str, object]:
    return {
        "job": job.name,
        "step": job.step.label,
        "engine": job.engine,
        "gpu": job.step.gpu,
        "timeout": job.step.timeout,
        "depends_on": list(job.globs()),
    }


def cmd_list(pipeline: Pipeline, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps([_describe(job) for job in pipeline.jobs()], indent=2))
        return 0
    width = max(len(s.label) for s in pipeline.steps)
    for step in pipeline.steps:
        jobs = ", ".join(job.name for job in pipeline.jobs() if job.step is step)
        what = " ".join(step.tests + step.pytest_args) if step.tests else step.command
        flags = " [gpu]" if step.gpu else ""
        print(f"{step.label.ljust(width)}  -> {jobs}{flags}\n{'':{width}}     {what}")
    versions = ", ".join(pipeline.settings.python)
    print(f"{len(pipeline.jobs())} jobs from {len(pipeline.steps)} steps; python {versions}")
    return 0


def cmd_affected(pipeline: Pipeline, root: Path, args: argparse.Namespace) -> int:
    changed = paths.changed(root, args.base)
    hits = choose.affected(pipeline, changed)
    if args.json:
        rows = [{"job": h.job.name, "cause": h.cause} for h in hits]
        print(json.dumps({"base": args.base, "changed": changed, "jobs": rows}, indent=2))
        return 0
    print(f"{len(changed)} files changed since {args.base}; {len(hits)} jobs affected")
    for hit in hits:
        print(f"{hit.job.name}  <- {hit.cause}")
    return 0


def cmd_run(pipeline: Pipeline, root: Path, args: argparse.Namespace, extra: list[str]) -> int:
    jobs = choose.by_name(pipeline, args.jobs) if args.jobs else pipeline.jobs()
    if args.base:
        picked = {h.job.name for h in choose.affected(pipeline, paths.changed(root, args.base))}
        jobs = [job for job in jobs if job.name in picked]
    if not jobs:
        print("no jobs selected: nothing to run")
        return 0
    start = time.monotonic()
    if pipeline.settings.prepare and not prepare(
        pipeline.settings.prepare, root, pipeline.settings.install_timeout
    ):
        return 1
    parallel = pipeline.settings.parallel if args.parallel is None else args.parallel
    runner = Runner(pipeline, root, parallel=parallel, extra=extra, logs=args.logs)
    results = runner.run(jobs)
    print("\n" + table(results, time.monotonic() - start))
    return 0 if all(r.ok for r in results) else 1


def cmd_generate(pipeline: Pipeline, root: Path, args: argparse.Namespace) -> int:
    if args.command == "github":
        target, text = generate.WORKFLOW, generate.render_workflow(pipeline)
    else:
        target, text = generate.TOX, generate.render_tox(pipeline)
    ok, message = generate.write(root, target, text, args.check, args.command)
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def cmd_docs(pipeline: Pipeline, root: Path) -> int:
    problems = docs.check(root, pipeline.settings)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("README quick start matches the pipeline and .ci/run")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a bad pipeline or bad arguments)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = _parser()
    args = parser.parse_args(argv)
    if extra and args.command != "run":
        parser.error(f"arguments after '--' are only for `run`, got {extra}")
    try:
        about_to_write = {"github": [str(generate.WORKFLOW)], "tox": [str(generate.TOX)]}
        pipeline = load(args.pipeline, generated=about_to_write.get(args.command, []))
        root = paths.repo_root(args.pipeline.resolve().parent)
        if args.command == "list":
            return cmd_list(pipeline, args)
        if args.command == "affected":
            return cmd_affected(pipeline, root, args)
        if args.command == "run":
            return cmd_run(pipeline, root, args, extra)
        if args.command in ("github", "tox"):
            return cmd_generate(pipeline, root, args)
        return cmd_docs(pipeline, root)
    except (ValueError, RuntimeError) as exc:
        print(f"ci: error: {exc}", file=sys.stderr)
        return 2

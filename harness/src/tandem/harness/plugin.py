"""pytest entry point of the harness: wires options, markers, isolation and leak checks."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import pytest

from . import caches, checks, child, coverage, cuda, leak_ops, markers, options, seeds
from .fixtures import engine, isolated_env, scoped_ops
from .markers import engine_of
from .runner import Driver, unit_of
from .state import STATE

__all__ = ["engine", "isolated_env", "scoped_ops"]

SNAP = pytest.StashKey[checks.Snap]()
SAVED = pytest.StashKey[tuple[str, str | None]]()
DRIVER = pytest.StashKey[Driver]()
COVERAGE = pytest.StashKey[coverage.Coverage]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


def _controller(config: pytest.Config) -> bool:
    """An xdist controller: it runs no test, so it needs no preload and no zygote."""
    ns = getattr(config, "known_args_namespace", config.option)
    return bool(getattr(ns, "numprocesses", None)) and not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Import the preload modules before any conftest, recording op origins and CUDA init."""
    ns = early_config.known_args_namespace
    level = getattr(ns, "isolate", None) or early_config.getini("harness_isolation")
    namespace = early_config.getini("harness_ops_namespace")
    if level == "none" or _controller(early_config):
        return
    for name in early_config.getini("harness_preload"):
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(f"tandem-harness: preload of {name!r} failed: {exc!r}", file=sys.stderr)
        cuda.record()
        leak_ops.record(namespace)


def pytest_configure(config: pytest.Config) -> None:
    for line in markers.MARKERS:
        config.addinivalue_line("markers", line)
    settings = options.load(config)
    STATE.settings = settings
    STATE.seed = settings.seed if settings.seed is not None else seeds.pick()
    STATE.known = markers.known_engines(settings.engine_group)
    STATE.extra["seen"] = set(settings.default_engines)
    cuda.record()
    leak_ops.record(settings.ops_namespace)
    config.stash[COVERAGE] = coverage.Coverage()
    isolating = not settings.force_none or settings.find_polluter
    if isolating and not settings.worker_fds and not _controller(config):
        config.stash[DRIVER] = Driver(config, settings)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["harness_seed"] = STATE.seed


def pytest_report_header(config: pytest.Config) -> str:
    s = STATE.settings
    engines = ",".join(s.selected) or "all"
    return (
        f"tandem-harness: isolation={s.isolation} start={s.start_method} "
        f"leaks={s.leaks} seed={STATE.seed} engines={engines}"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    specs = markers.declared(metafunc.definition, STATE.settings.default_engines)
    if not specs:
        return
    STATE.extra["seen"].update(spec.name for spec in specs)
    if STATE.known:
        unknown = [s.name for s in specs if s.name not in STATE.known]
        STATE.extra.setdefault("unknown", []).extend(
            f"{metafunc.definition.nodeid}: {name}" for name in unknown
        )
    if "engine" not in metafunc.fixturenames:
        metafunc.fixturenames.append("engine")
    metafunc.parametrize("engine", markers.params(specs))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    settings = STATE.settings
    known = STATE.known or tuple(sorted(STATE.extra["seen"]))
    if STATE.extra.get("unknown"):
        raise pytest.UsageError(
            f"unknown engine in @pytest.mark.engines: {', '.join(STATE.extra['unknown'])}; "
            f"known engines: {', '.join(known) or '(none)'}"
        )
    bad = [name for name in settings.selected if name not in known]
    if bad:
        raise pytest.UsageError(
            f"--engines: unknown engine(s) {', '.join(bad)}; "
            f"known engines: {', '.join(known) or '(none)'}"
        )
    problems = leak_ops.problems()
    if problems:
        pytest.exit("tandem-harness: custom op conflicts:\n" + "\n".join(problems), returncode=1)
    if settings.selected:
        keep = [i for i in items if engine_of(i) in (None, *settings.selected)]
        dropped = [i for i in items if engine_of(i) not in (None, *settings.selected)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    if settings.isolation != "none":
        first: dict[Any, int] = {}
        keys = [first.setdefault(repr(unit_of(i, settings)), len(first)) for i in items]
        order = sorted(range(len(items)), key=keys.__getitem__)
        items[:] = [items[i] for i in order]
    config._harness_session = session  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    settings = STATE.settings
    if settings.worker_fds:
        cmd, res, folder = settings.worker_fds.split(",", 2)
        from pathlib import Path

        child.serve(session, int(cmd), int(res), Path(folder))
    if settings.find_polluter and DRIVER in session.config.stash:
        from .polluter import hunt

        reporter = session.config.pluginmanager.get_plugin("terminalreporter")

        def say(text: str) -> None:
            if reporter is not None:
                reporter.write_line(text)

        STATE.extra["polluter"] = hunt(
            session.config.stash[DRIVER], session.items, settings.find_polluter, say
        )
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    driver = item.config.stash.get(DRIVER, None)
    if STATE.in_child or driver is None or unit_of(item, STATE.settings) is None:
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    try:
        driver.run(item, nextitem, lambda report: ihook.pytest_runtest_logreport(report=report))
    except cuda.ForkUnsafe as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.TESTS_FAILED)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    settings = STATE.settings
    name = engine_of(item)
    leak_ops.record(settings.ops_namespace)  # torch may have been imported since configure
    if STATE.boundary or name != STATE.last_engine:
        caches.clear(settings.watch_prefixes, settings.cache_clearers)
        STATE.boundary, STATE.last_engine = False, name
    if name is not None and ("engine", name) not in item.user_properties:
        item.user_properties.append(("engine", name))
    if name is not None and settings.engine_env:
        item.stash[SAVED] = (settings.engine_env, os.environ.get(settings.engine_env))
        os.environ[settings.engine_env] = name
    seeds.reseed(STATE.seed)
    ignore = frozenset({settings.engine_env, "PYTEST_CURRENT_TEST"} - {""})
    snap = item.stash[SNAP] = checks.take(settings, ignore)
    pending = checks.wider_setup_pending(item)
    yield
    if pending:
        checks.excuse(snap, settings)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    snap = item.stash.get(SNAP, None)
    if snap is not None:
        checks.teardown_starts(item, snap)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    result = yield
    report: pytest.TestReport = result.get_result()
    if call.when == "teardown":
        _after_teardown(item, report)
    if report.failed:
        report.sections.append(
            ("harness", f"seed {STATE.seed} (replay: --harness-seed {STATE.seed})")
        )
    if STATE.in_child:
        child.send_report(item.config, report)


def _after_teardown(item: pytest.Item, report: pytest.TestReport) -> None:
    snap = item.stash.get(SNAP, None)
    leaks = checks.compare(snap, STATE.settings) if snap is not None else []
    saved = item.stash.get(SAVED, None)
    if saved is not None:
        var, value = saved
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    if leaks:
        checks.blame(item.nodeid, report, leaks, STATE.settings.leaks)


def pytest_warning_recorded(warning_message: Any, when: str, nodeid: str) -> None:
    if STATE.in_child and when == "runtest":
        child.send_warning(warning_message, nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    cov = STATE.extra.get("coverage")
    if cov is not None:
        cov.add(report)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    STATE.extra["coverage"] = session.config.stash[COVERAGE]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    cov: coverage.Coverage = terminalreporter.config.stash[COVERAGE]
    lines = cov.table()
    if lines:
        terminalreporter.write_sep("=", "engine coverage")
        for line in lines:
            terminalreporter.write_line(line)
    if cov.leaks:
        terminalreporter.write_sep("=", "harness leaks (warn)")
        for line in cov.leaks:
            terminalreporter.write_line(line)
    if STATE.settings.find_polluter:
        found = STATE.extra.get("polluter")
        terminalreporter.write_sep("=", f"polluter: {found or 'not found'}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    driver = session.config.stash.get(DRIVER, None)
    if driver is not None and not STATE.in_child:
        driver.shutdown(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    path = STATE.settings.engine_report
    if path and not hasattr(session.config, "workerinput") and not STATE.in_child:
        session.config.stash[COVERAGE].write(path)

"""pytest entry point of the harness: wires options, markers, isolation and leak checks.

The harness is opt-in: in a project that sets no ``harness_*`` ini option, passes no
harness flag and marks no test with ``engines``, every hook here returns at once and the
run is exactly a plain pytest run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from . import (
    caches,
    checks,
    child,
    coverage,
    cuda,
    imports,
    leak_env,
    leak_ops,
    leak_procs,
    markers,
    options,
    scopes,
    seeds,
)
from .fixtures import engine, engine_impl, isolated_env, scoped_ops
from .markers import engine_of
from .runner import Driver, unit_of
from .state import STATE
from .timeouts import Alarm

__all__ = ["engine", "engine_impl", "isolated_env", "scoped_ops"]

SNAP = pytest.StashKey[checks.Snap]()
SAVED = pytest.StashKey[tuple[str, str | None]]()
ALARM = pytest.StashKey[Alarm]()
DRIVER = pytest.StashKey[Driver]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


def _controller(config: pytest.Config) -> bool:
    """An xdist controller: it runs no test, so it needs no preload and no zygote."""
    ns = getattr(config, "known_args_namespace", config.option)
    return bool(getattr(ns, "numprocesses", None)) and not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Import the preload modules before any conftest, recording op origins and CUDA init.

    Each import is watched: a module that patches another while it is imported fails the
    run at the end of collection (``imports``).
    """
    ns = early_config.known_args_namespace
    level = getattr(ns, "isolate", None) or early_config.getini("harness_isolation")
    namespace = early_config.getini("harness_ops_namespace")
    prefixes = tuple(early_config.getini("harness_watch_prefixes"))
    if prefixes:  # from here on, every watched module's import is seen (``imports``)
        imports.install(prefixes)
    if namespace:
        imports.on_import("torch", lambda: leak_ops.record(namespace))
    if level == "none" or _controller(early_config):
        return
    for name in early_config.getini("harness_preload"):
        try:
            with imports.watch(name, prefixes, STATE.import_problems):
                importlib.import_module(name)
        except Exception as exc:
            print(f"tandem-harness: preload of {name!r} failed: {exc!r}", file=sys.stderr)
        cuda.record()
        leak_ops.record(namespace)


@pytest.hookimpl(trylast=True)  # after pytest-randomly has chosen its seed
def pytest_configure(config: pytest.Config) -> None:
    for line in markers.MARKERS:
        config.addinivalue_line("markers", line)
    settings = options.load(config)
    STATE.settings = settings
    STATE.seed, settings.seed_source = seeds.choose(config, settings.seed)
    STATE.known = tuple(sorted({*markers.known_engines(settings.engine_group), *settings.engines}))
    STATE.seen = set(settings.default_engines)
    STATE.coverage = coverage.Coverage()
    if settings.find_polluter and (
        _controller(config)
        or hasattr(config, "workerinput")
        or getattr(config.option, "dist", "no") not in ("no", None)
    ):
        raise pytest.UsageError(
            "--find-polluter: replays the earlier tests in order in one process, so it "
            "cannot run under pytest-xdist; drop -n/--dist (e.g. -p no:xdist)"
        )
    if options.requested(config):
        _activate(config)


def _activate(config: pytest.Config) -> None:
    """Switch the harness on in this process (from configure, or when a marker is seen)."""
    if STATE.active:
        return
    STATE.active = True
    settings = STATE.settings
    cuda.record()
    if settings.watch_prefixes:
        imports.install(settings.watch_prefixes)
    if settings.ops_namespace:  # the recorder goes in as soon as torch is loaded
        imports.on_import("torch", lambda: leak_ops.record(settings.ops_namespace))
    leak_env.trace(settings.watch_prefixes)
    isolating = not settings.force_none or settings.find_polluter
    if isolating and not settings.worker_fds and not _controller(config):
        driver = config.stash[DRIVER] = Driver(config, settings)
        _end_children_on_sigterm(driver)


def _end_children_on_sigterm(driver: Driver) -> None:
    """SIGTERM ends the zygote and every test child, then this process, as it would have."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_term(signum: int, frame: Any) -> None:
        driver.kill_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGTERM, on_term)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["harness_seed"] = STATE.seed


def pytest_report_header(config: pytest.Config) -> str | None:
    if not STATE.active:
        return None
    s = STATE.settings
    engines = ",".join(s.selected) or "all"
    timeout = f"{s.timeout:g}s" if s.timeout else "none"
    return (
        f"tandem-harness: isolation={s.isolation} start={s.start_method} leaks={s.leaks} "
        f"timeout={timeout} seed={STATE.seed} ({seeds.SOURCES[s.seed_source]}) "
        f"engines={engines}"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    specs = markers.declared(metafunc.definition, STATE.settings.default_engines)
    if not specs:
        return
    _activate(metafunc.config)
    STATE.seen.update(spec.name for spec in specs)
    if STATE.known:
        unknown = [s.name for s in specs if s.name not in STATE.known]
        STATE.unknown.extend(f"{metafunc.definition.nodeid}: {name}" for name in unknown)
    if "engine" not in metafunc.fixturenames:
        metafunc.fixturenames.append("engine")
    # session scope: a fixture of any scope may depend on ``engine`` and gets one instance
    # per engine (a module's shared engine is that module's fixture, not its first test's)
    metafunc.parametrize("engine", markers.params(specs), scope="session")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """Watch the import of each test module for patches it makes to watched modules."""
    if not (STATE.active and isinstance(collector, pytest.Module)):
        yield
        return
    with imports.watch(collector.nodeid, STATE.settings.watch_prefixes, STATE.import_problems):
        yield


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if not STATE.active:
        return
    settings = STATE.settings
    known = STATE.known or tuple(sorted(STATE.seen))
    if STATE.unknown:
        raise pytest.UsageError(
            f"unknown engine in @pytest.mark.engines: {', '.join(STATE.unknown)}; "
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
    STATE.import_problems += [
        f"{change} (after its import, before any test ran)"
        for change in imports.since_import()
        if not any(p.startswith(change) for p in STATE.import_problems)
    ]
    if STATE.import_problems:
        pytest.exit(
            "tandem-harness: attributes of watched modules were patched at import time "
            "(every test would run with the swap):\n"
            + "\n".join(f"  - {p}" for p in STATE.import_problems),
            returncode=1,
        )
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
    STATE.session = session


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    settings = STATE.settings
    if settings.worker_fds:
        cmd, res, folder = settings.worker_fds.split(",", 2)
        child.serve(session, int(cmd), int(res), Path(folder))
    if STATE.active and settings.find_polluter and DRIVER in session.config.stash:
        from .polluter import hunt

        reporter = session.config.pluginmanager.get_plugin("terminalreporter")

        def say(text: str) -> None:
            if reporter is not None:
                reporter.write_line(text)

        STATE.polluter = hunt(
            session.config.stash[DRIVER], session.items, settings.find_polluter, say
        )
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if not STATE.active:
        return None
    driver = item.config.stash.get(DRIVER, None)
    if STATE.in_child or driver is None or unit_of(item, STATE.settings) is None:
        _in_process(item)
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    try:
        driver.run(item, nextitem, lambda report: ihook.pytest_runtest_logreport(report=report))
    except cuda.ForkUnsafe as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.TESTS_FAILED)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _in_process(item: pytest.Item) -> None:
    """A test about to run in this process: adopt its orphans; time it here (no parent will)."""
    if not STATE.in_child:
        leak_procs.become_subreaper()
        limit = markers.timeout_of(item, STATE.settings.timeout)
        if limit:
            item.stash[ALARM] = Alarm(item.nodeid, limit)


def _timed(item: pytest.Item, when: str) -> Any:
    """Arm the in-process alarm around one phase (``Alarm`` explains why)."""
    alarm = item.stash.get(ALARM, None)
    if alarm is None:
        return (yield)
    if not Alarm.usable():
        outcome = yield
        if when == "setup":
            outcome.force_exception(
                pytest.fail.Exception(
                    f"timeout({alarm.limit:g}) cannot be enforced for {item.nodeid}: it runs "
                    "in-process off the main thread; isolate it (--isolate test) or set "
                    "--harness-timeout 0",
                    pytrace=False,
                )
            )
        return outcome
    if when == "teardown":  # teardown gets its own time, so fixtures are still torn down
        alarm = item.stash[ALARM] = Alarm(item.nodeid, alarm.limit)
    alarm.arm()
    try:
        return (yield)
    finally:
        alarm.disarm()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    if not STATE.active:
        yield
        return
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
    STATE.current = item.stash[SNAP] = checks.take(settings, ignore)
    STATE.current_test = item.nodeid
    STATE.fixture_leaks = []
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    if not STATE.active:
        yield
        return
    yield from _timed(item, "call")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    if not STATE.active:
        yield
        return
    yield from _timed(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Any:
    """A wider fixture's setup: its changes are its own, not the current test's."""
    snap = STATE.current
    if not (STATE.active and snap is not None and scopes.wider(fixturedef)):
        yield
        return
    settings = STATE.settings
    before = checks.take(settings)
    yield
    after = checks.take(settings)
    checks.rebase(snap, before, after, settings)
    scopes.set_up(fixturedef, STATE.current_test, before, after)
    fixturedef.addfinalizer(lambda: scopes.tearing_down(fixturedef, checks.take(settings)))


def pytest_fixture_post_finalizer(fixturedef: Any, request: pytest.FixtureRequest) -> None:
    """A wider fixture was torn down: what it left behind is its leak; its undoing is not ours."""
    if not (STATE.active and scopes.wider(fixturedef)):
        return
    before, leaks = scopes.torn_down(fixturedef, STATE.settings)
    snap = STATE.current
    if snap is not None and before is not None:
        checks.rebase(snap, before, checks.take(STATE.settings), STATE.settings)
    STATE.fixture_leaks.extend(leaks)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    result = yield
    if not STATE.active:
        return
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
    leaks += STATE.fixture_leaks
    STATE.fixture_leaks = []
    STATE.current = None
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
    if STATE.active and STATE.in_child and when == "runtest":
        child.send_warning(warning_message, nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if STATE.active and STATE.coverage is not None:
        STATE.coverage.add(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    cov = STATE.coverage
    if not STATE.active or cov is None:
        return
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
        terminalreporter.write_sep("=", f"polluter: {STATE.polluter or 'not found'}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not STATE.active:
        return
    driver = session.config.stash.get(DRIVER, None)
    if driver is not None and not STATE.in_child:
        driver.shutdown(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    path = STATE.settings.engine_report
    if path and not hasattr(session.config, "workerinput") and not STATE.in_child:
        assert STATE.coverage is not None
        STATE.coverage.write(path)

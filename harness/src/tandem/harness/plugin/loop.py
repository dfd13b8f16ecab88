"""The role of the process that runs pytest's test loop (plain pytest, or an xdist worker).

Each test goes to the child of its isolation unit (``isolation.runner``); a test whose
unit is "none" runs here, as a child subreaper and under an alarm (no parent will kill
it). SIGTERM ends the zygote and every child with this process.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..isolation import cuda
from ..isolation.child import Channel, serve
from ..isolation.runner import Driver, Placement
from ..isolation.timeouts import Alarm
from ..leaks import processes
from ..settings import Settings
from . import child, seeds
from .markers import engine_of, isolation_of, timeout_of
from .state import RunState

ALARM = pytest.StashKey[Alarm]()
UNIT = pytest.StashKey[Any]()


def unit_of(item: pytest.Item, settings: Settings) -> Any:
    """The isolation unit of an item (None: run in this process), worked out once: the
    loop asks for it several times per test (the item, its successor, the look-ahead)."""
    if settings.force_none:
        return None
    unit = item.stash.get(UNIT, UNIT)
    if unit is UNIT:
        unit = item.stash[UNIT] = _unit(item, settings)
    return unit


def _unit(item: pytest.Item, settings: Settings) -> Any:
    level = isolation_of(item, settings.isolation)
    engine = engine_of(item)
    if level == "none":
        return None
    if level == "test":
        return ("test", item.nodeid)
    if level == "module":
        return ("module", item.nodeid.split("::")[0], engine)
    return ("engine", engine)


class LoopRole:
    def __init__(self, config: pytest.Config, run: RunState) -> None:
        self.config = config
        self.run = run
        self.session: pytest.Session | None = None
        self.driver: Driver | None = None
        self.positions: dict[int, int] = {}  # id(item) -> its index in session.items
        settings = run.settings
        if not settings.force_none or settings.find_polluter:
            placement = Placement(
                unit=lambda item: unit_of(item, settings),
                engine=engine_of,
                timeout=lambda item: timeout_of(item, settings.timeout),
                following=self._following,
            )
            opt = config.option
            stops_early = any(
                getattr(opt, name, False) for name in ("maxfail", "stepwise", "usepdb")
            )
            # an xdist worker runs the items it is handed, not session.items in order
            ahead = not stops_early and not hasattr(config, "workerinput")
            self.driver = Driver(
                config, settings, run.seed, self._child_main, placement, ahead=ahead
            )
            _end_children_on_sigterm(self.driver)

    def _following(self, item: pytest.Item) -> pytest.Item | None:
        """The item pytest's loop runs after ``item``."""
        items = self.session.items if self.session is not None else []
        if len(self.positions) != len(items):
            self.positions = {id(it): i for i, it in enumerate(items)}
        index = self.positions.get(id(item))
        return None if index is None or index + 1 >= len(items) else items[index + 1]

    def _child_main(self, cmd_fd: int, res_fd: int, folder: Path) -> None:
        """A forked child: it takes the child's roles and serves tests until told to stop."""
        assert self.session is not None
        channel = Channel(res_fd, folder)
        child.enter(self.config, channel)
        serve(self.session, channel, cmd_fd, folder)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, items: list[pytest.Item]
    ) -> None:
        """Before the zygote forks, load what every child would otherwise work out again:
        what reseeding needs, and each item's location (pytest computes it lazily, for its
        reports; a child's copy would be forgotten with the child)."""
        self.session = session
        seeds.warm()
        for item in items:
            item.location  # noqa: B018 - a cached property: computed once, here

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        settings = self.run.settings
        if self.driver is None:
            return None
        if settings.find_polluter:
            from .polluter import hunt

            reporter = session.config.pluginmanager.get_plugin("terminalreporter")

            def say(text: str) -> None:
                if reporter is not None:
                    reporter.write_line(text)

            self.run.polluter = hunt(self.driver, session.items, settings.find_polluter, say)
            return True
        if not self._may_relay_directly(session):
            return None
        config = session.config
        with _warnings_recorded(config):
            items = session.items
            for index, item in enumerate(items):
                nextitem = items[index + 1] if index + 1 < len(items) else None
                if unit_of(item, settings) is None:
                    config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                else:
                    self._relay(item, nextitem)
                if session.shouldfail:
                    raise session.Failed(session.shouldfail)
                if session.shouldstop:
                    raise session.Interrupted(session.shouldstop)
        return True

    def _may_relay_directly(self, session: pytest.Session) -> bool:
        """Whether this process may run pytest's loop itself, handing each isolated test to
        its child without calling ``pytest_runtest_protocol`` for it.

        That hook's wrappers (pytest's warning capture, its assertion hooks) set up, per
        test, for test code that runs in the child, not here; a plugin or conftest of the
        run's own that implements the hook gets it called, as always: then pytest's loop
        runs. So do an xdist worker (its loop is xdist's), a run with collection errors
        or ``--collect-only`` (pytest's loop says so).
        """
        config = session.config
        if hasattr(config, "workerinput") or config.option.collectonly:
            return False
        if session.testsfailed and not config.option.continue_on_collection_errors:
            return False
        for impl in config.hook.pytest_runtest_protocol.get_hookimpls():
            module = getattr(impl.function, "__module__", "") or ""
            if impl.plugin is not self and not module.startswith("_pytest."):
                return False
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        if self.driver is None or unit_of(item, self.run.settings) is None:
            self._in_process(item)
            return None
        self._relay(item, nextitem)
        return True

    def _relay(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Run ``item`` in its child, logging its reports here as pytest's protocol would."""
        assert self.driver is not None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        try:
            self.driver.run(item, nextitem, lambda r: ihook.pytest_runtest_logreport(report=r))
        except cuda.ForkUnsafe as exc:
            pytest.exit(str(exc), returncode=pytest.ExitCode.TESTS_FAILED)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _in_process(self, item: pytest.Item) -> None:
        """A test about to run here: adopt its orphans; time it here (no parent will)."""
        processes.become_subreaper()
        limit = timeout_of(item, self.run.settings.timeout)
        if limit:
            item.stash[ALARM] = Alarm(item.nodeid, limit)

    # not tryfirst: inside the tester's wrappers, so its snapshots are not the test's time
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from _timed(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from _timed(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from _timed(item, "teardown"))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.driver is not None:
            self.driver.shutdown(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)


def _warnings_recorded(config: pytest.Config) -> Any:
    """What this process warns while it runs the loop, recorded as pytest's warning plugin
    records a test's: once for the whole loop (its runtest wrapper opens one per test)."""
    if not config.pluginmanager.has_plugin("warnings"):
        return contextlib.nullcontext()
    try:
        from _pytest.warnings import catch_warnings_for_item
    except ImportError:  # pragma: no cover - older or newer pytest
        return contextlib.nullcontext()
    return catch_warnings_for_item(config, ihook=config.hook, when="runtest", item=None)


def _timed(item: pytest.Item, when: str) -> Generator[None, Any, Any]:
    """Arm the in-process alarm around one phase (``Alarm`` explains why)."""
    alarm = item.stash.get(ALARM, None)
    if alarm is None:
        return (yield)
    if not Alarm.usable():
        result = yield
        if when == "setup":
            raise pytest.fail.Exception(
                f"timeout({alarm.limit:g}) cannot be enforced for {item.nodeid}: it runs "
                "in-process off the main thread; isolate it (--isolate test) or set "
                "--harness-timeout 0",
                pytrace=False,
            )
        return result
    if when == "teardown":  # teardown gets its own time, so fixtures are still torn down
        alarm = item.stash[ALARM] = Alarm(item.nodeid, alarm.limit)
    alarm.arm()
    try:
        return (yield)
    finally:
        alarm.disarm()


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

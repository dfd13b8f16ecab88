"""Which roles this pytest process plays; each is registered as a pytest plugin.

- the xdist controller runs no test: it talks to the user (``ReportRole``) and hands
  every worker the run's seed (``ControllerRole``);
- a process that runs pytest's test loop (pytest itself, or an xdist worker) collects
  (``CollectionRole``), runs the loop (``LoopRole``: a child per isolation unit, or here
  under an alarm) and tests what runs here (``TesterRole``); without xdist it also talks
  to the user;
- a child tests (``TesterRole``) and sends its reports back (``ChildRole``, taken at the
  fork; ``SpawnedChildRole`` in a spawned child).

Each hook lives on the role that needs it, so no hook asks which process it runs in.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..isolation import cuda
from ..isolation.child import Channel
from .child import SpawnedChildRole
from .collection import CollectionRole
from .loop import LoopRole
from .reporting import ControllerRole, ReportRole
from .state import (
    CHILD,
    COLLECTION,
    CONTROLLER,
    LOOP,
    REPORT,
    TESTER,
    run_state,
)
from .tester import TesterRole

ACTIVE = pytest.StashKey[bool]()


def xdist_worker(config: pytest.Config) -> bool:
    """An xdist worker, also while its configuration is still being read.

    xdist sets ``config.workerinput`` only after ``_prepareconfig`` returns; until then (the
    preload runs in it) the worker is told by the code that started it: xdist's remote
    loop runs as execnet's ``__channelexec__``.
    """
    if hasattr(config, "workerinput"):
        return True
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "__channelexec__":
            return True
        frame = frame.f_back
    return False


def xdist_controller(config: pytest.Config) -> bool:
    """The xdist controller: it runs no test, so it needs no preload and no zygote."""
    ns = getattr(config, "known_args_namespace", config.option)
    return bool(getattr(ns, "numprocesses", None)) and not xdist_worker(config)


def activate(config: pytest.Config) -> None:
    """Switch the harness on in this process (from configure, or when a marker is seen)."""
    if config.stash.get(ACTIVE, False):
        return
    config.stash[ACTIVE] = True
    run = run_state(config)
    settings = run.settings
    cuda.record()
    run.harness.watch(settings.watch_prefixes)
    run.harness.record_ops()  # the recorder goes in as soon as torch is loaded
    manager = config.pluginmanager
    if xdist_controller(config):
        manager.register(ReportRole(run), REPORT)
        manager.register(ControllerRole(run), CONTROLLER)
        return
    if settings.worker_fds:  # a spawned child: the tester first, so the child wraps it
        cmd, res, folder = settings.worker_fds.split(",", 2)
        manager.register(TesterRole(run, scratch=Path(folder)), TESTER)
        channel = Channel(int(res), Path(folder))
        manager.register(SpawnedChildRole(channel, config, int(cmd), Path(folder)), CHILD)
        return
    worker = xdist_worker(config)
    if not worker:
        manager.register(ReportRole(run), REPORT)
    manager.register(CollectionRole(run, in_worker=worker), COLLECTION)
    manager.register(TesterRole(run), TESTER)
    manager.register(LoopRole(config, run), LOOP)

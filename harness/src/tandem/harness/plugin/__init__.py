"""pytest entry point of the harness (``pytest11``): options, preload, configuration.

The harness is opt-in: in a project that sets no ``harness_*`` ini option, passes no
harness flag and marks no test with ``engines``, nothing but these few hooks is loaded and
the run is exactly a plain pytest run. Once asked for, ``roles.activate`` registers the
roles this process plays; every other hook lives on them. The roles (and with them the
isolation machinery and the leak checks) are imported only then.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from ..isolation import cuda
from . import markers, options, seeds
from .fixtures import engine, engine_impl, isolated_env, scoped_ops
from .state import IMPORT_SKIPS, RUN, SKIP_SUMMARY, RunState, harness_state

__all__ = ["engine", "engine_impl", "isolated_env", "scoped_ops"]


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Import the preload modules before any conftest, recording op origins and CUDA init.

    Each import is watched: a module that patches another while it is imported fails the
    run at the end of collection (``leaks.imports``). Every process that runs tests
    preloads (an xdist worker too); the xdist controller does not.
    """
    ns = early_config.known_args_namespace
    level = getattr(ns, "isolate", None) or options.ini(early_config, "harness_isolation")
    namespace = options.ini(early_config, "harness_ops_namespace")
    prefixes = tuple(options.ini(early_config, "harness_watch_prefixes"))
    preload = options.ini(early_config, "harness_preload")
    if not (prefixes or namespace or preload):
        return  # nothing asked for yet: the harness stays out of this process
    state = harness_state(early_config, namespace)
    state.watch(prefixes)  # from here on, every watched module's import is seen
    state.record_ops()
    if level == "none" or not preload:
        return
    from ..leaks import imports
    from . import roles

    if roles.xdist_controller(early_config):
        return
    for name in preload:
        try:
            with imports.watch(state.watcher, name, state.preload_problems):
                importlib.import_module(name)
        except Exception as exc:
            print(f"tandem-harness: preload of {name!r} failed: {exc!r}", file=sys.stderr)
        cuda.record()
        state.ops.install()


@pytest.hookimpl(trylast=True)  # after pytest-randomly has chosen its seed
def pytest_configure(config: pytest.Config) -> None:
    for line in markers.MARKERS:
        config.addinivalue_line("markers", line)
    settings = options.load(config)
    state = harness_state(config, settings.ops_namespace)
    run = config.stash[RUN] = RunState(settings, state)
    run.import_problems += state.preload_problems
    run.seed, settings.seed_source = seeds.choose(config, settings.seed)
    run.known = tuple(sorted({*markers.known_engines(settings.engine_group), *settings.engines}))
    run.seen = set(settings.default_engines)
    fail_skips, allowed = options.fail_import_skips(config)
    if fail_skips:  # on its own: it does not switch the rest of the harness on
        from . import roles, skips

        config.pluginmanager.register(skips.ImportSkipRole(allowed), IMPORT_SKIPS)
        if not roles.xdist_worker(config):
            config.pluginmanager.register(skips.SkipSummary(), SKIP_SUMMARY)
    if not settings.find_polluter and not options.requested(config):
        return  # not asked for: the roles are not even imported
    from . import roles

    if settings.find_polluter and (
        roles.xdist_controller(config)
        or roles.xdist_worker(config)
        or getattr(config.option, "dist", "no") not in ("no", None)
    ):
        raise pytest.UsageError(
            "--find-polluter: replays the earlier tests in order in one process, so it "
            "cannot run under pytest-xdist; drop -n/--dist (e.g. -p no:xdist)"
        )
    if options.requested(config):
        roles.activate(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``engine``; a test that declares engines switches the harness on."""
    run = metafunc.config.stash[RUN]
    specs = markers.declared(metafunc.definition, run.settings.default_engines)
    if not specs:
        return
    from . import roles

    roles.activate(metafunc.config)
    run.seen.update(spec.name for spec in specs)
    if run.known:
        unknown = [s.name for s in specs if s.name not in run.known]
        run.unknown.extend(f"{metafunc.definition.nodeid}: {name}" for name in unknown)
    if "engine" not in metafunc.fixturenames:
        metafunc.fixturenames.append("engine")
    # session scope: a fixture of any scope may depend on ``engine`` and gets one instance
    # per engine (a module's shared engine is that module's fixture, not its first test's)
    metafunc.parametrize("engine", markers.params(specs), scope="session")

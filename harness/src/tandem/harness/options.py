"""Command-line and ini options of the harness, and the resolved ``Settings``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

LEVELS = ("none", "engine", "module", "test")
START_METHODS = ("fork", "spawn")
LEAK_MODES = ("fail", "warn")
DEFAULT_TIMEOUT = 300.0
# the command-line flags that switch the harness on in a project that has not configured it
FLAGS = (
    "engines",
    "isolate",
    "harness_start",
    "harness_timeout",
    "leaks",
    "harness_seed",
    "engine_report",
    "find_polluter",
    "harness_worker",
)


@dataclass(slots=True)
class Settings:
    """Everything the harness reads from the command line, the ini file and the environment."""

    watch_prefixes: tuple[str, ...] = ()
    engine_env: str = ""
    engine_group: str = ""
    engines: tuple[str, ...] = ()
    default_engines: tuple[str, ...] = ()
    selected: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()
    isolation: str = "engine"
    start_method: str = "fork"
    timeout: float = 300.0
    ops_namespace: str = ""
    cache_clearers: tuple[str, ...] = ()
    leaks: str = "fail"
    seed: int | None = None
    engine_report: str = ""
    find_polluter: str = ""
    worker_fds: str = ""
    force_none: bool = False  # --isolate none: not even an isolate() marker forks
    seed_source: str = "random"  # "option", "pytest-randomly" or "random"


def add(parser: pytest.Parser) -> None:
    """Register the harness's options (called from ``pytest_addoption``)."""
    group = parser.getgroup("tandem-harness", "engine matrix, isolation and leak checks")
    group.addoption(
        "--engines",
        default=None,
        metavar="NAMES",
        help="comma-separated engines to keep (env: see harness_engines_env)",
    )
    group.addoption(
        "--isolate",
        default=None,
        metavar="LEVEL",
        help=f"isolation level, one of {', '.join(LEVELS)}",
    )
    group.addoption(
        "--harness-start",
        default=None,
        metavar="METHOD",
        help="how fresh processes start: fork (from the zygote) or spawn",
    )
    group.addoption(
        "--harness-timeout",
        default=None,
        metavar="SECONDS",
        help=f"per-test timeout in seconds, in children and in-process (default "
        f"{DEFAULT_TIMEOUT:g}; 0 = none)",
    )
    group.addoption(
        "--leaks",
        default=None,
        metavar="MODE",
        help="fail (default) or warn: what a leak does to its test",
    )
    group.addoption(
        "--harness-seed",
        default=None,
        metavar="N",
        help="seed for random/numpy/torch before each test (replay a failure)",
    )
    group.addoption(
        "--engine-report",
        default=None,
        metavar="PATH",
        help="write the engine coverage table as JSON to PATH",
    )
    group.addoption(
        "--find-polluter",
        default=None,
        metavar="TEST_ID",
        help="bisect the tests before TEST_ID to the one that makes it fail",
    )
    group.addoption("--harness-worker", default="", help="internal: serve a spawned child")
    parser.addini(
        "harness_watch_prefixes", "module name prefixes to watch", type="args", default=[]
    )
    parser.addini("harness_engine_env", "env var set to the engine while a test runs", default="")
    parser.addini("harness_engine_group", "entry-point group listing the engines", default="")
    parser.addini(
        "harness_engines", "engine names known besides the entry points", type="args", default=[]
    )
    parser.addini("harness_default_engines", "engines for unmarked tests", type="args", default=[])
    parser.addini(
        "harness_engines_env", "env var selecting engines like --engines", default="HARNESS_ENGINES"
    )
    parser.addini(
        "harness_preload", "modules the zygote imports before forking", type="args", default=[]
    )
    parser.addini("harness_isolation", f"isolation level: {', '.join(LEVELS)}", default="engine")
    parser.addini("harness_start_method", "fork or spawn", default="fork")
    parser.addini(
        "harness_timeout",
        f"per-test timeout in seconds (0 = none; default {DEFAULT_TIMEOUT:g})",
        default=str(DEFAULT_TIMEOUT),
    )
    parser.addini("harness_ops_namespace", "torch.library namespace to check", default="")
    parser.addini(
        "harness_cache_clearers",
        "callables 'module:function' clearing caches",
        type="args",
        default=[],
    )
    parser.addini("harness_leaks", "fail or warn", default="fail")
    parser.addini("harness_engine_report", "path of the JSON coverage report", default="")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise pytest.UsageError(f"{name}: expected one of {', '.join(allowed)}, got {value!r}")
    return value


def _number(name: str, value: str, kind: type) -> float | int:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{name}: expected a {kind.__name__}, got {value!r}") from None
    if number < 0:
        raise pytest.UsageError(f"{name}: expected a value >= 0, got {value!r}")
    return number


def _names(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.replace(" ", ",").split(",") if part.strip())


def requested(config: pytest.Config) -> bool:
    """Whether the project asked for the harness: a ``harness_*`` ini option or a harness flag.

    An unconfigured project runs as under plain pytest until a test declares engines.
    """
    if any(str(key).startswith("harness_") for key in config.inicfg):
        return True
    overrides = getattr(config.option, "override_ini", None) or []
    if any(str(item).startswith("harness_") for item in overrides):
        return True
    return any(getattr(config.option, name, None) not in (None, "") for name in FLAGS)


def load(config: pytest.Config) -> Settings:
    """Resolve the settings: command line over environment over ini."""
    opt = config.option
    ini = config.getini
    env_name = ini("harness_engines_env") or "HARNESS_ENGINES"
    selected = opt.engines if opt.engines is not None else os.environ.get(env_name, "")
    seed = opt.harness_seed
    if seed is None:
        seed = getattr(config, "workerinput", {}).get("harness_seed")
    return Settings(
        watch_prefixes=tuple(ini("harness_watch_prefixes")),
        engine_env=ini("harness_engine_env"),
        engine_group=ini("harness_engine_group"),
        engines=tuple(ini("harness_engines")),
        default_engines=tuple(ini("harness_default_engines")),
        selected=_names(selected),
        preload=tuple(ini("harness_preload")),
        isolation=_choice("--isolate", opt.isolate or ini("harness_isolation"), LEVELS),
        start_method=_choice(
            "--harness-start", opt.harness_start or ini("harness_start_method"), START_METHODS
        ),
        timeout=float(
            _number("--harness-timeout", opt.harness_timeout or ini("harness_timeout"), float)
        ),
        ops_namespace=ini("harness_ops_namespace"),
        cache_clearers=tuple(ini("harness_cache_clearers")),
        leaks=_choice("--leaks", opt.leaks or ini("harness_leaks"), LEAK_MODES),
        seed=None if seed is None else int(_number("--harness-seed", seed, int)),
        engine_report=opt.engine_report or ini("harness_engine_report"),
        find_polluter=opt.find_polluter or "",
        worker_fds=opt.harness_worker,
        force_none=opt.isolate == "none",
    )

"""Command-line and ini options of the harness, resolved into ``Settings``.

Ini options are registered with no default (``None``): ``getini`` then tells an option the
project set from one it did not, which is what switches the harness on.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..settings import DEFAULT_TIMEOUT, LEAK_MODES, LEVELS, START_METHODS, Settings

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


# ini option -> (help, type, the value it has when the project sets nothing)
INI: dict[str, tuple[str, str, Any]] = {
    "harness_watch_prefixes": ("module name prefixes to watch", "args", []),
    "harness_engine_env": ("env var set to the engine while a test runs", "string", ""),
    "harness_engine_group": ("entry-point group listing the engines", "string", ""),
    "harness_engines": ("engine names known besides the entry points", "args", []),
    "harness_default_engines": ("engines for unmarked tests", "args", []),
    "harness_engines_env": ("env var read like --engines", "string", "HARNESS_ENGINES"),
    "harness_preload": ("modules the zygote imports before forking", "args", []),
    "harness_isolation": (f"isolation level: {', '.join(LEVELS)}", "string", "engine"),
    "harness_start_method": ("fork or spawn", "string", "fork"),
    "harness_timeout": (
        f"per-test timeout in seconds (0 = none; default {DEFAULT_TIMEOUT:g})",
        "string",
        str(DEFAULT_TIMEOUT),
    ),
    "harness_ops_namespace": ("torch.library namespace to check", "string", ""),
    "harness_cache_clearers": ("callables 'module:function' clearing caches", "args", []),
    "harness_leaks": ("fail or warn", "string", "fail"),
    "harness_engine_report": ("path of the JSON coverage report", "string", ""),
}


def ini(config: pytest.Config, name: str) -> Any:
    """An ini option's value, or its documented default when the project set none."""
    value = config.getini(name)
    return INI[name][2] if value is None or value == "" or value == [] else value


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
    group.addoption(
        "--harness-fail-import-skips",
        action="store_true",
        default=None,
        help="a test skipped because an import failed (importorskip) is an error (for CI)",
    )
    group.addoption("--harness-worker", default="", help="internal: serve a spawned child")
    for name, (text, kind, _) in INI.items():
        parser.addini(name, text, type=kind, default=None)  # type: ignore[arg-type]
    # these two do not switch the rest of the harness on
    parser.addini(
        "harness_fail_import_skips",
        "a test skipped because an import failed is an error (for CI)",
        type="bool",
        default=False,
    )
    parser.addini(
        "harness_allowed_import_skips",
        "modules a test may still be skipped for (uninstallable here, e.g. CUDA-only)",
        type="args",
        default=[],
    )


def fail_import_skips(config: pytest.Config) -> tuple[bool, tuple[str, ...]]:
    """Whether import skips are errors, and the modules still allowed to be missing."""
    on = bool(config.option.harness_fail_import_skips or config.getini("harness_fail_import_skips"))
    return on, tuple(config.getini("harness_allowed_import_skips"))


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
    if any(config.getini(name) not in (None, "", []) for name in INI):
        return True
    return any(getattr(config.option, name, None) not in (None, "") for name in FLAGS)


def load(config: pytest.Config) -> Settings:
    """Resolve the settings: command line over environment over ini."""
    opt = config.option

    def get(name: str) -> Any:
        return ini(config, name)

    env_name = get("harness_engines_env")
    selected = opt.engines if opt.engines is not None else os.environ.get(env_name, "")
    seed = opt.harness_seed
    if seed is None:
        seed = getattr(config, "workerinput", {}).get("harness_seed")
    return Settings(
        watch_prefixes=tuple(get("harness_watch_prefixes")),
        engine_env=get("harness_engine_env"),
        engine_group=get("harness_engine_group"),
        engines=tuple(get("harness_engines")),
        default_engines=tuple(get("harness_default_engines")),
        selected=_names(selected),
        preload=tuple(get("harness_preload")),
        isolation=_choice("--isolate", opt.isolate or get("harness_isolation"), LEVELS),
        start_method=_choice(
            "--harness-start", opt.harness_start or get("harness_start_method"), START_METHODS
        ),
        timeout=float(
            _number("--harness-timeout", opt.harness_timeout or get("harness_timeout"), float)
        ),
        ops_namespace=get("harness_ops_namespace"),
        cache_clearers=tuple(get("harness_cache_clearers")),
        leaks=_choice("--leaks", opt.leaks or get("harness_leaks"), LEAK_MODES),
        seed=None if seed is None else int(_number("--harness-seed", seed, int)),
        engine_report=opt.engine_report or get("harness_engine_report"),
        find_polluter=opt.find_polluter or "",
        worker_fds=opt.harness_worker,
        force_none=opt.isolate == "none",
    )

"""What a run of the harness was asked to do: the resolved ``Settings``.

Plain data, with no pytest in it: the leak checks and the isolation machinery read it,
and the pytest face (``plugin.options``) fills it from the command line, the ini file
and the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

LEVELS = ("none", "engine", "module", "test")
START_METHODS = ("fork", "spawn")
LEAK_MODES = ("fail", "warn")
DEFAULT_TIMEOUT = 300.0


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
    timeout: float = DEFAULT_TIMEOUT
    ops_namespace: str = ""
    cache_clearers: tuple[str, ...] = ()
    leaks: str = "fail"
    seed: int | None = None
    engine_report: str = ""
    find_polluter: str = ""
    worker_fds: str = ""  # a spawned child: "cmd_fd,result_fd,folder"
    force_none: bool = False  # --isolate none: not even an isolate() marker forks
    seed_source: str = "random"  # a key of plugin.seeds.SOURCES

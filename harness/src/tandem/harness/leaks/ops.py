"""Custom-op checks in the watched torch.library namespace (torch used only if loaded).

Per test: ops registered during the test and still there. At session start: two
definitions of one op name, or an implementation replaced from elsewhere (the recorder
wraps torch.library's registration entry points as soon as torch is loaded).
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import Leak

_ORIGINS: dict[tuple[str, str], str] = {}
_PROBLEMS: list[str] = []
_DEFINED: list[str] = []  # every definition seen by the recorder, in order
_RECORDING: list[str] = []  # the namespace the recorder watches, once installed


def _torch() -> Any:
    return sys.modules.get("torch")


def names(namespace: str) -> set[str]:
    """Names of the ops registered in ``namespace`` (empty without torch)."""
    torch = _torch()
    lister = getattr(getattr(torch, "_C", None), "_dispatch_get_all_op_names", None)
    if not namespace or lister is None:
        return set()
    prefix = namespace + "::"
    return {name for name in lister() if name.startswith(prefix)}


def _origin() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "/torch/" not in frame.filename and "tandem/harness" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


def _note(namespace: str, kind: str, name: str) -> None:
    if not name.startswith(namespace + "::"):
        return
    origin = _origin()
    key = (kind, name)
    if kind == "def":
        _DEFINED.append(name)
    first = _ORIGINS.get(key)
    if first is None:
        _ORIGINS[key] = origin
    elif first != origin:
        what = "defined twice" if kind == "def" else f"has its {kind} implementation replaced"
        problem = f"custom op {name} {what}: first at {first}, again at {origin}"
        if problem not in _PROBLEMS:
            _PROBLEMS.append(problem)


def _qualify(lib: Any, name: str) -> str:
    base = name.split("(")[0].split(".")[0]
    return base if "::" in base else f"{getattr(lib, 'ns', '?')}::{base}"


def record(namespace: str) -> None:
    """Wrap torch.library's registration functions (once) to remember every origin."""
    torch = _torch()
    library = getattr(torch, "library", None)
    if not namespace or library is None or getattr(library, "_harness_recorded", False):
        return
    library._harness_recorded = True
    _RECORDING[:] = [namespace]

    def wrap(owner: Any, attr: str, key: Callable[..., tuple[str, str] | None]) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return

        @functools.wraps(original)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            with _suppress():
                found = key(*args, **kwargs)
                if found:
                    _note(namespace, found[0], found[1])
            return original(*args, **kwargs)

        setattr(owner, attr, recorded)

    def custom_op_key(name: Any = None, *a: Any, **k: Any) -> tuple[str, str] | None:
        return ("def", name) if isinstance(name, str) else None

    def define_key(lib: Any, schema: str, *a: Any, **k: Any) -> tuple[str, str]:
        return ("def", _qualify(lib, schema))

    def impl_key(
        lib: Any, op: Any, fn: Any = None, key: str = "", *a: Any, **k: Any
    ) -> tuple[str, str] | None:
        op_name = op if isinstance(op, str) else getattr(op, "__name__", "")
        return (k.get("dispatch_key", key) or "impl", _qualify(lib, op_name))

    def kernel_key(op: Any, device: Any = None, *a: Any, **k: Any) -> tuple[str, str] | None:
        name = op if isinstance(op, str) else getattr(op, "_name", "")
        return (f"kernel:{device}", name) if name else None

    wrap(library, "custom_op", custom_op_key)
    wrap(library.Library, "define", define_key)
    wrap(library.Library, "impl", impl_key)
    wrap(library, "register_kernel", kernel_key)
    opdef = getattr(library, "CustomOpDef", None)
    if opdef is not None:
        wrap(
            opdef,
            "register_kernel",
            lambda self, device=None, *a, **k: (
                f"kernel:{device}",
                f"{getattr(self, '_namespace', '')}::{getattr(self, '_name', '')}",
            ),
        )


class _suppress:
    """Recording must never break a registration."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return True


def problems() -> list[str]:
    return list(_PROBLEMS)


@dataclass(frozen=True)
class OpSnap:
    ops: frozenset[str] | int  # a position in the recorder's log, else the op names
    problems: int  # how many conflicts were known
    skip: frozenset[str] = frozenset()  # ops wider fixtures registered


class OpCheck:
    """Ops of one namespace registered and not removed; conflicts found since the snapshot.

    Listing every op costs milliseconds; with the recorder installed (the moment torch is
    loaded) a test that defined nothing costs nothing.
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def snapshot(self) -> OpSnap:
        record(self.namespace)  # torch may have been imported since the last test
        ops = len(_DEFINED) if [self.namespace] == _RECORDING else frozenset(names(self.namespace))
        return OpSnap(ops, len(_PROBLEMS))

    def _new(self, start: OpSnap, end: OpSnap | None = None) -> set[str]:
        if isinstance(start.ops, int) and (end is None or isinstance(end.ops, int)):
            return set(_DEFINED[start.ops : None if end is None else end.ops])
        now = names(self.namespace) if end is None else end.ops
        old = start.ops if isinstance(start.ops, frozenset) else frozenset()
        return set(now) - old if isinstance(now, (set, frozenset)) else set()

    def compare(self, before: OpSnap) -> list[Leak]:
        fresh = self._new(before) - before.skip
        out = []
        if fresh:
            twice = {p.split()[2] for p in _PROBLEMS if " defined twice" in p}
            alive = names(self.namespace) & fresh
            out = [
                Leak(f"custom op {name} was registered and not removed")
                for name in sorted(alive - twice)
            ]
        return out + [Leak(problem) for problem in _PROBLEMS[before.problems :]]

    def absorb(self, snap: OpSnap, start: OpSnap, end: OpSnap) -> OpSnap:
        return OpSnap(snap.ops, snap.problems, snap.skip | self._new(start, end))

    def left_over(self, start: OpSnap, end: OpSnap) -> list[Leak]:
        alive = names(self.namespace) & self._new(start, end)
        return [Leak(f"custom op {name} it registered was not removed") for name in sorted(alive)]

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


def _qualify(lib: Any, name: str) -> str:
    base = name.split("(")[0].split(".")[0]
    return base if "::" in base else f"{getattr(lib, 'ns', '?')}::{base}"


class OpRecorder:
    """Every registration in one namespace, with where it came from; conflicts found.

    torch.library's registration entry points are wrapped once per process; the wrappers
    tell every recorder installed (``torch.library._harness_recorders``), so a recorder's
    tables are its own and end with it (``uninstall``).
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.origins: dict[tuple[str, str], str] = {}
        self.problems: list[str] = []
        self.defined: list[str] = []  # every definition seen, in order
        self.installed = False

    def note(self, kind: str, name: str, origin: str) -> None:
        if not name.startswith(self.namespace + "::"):
            return
        key = (kind, name)
        if kind == "def":
            self.defined.append(name)
        first = self.origins.get(key)
        if first is None:
            self.origins[key] = origin
        elif first != origin:
            what = "defined twice" if kind == "def" else f"has its {kind} implementation replaced"
            problem = f"custom op {name} {what}: first at {first}, again at {origin}"
            if problem not in self.problems:
                self.problems.append(problem)

    def install(self) -> None:
        """Start recording (torch loaded): from now on every registration is noted."""
        library = getattr(_torch(), "library", None)
        if not self.namespace or library is None or self.installed:
            return
        recorders = _wrap(library)
        recorders.append(self)
        self.installed = True

    def uninstall(self) -> None:
        library = getattr(_torch(), "library", None)
        recorders = getattr(library, "_harness_recorders", [])
        if self in recorders:
            recorders.remove(self)
        self.installed = False


def _wrap(library: Any) -> list[OpRecorder]:
    """Wrap torch.library's registration functions (once); the list of recorders told."""
    recorders: list[OpRecorder] | None = getattr(library, "_harness_recorders", None)
    if recorders is not None:
        return recorders
    recorders = library._harness_recorders = []

    def wrap(owner: Any, attr: str, key: Callable[..., tuple[str, str] | None]) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return

        @functools.wraps(original)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            with _suppress():
                found = key(*args, **kwargs) if recorders else None
                if found:
                    origin = _origin()
                    for recorder in list(recorders):
                        recorder.note(found[0], found[1], origin)
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
    return recorders


class _suppress:
    """Recording must never break a registration."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return True


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

    def __init__(self, recorder: OpRecorder) -> None:
        self.recorder = recorder
        self.namespace = recorder.namespace

    def snapshot(self) -> OpSnap:
        rec = self.recorder
        rec.install()  # torch may have been imported since the last test
        ops = len(rec.defined) if rec.installed else frozenset(names(self.namespace))
        return OpSnap(ops, len(rec.problems))

    def _new(self, start: OpSnap, end: OpSnap | None = None) -> set[str]:
        if isinstance(start.ops, int) and (end is None or isinstance(end.ops, int)):
            return set(self.recorder.defined[start.ops : None if end is None else end.ops])
        now = names(self.namespace) if end is None else end.ops
        old = start.ops if isinstance(start.ops, frozenset) else frozenset()
        return set(now) - old if isinstance(now, (set, frozenset)) else set()

    def compare(self, before: OpSnap) -> list[Leak]:
        fresh = self._new(before) - before.skip
        problems = self.recorder.problems
        out = []
        if fresh:
            twice = {p.split()[2] for p in problems if " defined twice" in p}
            alive = names(self.namespace) & fresh
            out = [
                Leak(f"custom op {name} was registered and not removed")
                for name in sorted(alive - twice)
            ]
        return out + [Leak(problem) for problem in problems[before.problems :]]

    def absorb(self, snap: OpSnap, start: OpSnap, end: OpSnap) -> OpSnap:
        return OpSnap(snap.ops, snap.problems, snap.skip | self._new(start, end))

    def left_over(self, start: OpSnap, end: OpSnap) -> list[Leak]:
        alive = names(self.namespace) & self._new(start, end)
        return [Leak(f"custom op {name} it registered was not removed") for name in sorted(alive)]

"""The import watcher: a finder that sees the moment each watched module's code has run.

Standard library only (and only modules Python has loaded at start-up), no pytest: the
same watcher runs in the pytest process (``imports``) and, through the probe, in every
Python child process of the code under test (``probe``).

A module's *clean* state is its tracked attributes (callables, classes, modules: what
``mock.patch`` swaps; plain data legitimately changes) right after its own code ran.
Whatever later differs from it is a patch.
"""

from __future__ import annotations

import operator
import sys
import types

TYPE_CHECKING = False  # the probe runs at every Python child's start: typing is not loaded
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from typing import Any


def tracked(value: Any) -> bool:
    return callable(value) or isinstance(value, types.ModuleType)


def is_mock(value: Any) -> bool:
    return type(value).__module__ == "unittest.mock"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


class CleanState:
    """A module's tracked attributes right after its import, and a fast test for them.

    ``intact`` fetches every tracked attribute at once and compares the tuple with the
    clean one (identical objects compare equal without calling ``__eq__``), so checking
    an untouched module costs about a microsecond; ``changes`` names what differs.
    """

    __slots__ = ("_fetch", "_size", "_values", "attrs")

    def __init__(self, module: types.ModuleType) -> None:
        namespace = vars(module)
        self.attrs: dict[str, Any] = {a: v for a, v in list(namespace.items()) if tracked(v)}
        keys = tuple(self.attrs)
        self._values = tuple(self.attrs.values())
        self._fetch = operator.itemgetter(*keys) if keys else None
        self._size = len(namespace)

    def intact(self, module: types.ModuleType) -> bool:
        namespace = vars(module)
        if len(namespace) != self._size:
            return False
        if self._fetch is None:
            return True
        try:
            now = self._fetch(namespace)
            return (now if len(self._values) > 1 else (now,)) == self._values
        except Exception:  # an attribute deleted, or an __eq__ that raises
            return False

    def changes(self, name: str, module: types.ModuleType) -> list[tuple[str, str, Any]]:
        """``(attr, description, clean object)`` for each tracked attribute no longer clean.

        An attribute added as a mock (``create=True``) is one too: its clean object is
        ``MISSING`` (undoing it deletes the attribute).
        """
        out = []
        namespace = vars(module)
        for attr, old in self.attrs.items():
            new = namespace.get(attr, MISSING)
            if new is old or _submodule(name, attr, new):
                continue
            now = "deleted" if new is MISSING else f"replaced by {new!r}"[:200]
            out.append((attr, f"{name}.{attr} was {now} (a patch that was never undone?)", old))
        for attr, value in list(namespace.items()):
            if attr not in self.attrs and is_mock(value):
                text = f"{name}.{attr} was added as {value!r} (a patch with create=True?)"
                out.append((attr, text, MISSING))
        if not out:
            self._size = len(namespace)  # it grew by plain data or submodules: fine
        return out


def _submodule(name: str, attr: str, value: Any) -> bool:
    """The import system binding ``name.attr`` to the submodule just imported: no patch."""
    return isinstance(value, types.ModuleType) and value.__name__ == f"{name}.{attr}"


def put_back(module: types.ModuleType, attr: str, old: Any) -> None:
    if old is MISSING:
        if attr in vars(module):
            delattr(module, attr)
    else:
        setattr(module, attr, old)


def active_patches() -> list[Any]:
    """``mock.patch(...).start()`` patchers not yet stopped (empty if mock is not loaded)."""
    mock = sys.modules.get("unittest.mock")
    patch = getattr(mock, "_patch", None)
    return list(getattr(patch, "_active_patches", []))


def describe_patch(patcher: Any) -> str:
    target = getattr(patcher, "getter", lambda: "?")
    try:
        where = f"{target().__name__}.{patcher.attribute}"
    except Exception:
        where = str(getattr(patcher, "attribute", "?"))
    return f"unittest.mock patch of {where} is still active"


class _Loader:
    """Wraps a module's real loader to see the moment its code has run."""

    def __init__(self, inner: Any, watcher: ImportWatcher) -> None:
        self.inner = inner
        self.watcher = watcher

    def __getattr__(self, name: str) -> Any:  # get_code, is_package...: runpy asks for them
        return getattr(self.inner, name)

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.inner  # the module never sees the wrapper
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self.inner
        watched = self.watcher.watched(module.__name__)
        if watched:
            self.watcher.entering(module.__name__)
        try:
            self.inner.exec_module(module)
        finally:
            if watched:
                self.watcher.depth -= 1
        self.watcher.loaded(module, watched)


class ImportWatcher:
    """Watches modules under ``prefixes`` (never the package ``own``); runs import hooks.

    ``before_outermost(name)`` and ``after_outermost(name)`` are called around each watched
    import that is not nested in another one (the probe checks there).
    """

    def __init__(self, own: str) -> None:
        self.own = own
        self.prefixes: tuple[str, ...] = ()
        self.busy: set[str] = set()
        self.clean: dict[str, CleanState] = {}
        self.loaded_names: list[str] = []  # watched modules, in the order their import finished
        self.callbacks: dict[str, list[Callable[[], None]]] = {}
        self.depth = 0
        self.outermost = ""
        self.before_outermost: Callable[[str], None] | None = None
        self.after_outermost: Callable[[str], None] | None = None
        # the watched names among sys.modules, and the module count they were listed at
        self.scanned: tuple[tuple[str, ...], int, list[str]] = ((), -1, [])

    def watched(self, name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in self.prefixes) and not (
            name == self.own or name.startswith(self.own + ".")
        )

    def watch(self, prefixes: Sequence[str]) -> None:
        """Add ``prefixes`` and put the finder first on ``sys.meta_path`` (once)."""
        self.prefixes = tuple(dict.fromkeys((*self.prefixes, *prefixes)))
        self.install()

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def on_import(self, name: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` now if ``name`` is imported, else right after its import."""
        if name in sys.modules:
            callback()
            return
        self.callbacks.setdefault(name, []).append(callback)
        self.install()

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if name in self.busy or not (name in self.callbacks or self.watched(name)):
            return None
        self.busy.add(name)
        try:
            spec = self._real_spec(name, path, target)
        finally:
            self.busy.discard(name)
        loader = getattr(spec, "loader", None)
        if spec is not None and loader is not None and hasattr(loader, "exec_module"):
            spec.loader = _Loader(loader, self)
        return spec

    def _real_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None
    ) -> ModuleSpec | None:
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                return spec
        return None

    def entering(self, name: str) -> None:
        if self.depth == 0:
            self.outermost = name
            if self.before_outermost is not None:
                self.before_outermost(name)
        self.depth += 1

    def loaded(self, module: types.ModuleType, watched: bool) -> None:
        name = module.__name__
        if watched:
            self.clean[name] = CleanState(module)
            self.loaded_names.append(name)
            if self.depth == 0 and self.after_outermost is not None:
                self.after_outermost(name)
        for callback in self.callbacks.pop(name, []):
            try:
                callback()
            except Exception:  # a hook must never break an import
                continue

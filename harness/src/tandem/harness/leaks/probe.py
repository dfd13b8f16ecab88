"""The probe: runs inside every Python child process of the code under test.

While it isolates, the harness puts a folder on ``PYTHONPATH`` whose ``sitecustomize.py``
calls ``start()`` at the child's start-up, and names a report folder in ``ENV``. The
probe watches the child's imports of watched modules (``watcher``) and writes a JSON
report into that folder as soon as it sees

- a ``mock.patch(...).start()`` still active, or an attribute of a watched module that is
  no longer its clean object (a patch made while importing, e.g. in an engine's worker);
- an ``os.environ`` write made by watched code while it was being imported.

It looks at the end of each outermost watched import, and also whenever the harness asks:
once a watched module is loaded, the child listens on a Unix socket in the report folder
(``<pid>.sock``, served by a bare thread) and the harness asks every live child at the
start and at the end of each test, as it checks its own process then. A patch made later
(a worker swapping a function while it serves, importing nothing) is named and put back
there, or at the child's normal exit. The child may end with ``os._exit`` (no atexit):
nothing waits for its end. The harness reads and removes the reports (``children``).
Standard library only, and only modules loaded at start-up (``_socket`` and ``atexit``
once a watched module is loaded): every Python child pays for this.
"""

from __future__ import annotations

import _thread
import os
import sys

from .watcher import CleanState, ImportWatcher, active_patches, describe_patch, put_back

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

ENV = "HARNESS_CHILD_PROBE"  # lines: report folder, the harness's package, watched prefixes
ASK = b"check\n"  # what the harness sends a child's socket; the child answers DONE when done
DONE = b"done\n"
SOCKET_SUFFIX = ".sock"
_SKIPPED_FRAMES = ("os", "_collections_abc")  # os.environ.update / setdefault call through


class Probe:
    def __init__(self, folder: str, own: str, prefixes: list[str]) -> None:
        self.folder = folder
        self.watcher = ImportWatcher(own)
        self.watcher.before_outermost = self._started
        self.watcher.after_outermost = self._finished
        self.watcher.probe = self  # type: ignore[attr-defined] - how ``find`` tells it
        self.patches: tuple[object, ...] = ()
        self.told: list[object] = []  # patchers already named (each is told once)
        self.env_writes: list[str] = []
        self.reported = 0
        self.active = True
        self.lock = _thread.allocate_lock()  # the import hook and the listener both check
        self.listener: object = None  # the socket the harness asks on, once listening
        self.at_exit = False  # whether the exit check is registered
        self.watcher.watch(prefixes)
        _trace_environ(self)
        os.register_at_fork(after_in_child=self._forked)

    def stop(self) -> None:
        self.active = False
        self.watcher.uninstall()
        self._close_listener()

    def _started(self, name: str) -> None:
        self.patches = tuple(active_patches())
        self.env_writes = []

    def _finished(self, name: str) -> None:
        if not self.active:
            return
        with self.lock:
            found = [describe_patch(p) for p in active_patches() if not _among(p, self.patches)]
            self.told += [p for p in active_patches() if not _among(p, self.patches)]
            found += self._changed(undo=False)
            found += self.env_writes
            self.env_writes = []
            if found:
                self._write([f"{text} (while importing {name})" for text in dict.fromkeys(found)])
        if self.listener is None:
            self._listen()

    def _changed(self, undo: bool) -> list[str]:
        """Attributes of watched modules no longer clean; each is told once (or put back)."""
        found = []
        for module_name, clean in list(self.watcher.clean.items()):
            module = sys.modules.get(module_name)
            if module is None or clean.intact(module):
                continue
            changes = clean.changes(module_name, module)
            found += [text for _, text, _ in changes]
            if undo:
                for attr, _, old in changes:
                    put_back(module, attr, old)
            else:
                self.watcher.clean[module_name] = CleanState(module)  # told once
        return found

    def check(self, when: str) -> None:
        """What is not clean now (asked by the harness, or at exit): named and put back."""
        if not self.active:
            return
        with self.lock:
            found = []
            for patcher in active_patches():
                if _among(patcher, self.told) or not self._targets_watched(patcher):
                    continue
                self.told.append(patcher)
                found.append(describe_patch(patcher))
                _quietly(patcher.stop)  # puts its attribute back  # type: ignore[attr-defined]
            found += self._changed(undo=True)
            if found:
                self._write([f"{text} ({when})" for text in dict.fromkeys(found)])

    def _targets_watched(self, patcher: object) -> bool:
        try:
            return self.watcher.watched(patcher.getter().__name__)  # type: ignore[attr-defined]
        except Exception:
            return False

    def _listen(self) -> None:
        """Answer the harness's questions from now on (a watched module is loaded)."""
        import _socket
        import atexit

        path = os.path.join(self.folder, f"{os.getpid()}{SOCKET_SUFFIX}")
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.bind(path)
            sock.listen(8)
        except OSError:  # the harness has gone, or the path is too long for a socket
            sock.close()
            self.listener = False
            return
        self.listener = sock
        if not self.at_exit:
            self.at_exit = True
            atexit.register(self.check, "at its exit")
        _thread.start_new_thread(self._serve, (sock, path))

    def _serve(self, sock: object, path: str) -> None:
        import _socket

        while self.listener is sock:
            try:
                fd, _ = sock._accept()  # type: ignore[attr-defined]
            except OSError:  # closed: this probe stopped, or its process forked
                return
            conn = _socket.socket(fileno=fd)
            try:
                conn.settimeout(5.0)
                if conn.recv(len(ASK)) == ASK:
                    self.check("seen when the harness checked at a test's start or end")
                    conn.sendall(DONE)
            except Exception:  # the question must never hurt the child
                pass
            finally:
                conn.close()

    def _close_listener(self) -> None:
        """Stop answering: shutting the socket down wakes the thread blocked in accept."""
        sock, self.listener = self.listener, None
        if not sock:
            return
        _quietly(sock.shutdown, 2)  # type: ignore[attr-defined] - 2: SHUT_RDWR
        _quietly(sock.close)  # type: ignore[attr-defined]
        _quietly(os.unlink, os.path.join(self.folder, f"{os.getpid()}{SOCKET_SUFFIX}"))

    def _forked(self) -> None:
        """A forked child: the listener and its thread were the parent's (left untouched)."""
        self.lock = _thread.allocate_lock()  # the parent's thread may have held it
        sock, self.listener = self.listener, None
        if sock:
            sock.close()  # type: ignore[attr-defined] - this process's copy only
            if self.active:
                self._listen()

    def env_written(self, key: str, old: str | None, new: str | None) -> None:
        """A write to os.environ: noted when watched code made it during a watched import."""
        if not self.active or self.watcher.depth == 0 or old == new:
            return
        frame = sys._getframe(2)
        while frame is not None and frame.f_globals.get("__name__") in _SKIPPED_FRAMES:
            frame = frame.f_back
        module = frame.f_globals.get("__name__", "") if frame is not None else ""
        if frame is None or not isinstance(module, str) or not self.watcher.watched(module):
            return
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} ({module})"
        change = "removed" if new is None else f"set to {new!r}"
        self.env_writes.append(f"env var {key} was {change} by {where}")

    def _write(self, problems: list[str]) -> None:
        import json  # only a child with something to tell pays for it

        self.reported += 1
        path = os.path.join(self.folder, f"{os.getpid()}-{self.reported}.json")
        argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
        data = {"pid": os.getpid(), "argv": list(argv), "problems": problems}
        try:
            with open(path + ".part", "w") as f:
                json.dump(data, f)
            os.replace(path + ".part", path)
        except OSError:  # the harness has gone (its folder with it)
            pass


def _quietly(action: Callable[..., object], *args: object) -> None:
    """Call ``action``; its failure must never hurt the child (contextlib is not loaded)."""
    try:  # noqa: SIM105
        action(*args)
    except Exception:
        pass


def _among(item: object, items: tuple[object, ...]) -> bool:
    return any(item is other for other in items)


def _trace_environ(probe: Probe) -> None:
    cls = type(os.environ)

    def wrap(original: Callable[..., None], deleting: bool) -> Callable[..., None]:
        def traced(self: object, key: str, *value: str) -> None:
            old = os.environ.get(key) if self is os.environ else None
            original(self, key, *value)
            if self is os.environ:
                probe.env_written(key, old, None if deleting else value[0])

        traced.__name__ = original.__name__
        traced.__qualname__ = original.__qualname__
        return traced

    cls.__setitem__ = wrap(cls.__setitem__, False)  # type: ignore[method-assign]
    cls.__delitem__ = wrap(cls.__delitem__, True)  # type: ignore[method-assign]


def find() -> Probe | None:
    """The probe of this process, if one runs: its watcher is on ``sys.meta_path``."""
    for finder in sys.meta_path:
        probe = getattr(finder, "probe", None)
        if isinstance(probe, Probe):
            return probe
    return None


def start() -> Probe | None:
    """Start the probe if the harness asked for it (``ENV``); once per process."""
    config = os.environ.get(ENV)
    if not config or find() is not None:
        return None
    folder, own, *prefixes = config.split("\n")
    return Probe(folder, own, prefixes) if prefixes else None


def stop() -> None:
    """Stop a probe this process inherited (a pytest process that runs the harness itself)."""
    probe = find()
    if probe is not None:
        probe.stop()

"""tandem.core's rooms stand on floors, and every import runs down.

A room is a folder of ``tandem/core`` (``config/``, ``inputs/``...) or one of the few
modules the whole package stands on (``envs``, ``validate``...). A module may import from
its own room or from a room on a lower floor: never from one above (the arrow back up that
ties a low room to everything on top of it), nor from another room on its own floor (rooms
that share a floor know nothing of each other). Every import counts, as in
``test_layers``: module-level, type-only and function-local.

A new room, or a new loose module, has to be placed on a floor here before it can land.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_layers import MODULES, imports

CORE = "tandem.core"

# bottom to top; the rooms of one floor do not import each other
FLOORS: tuple[tuple[str, ...], ...] = (
    # below the ground: a directory built whole, then renamed into place
    ("atomic_dir",),
    # the ground: env vars, field checks, child processes' failures and ends, the model
    # spec, the KV cache's arithmetic, ids <-> text, what a request returns
    (
        "envs",
        "env_cache",
        "validate",
        "progress",
        "child_failure",
        "child_exit",
        "spec",
        "kv",
        "text",
        "outputs",
    ),
    ("parallel", "heap", "disk_cache", "structured"),
    ("layers", "inputs"),
    ("models",),
    ("gguf", "testing"),
    ("catalog",),
    ("config",),
    ("engine",),
    ("speculative", "entrypoints"),
    ("server",),
    ("cli",),
)
FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
TOP = len(FLOORS)  # the package's face, tandem.core itself: it names every room


def room_of(module: str) -> str:
    """The room of a tandem.core module: the first name under tandem.core ("" for the face)."""
    rest = module.removeprefix(CORE).removeprefix(".")
    return rest.split(".")[0]


def floor_of(module: str) -> int:
    room = room_of(module)
    return TOP if room == "" else FLOOR[room]


CORE_MODULES = sorted(m for m in MODULES if m == CORE or m.startswith(CORE + "."))


def test_the_floors_name_each_room_once() -> None:
    rooms = [room for rooms in FLOORS for room in rooms]
    assert len(rooms) == len(set(rooms)), rooms


def test_every_core_module_stands_in_a_room_on_a_floor() -> None:
    unplaced = sorted({room_of(m) for m in CORE_MODULES} - set(FLOOR) - {""})
    assert not unplaced, f"rooms or loose modules of tandem.core on no floor: {unplaced}"


def test_every_room_on_a_floor_is_there() -> None:
    present = {room_of(m) for m in CORE_MODULES}
    assert not set(FLOOR) - present, f"floors name rooms that are gone: {set(FLOOR) - present}"


def arrows_that_do_not_run_down(
    modules: list[str], read: Callable[[str], set[str]] = lambda m: imports(m)[2]
) -> list[str]:
    bad = []
    for module in modules:
        room, level = room_of(module), floor_of(module)
        for target in sorted(read(module)):
            if not (target == CORE or target.startswith(CORE + ".")):
                continue
            there = room_of(target)
            if there == room:
                continue
            if floor_of(target) > level:
                bad.append(f"{module} (floor {level}) imports {target} (floor {floor_of(target)})")
            elif floor_of(target) == level:
                bad.append(f"{module} imports {target}: {room}/ and {there}/ share floor {level}")
    return bad


def test_core_imports_run_down_only() -> None:
    bad = arrows_that_do_not_run_down(CORE_MODULES)
    assert not bad, "tandem.core imports run down the floors only:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("tandem.core.speculative.draft", "tandem.core.server.app"),  # back up
        ("tandem.core.structured.check", "tandem.core.parallel.group"),  # across a floor
        ("tandem.core.kv.cache", "tandem.core"),  # up to the face
    ],
)
def test_an_arrow_up_or_across_is_refused(module: str, target: str) -> None:
    """The rule itself can fail: the same check over one module given one more import."""
    assert arrows_that_do_not_run_down([module]) == []
    found = arrows_that_do_not_run_down([module], lambda m: imports(m)[2] | {target})
    assert len(found) == 1 and target in found[0], found

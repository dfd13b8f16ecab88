"""Layers inside the packages: engine v1's layers and no import cycles in tandem.*.

Imports are read from the source (``ast``), not by importing. Every import counts, for
the layer rules and for cycles alike: a module-level one, one under ``if TYPE_CHECKING:``
and a function-local one. A type-only or a deferred circle is still a circle: the two
modules cannot be understood, moved or tested apart. A function-local import is how a
module reaches a heavier one on demand, and that arrow must run one way too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    "tandem.kernels": ROOT / "kernels/src/tandem/kernels",
    "tandem.core": ROOT / "packages/core/src/tandem/core",
    "tandem.v0": ROOT / "packages/engine-v0/src/tandem/v0",
    "tandem.v1": ROOT / "packages/engine-v1/src/tandem/v1",
    "tandem.harness": ROOT / "harness/src/tandem/harness",
}
V1_LAYERS = ("frontend", "proc", "detokenizer", "worker", "core")
V1_LOOSE = ("tandem.v1", "tandem.v1.errors", "tandem.v1.messages")  # outside the layers


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = module.split(".")
        package = base if MODULES[module].name == "__init__.py" else base[:-1]
        prefix = ".".join(package[: len(package) - node.level + 1])
        target = f"{prefix}.{node.module}" if node.module else prefix
    else:
        target = node.module or ""
    # `from pkg import sub` imports the submodule pkg.sub when there is one
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    return subs or [target]


def imports(module: str) -> tuple[set[str], set[str], set[str]]:
    """(module-level, type-checking, all) imports of ``module`` within tandem.*."""
    tree = ast.parse(MODULES[module].read_text())
    top: set[str] = set()
    typing: set[str] = set()
    every: set[str] = set()

    def visit(nodes: list[ast.stmt], at_top: bool, for_types: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.body, at_top, True)
                visit(node.orelse, at_top, for_types)
                continue
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                found = _resolve(module, node)
            found = [f for f in found if f.startswith("tandem.")]
            every.update(found)
            if at_top:
                (typing if for_types else top).update(found)
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list) and children and isinstance(children[0], ast.AST):
                    nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    inner = at_top and not nested and not isinstance(node, ast.ClassDef)
                    visit(children, inner, for_types)

    visit(tree.body, True, False)
    return top, typing, every


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _v1(layer: str) -> list[str]:
    return [m for m in MODULES if _within(m, f"tandem.v1.{layer}")]


def test_every_v1_module_is_in_a_layer() -> None:
    loose = [
        m
        for m in MODULES
        if _within(m, "tandem.v1")
        and m not in V1_LOOSE
        and not any(_within(m, f"tandem.v1.{layer}") for layer in V1_LAYERS)
    ]
    assert not loose, f"v1 modules outside {', '.join(V1_LAYERS)}: {loose}"


def _layer(module: str) -> str | None:
    return next((la for la in V1_LAYERS if _within(module, f"tandem.v1.{la}")), None)


# what each layer of v1 may import besides itself, top to bottom: arrows run one way,
# and the worker sees of the core only the step it is handed (its plain data)
V1_MAY_IMPORT = {
    "frontend": ("proc", "detokenizer", "worker", "core", "messages", "errors"),
    "proc": ("detokenizer", "worker", "core", "messages"),
    "detokenizer": ("messages",),
    "worker": ("core.step",),
    "core": ("messages",),
}


def test_v1_layers_import_downwards_only() -> None:
    bad = []
    for module in MODULES:
        layer = _layer(module)
        if layer is None:
            continue
        allowed = [f"tandem.v1.{a}" for a in (layer, *V1_MAY_IMPORT[layer])]
        for target in sorted(imports(module)[2]):
            if _within(target, "tandem.v1") and not any(_within(target, a) for a in allowed):
                bad.append(f"{module} ({layer}/) imports {target}")
    assert not bad, "v1's layers import downwards only:\n" + "\n".join(bad)


def test_v1_layer_order_has_no_circle() -> None:
    """The allowed arrows themselves run one way: each layer imports only layers listed
    after it in V1_LAYERS."""
    for i, layer in enumerate(V1_LAYERS):
        below = V1_LAYERS[i + 1 :]
        for target in V1_MAY_IMPORT[layer]:
            root = target.split(".")[0]
            assert root in below or f"tandem.v1.{root}" in V1_LOOSE, (layer, target)


# (modules, forbidden import prefixes, allowed exceptions, why)
RULES = [
    (
        _v1("worker"),
        ("tandem.v1.core",),
        ("tandem.v1.core.step",),
        "the worker is handed a step as plain data: never the KV cache manager, a live "
        "request or the scheduler",
    ),
    (
        ["tandem.v1.core.step"],
        ("tandem.v1",),
        (),
        "the step data is plain: it imports nothing else of v1",
    ),
    (
        _v1("core"),
        ("tandem.v1.frontend", "tandem.v1.proc", "tandem.v1.worker", "tandem.v1.detokenizer"),
        (),
        "the core speaks in messages and step data; the worker is handed to it",
    ),
    (
        [m for m in _v1("frontend") if m != "tandem.v1.frontend.inproc_client"],
        ("tandem.v1.worker", "tandem.v1.core", "tandem.v1.detokenizer"),
        (),
        "the front end reaches the model only through a client",
    ),
    (
        ["tandem.v1.messages"],
        ("tandem.v1",),
        (),
        "the messages are the contract between layers: they import none of them",
    ),
    (
        [m for m in MODULES if _within(m, "tandem.v0")],
        ("tandem.v1",),
        (),
        "the engines are independent",
    ),
    (
        [m for m in MODULES if _within(m, "tandem.v1")],
        ("tandem.v0",),
        (),
        "the engines are independent",
    ),
]


@pytest.mark.parametrize(("modules", "forbidden", "allowed", "why"), RULES)
def test_layer_direction(
    modules: list[str], forbidden: tuple[str, ...], allowed: tuple[str, ...], why: str
) -> None:
    assert modules
    bad = []
    for module in modules:
        for target in sorted(imports(module)[2]):
            if any(_within(target, f) for f in forbidden) and not any(
                _within(target, a) for a in allowed
            ):
                bad.append(f"{module} imports {target}")
    assert not bad, f"{why}:\n" + "\n".join(bad)


# where user input is checked: the front door's modules (SamplingParams, the field checks,
# the input processor that makes an EngineRequest, the prompt forms, the engine opener)
FRONT_DOOR_CHECKS = (
    "tandem.core.entrypoints.front_door",
    "tandem.core.inputs.processor",
    "tandem.core.inputs.prompts",
    "tandem.core.inputs.sampling_params",
    "tandem.core.validate",
)


def test_the_engines_take_requests_from_core() -> None:
    """One request contract: neither engine checks or tokenizes a prompt itself; each
    takes the front door's ``EngineRequest`` as it is."""
    for module in ("tandem.v0.engine", "tandem.v1.frontend.engine"):
        assert "tandem.core.inputs.engine_request" in imports(module)[0], module
        source = MODULES[module].read_text()
        assert ".encode(" not in source, f"{module} tokenizes on its own"


def test_engines_do_not_import_the_checks() -> None:
    """Every check of user input lives at the front door: no module of either engine
    imports one of the modules that make them (a check copied into an engine would
    need one of them, for its limits or its error types)."""
    engines = [m for m in MODULES if _within(m, "tandem.v0") or _within(m, "tandem.v1")]
    bad = [
        f"{module} imports {target}"
        for module in engines
        for target in sorted(imports(module)[2])
        if target in FRONT_DOOR_CHECKS
    ]
    assert engines and not bad, "\n".join(bad)


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_no_import_cycles(package: str) -> None:
    """No circle of imports in ``package``: module-level, type-checking and function-local
    ones all count (a circle through a deferred import is still a circle)."""
    mine = [m for m in MODULES if _within(m, package)]
    graph = {m: {t for t in imports(m)[2] if t in mine and t != m} for m in mine}
    for module in mine:  # importing a.b.c runs a and a.b first
        parts = module.split(".")
        for i in range(2, len(parts)):
            parent = ".".join(parts[:i])
            if parent in graph:
                graph[module].discard(parent)
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)

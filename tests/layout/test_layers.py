"""Layers inside the packages: engine v1's four layers and no import cycles in tandem.*.

Imports are read from the source (``ast``), not by importing: an import under
``if TYPE_CHECKING:`` is a type annotation and does not count; a function-local import
counts for the layer rules (it still couples the layers) but not for cycles (it runs
after both modules are loaded).
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
}
V1_LAYERS = ("frontend", "core", "worker", "proc")


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


def imports(module: str) -> tuple[set[str], set[str]]:
    """(module-level, all) runtime imports of ``module`` within tandem.*."""
    tree = ast.parse(MODULES[module].read_text())
    top: set[str] = set()
    every: set[str] = set()

    def visit(nodes: list[ast.stmt], at_top: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.orelse, at_top)
                continue
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                found = _resolve(module, node)
            found = [f for f in found if f.startswith("tandem.")]
            every.update(found)
            if at_top:
                top.update(found)
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list) and children and isinstance(children[0], ast.AST):
                    nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    visit(children, at_top and not nested and not isinstance(node, ast.ClassDef))

    visit(tree.body, True)
    return top, every


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _v1(layer: str) -> list[str]:
    return [m for m in MODULES if _within(m, f"tandem.v1.{layer}")]


def test_every_v1_module_is_in_a_layer() -> None:
    loose = [
        m
        for m in MODULES
        if _within(m, "tandem.v1")
        and m not in ("tandem.v1", "tandem.v1.errors")
        and not any(_within(m, f"tandem.v1.{layer}") for layer in V1_LAYERS)
    ]
    assert not loose, f"v1 modules outside frontend/, core/, worker/, proc/: {loose}"


# (modules, forbidden import prefixes, allowed exceptions, why)
RULES = [
    (
        _v1("worker"),
        ("tandem.v1.frontend", "tandem.v1.proc", "tandem.v1.core.engine_core"),
        (),
        "the worker runs scheduled batches; it never sees the front end or the processes",
    ),
    (
        _v1("core"),
        ("tandem.v1.frontend", "tandem.v1.proc"),
        ("tandem.v1.proc.messages",),
        "the core speaks only in messages; the front end and the processes are above it",
    ),
    (
        [f"tandem.v1.core.{m}" for m in ("scheduler", "kv_cache_manager", "request")],
        ("tandem.v1.worker",),
        (),
        "scheduling state is plain Python: only the engine core drives the worker",
    ),
    (
        _v1("frontend"),
        ("tandem.v1.worker",),
        (),
        "the front end reaches the model only through a client",
    ),
    (
        ["tandem.v1.proc.messages"],
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
        for target in sorted(imports(module)[1]):
            if any(_within(target, f) for f in forbidden) and not any(
                _within(target, a) for a in allowed
            ):
                bad.append(f"{module} imports {target}")
    assert not bad, f"{why}:\n" + "\n".join(bad)


def test_the_engines_take_requests_from_core() -> None:
    """One request contract: neither engine checks or tokenizes a prompt itself."""
    for module in ("tandem.v0.engine", "tandem.v1.frontend.engine"):
        assert "tandem.core.inputs" in imports(module)[0], module
        source = MODULES[module].read_text()
        assert ".encode(" not in source, f"{module} tokenizes on its own"


def test_no_import_cycles() -> None:
    graph = {m: {t for t in imports(m)[0] if t in MODULES and t != m} for m in MODULES}
    for module in MODULES:  # importing a.b.c runs a and a.b first
        parts = module.split(".")
        for i in range(2, len(parts)):
            parent = ".".join(parts[:i])
            if parent in MODULES:
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

"""The C contract (``native/tandem_kernels.h``) against what is built and bound: the
library exports exactly the header's functions, the bindings carry the header's
prototypes and check arity, the structs lay out as the compiler lays them out, no source
declares an export a second time, and a drifted prototype fails the build or the call."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tandem.kernels.native import builder, contract, elementwise
from tandem.kernels.native.loader import library

HERE = Path(builder.__file__).parent
HEADER_TEXT = contract.HEADER.read_text(encoding="utf-8")


def _compiler() -> str:
    try:
        return builder.find_compiler()
    except builder.BuildError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def built() -> Path:
    _compiler()
    return builder.build()  # BuildError fails the test: the sources break the header


def test_the_library_exports_exactly_the_header(built) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm here to list the library's symbols")
    listing = subprocess.run(
        [nm, "-D", "--defined-only", str(built)], capture_output=True, text=True, check=True
    ).stdout
    exported = {line.split()[-1] for line in listing.splitlines() if " T " in line}
    assert exported == set(contract.contract().functions)


def test_bindings_carry_the_header_prototypes(built) -> None:
    lib = library()
    assert lib is not None
    for name, fn in contract.contract().functions.items():
        restype, argtypes = contract.prototype(fn)
        bound = getattr(lib, name)
        assert (bound.restype, list(bound.argtypes)) == (restype, argtypes), name
        if fn.params:  # (ctypes drops a `(void)` function's empty flags: cdecl ignores extras)
            with pytest.raises(TypeError):  # checked before C is called
                bound(*([None] * (len(fn.params) + 1)))
            with pytest.raises(TypeError):
                bound(*([None] * (len(fn.params) - 1)))


def test_struct_layouts_are_the_compilers(tmp_path) -> None:
    """sizeof and every field's offset, printed by a program built against the header,
    against the generated ctypes Structures."""
    structs = contract.contract().structs
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "tandem_kernels.h"']
    lines.append("int main(void) {")
    for name, fields in structs.items():
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        for f in fields:
            lines.append(f'printf("{name}.{f.name} %zu\\n", offsetof({name}, {f.name}));')
    lines.append("return 0; }")
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    cmd = [_compiler(), "-I", str(HERE), str(source), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    got = dict(line.split() for line in subprocess.run(
        [str(exe)], capture_output=True, text=True, check=True
    ).stdout.splitlines())  # fmt: skip
    want = {}
    for name, fields in structs.items():
        cls = contract.struct(name)
        want[name] = str(ctypes.sizeof(cls))
        for f in fields:
            want[f"{name}.{f.name}"] = str(getattr(cls, f.name).offset)
    assert got == want


def test_the_routing_struct_is_the_python_routing_spec() -> None:
    """Each field of the header's tandem_moe_routing (the experts' routing, in tandem_moe)
    is one of moe.RoutingSpec's, by name, and the struct it fills holds its values."""
    from tandem.kernels.native import moe

    fields = contract.contract().structs["tandem_moe_routing"]
    assert [f.name for f in fields] == [
        "experts", "top_k", "scoring", "normalize", "groups", "group_top", "score_bias",
        "scaling",
    ]  # fmt: skip
    assert {f.name for f in fields} == set(moe.RoutingSpec.__slots__)
    assert contract.contract().structs["tandem_moe"][0].name == "routing"
    bias = torch.randn(8)
    spec = moe.RoutingSpec(8, 3, True, "sigmoid", 4, 2, bias, 2.5)
    got = spec.struct()
    assert (got.experts, got.top_k, got.normalize, got.groups, got.group_top) == (8, 3, 1, 4, 2)
    assert got.scoring == contract.constant("TANDEM_MOE_SIGMOID_GROUPS") != 0
    assert (got.score_bias, got.scaling) == (bias.data_ptr(), 2.5)


def test_no_source_declares_an_export_again() -> None:
    """Each source includes the header, and nothing but the header declares an export."""
    names = "|".join(contract.contract().functions)
    # a type right before the name, a parameter list, a semicolon: a declaration (a call
    # has `return`, `=`, `?` or nothing there; a definition a body)
    declaration = re.compile(
        rf"\b(?:void|int|int32_t|int64_t|float)[\s*]+({names})\s*\([^;{{]*\)\s*;"
    )
    for path in sorted(HERE.glob("*.[ch]")):
        if path == contract.HEADER:
            continue
        text = re.sub(r"/\*.*?\*/", " ", path.read_text(encoding="utf-8"), flags=re.S)
        if path.suffix == ".c":
            assert '#include "tandem_kernels.h"' in text, path.name
        assert declaration.search(text) is None, (path.name, declaration.search(text)[0])


def test_bindings_come_from_the_header_alone() -> None:
    """No Python module of the kernels sets a prototype by hand."""
    for path in sorted(HERE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert ".argtypes" not in text and ".restype =" not in text, path.name


def _compile_against(header: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Every source of the library, syntax-checked against ``header`` (the builder's flags)."""
    for path in HERE.glob("*.[ch]"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / contract.HEADER.name).write_text(header)
    flags = [f for f in (*builder.FLAGS, *builder.CONTRACT_FLAGS) if f != "-shared"]
    sources = [str(tmp_path / name) for name in builder.SOURCES]
    cmd = [_compiler(), *flags, "-fsyntax-only", *sources]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


MUTATIONS = {
    "a parameter's type": ("int64_t row_stride, float *out", "int32_t row_stride, float *out"),
    "a parameter dropped": ("const float *qkv, int64_t row_stride,", "const float *qkv,"),
    "a return type": ("TANDEM_API int tandem_linear_f32(", "TANDEM_API int64_t tandem_linear_f32("),
    "a name": ("tandem_silu_and_mul_f32(", "tandem_silu_mul_f32("),
}


def test_the_sources_compile_against_the_header(tmp_path) -> None:
    proc = _compile_against(HEADER_TEXT, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_drifted_prototype_does_not_compile(tmp_path, mutation) -> None:
    old, new = MUTATIONS[mutation]
    assert HEADER_TEXT.count(old) == 1, f"the mutation {mutation!r} no longer applies"
    proc = _compile_against(HEADER_TEXT.replace(old, new), tmp_path)
    assert proc.returncode != 0, f"{mutation} changed and the sources still compile"


def test_a_call_of_a_drifted_arity_raises(built) -> None:
    """Header and definition changed together (one argument more) but not the Python call:
    the generated binding refuses the call instead of passing the old argument list."""
    old = "tandem_silu_and_mul_f32(const float *x, int64_t T,"
    drifted = contract.parse(HEADER_TEXT.replace(old, old + " int64_t extra,"))
    lib = contract.bind(ctypes.CDLL(str(built)), ("tandem_silu_and_mul_f32",), drifted)
    x = torch.randn(3, 8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(elementwise, "library", lambda: lib)
        with pytest.raises(TypeError, match="argument"):
            elementwise.silu_and_mul(x)
    assert elementwise.silu_and_mul(x) is not None  # the header's binding takes it


@pytest.mark.parametrize(
    "text, message",
    [
        ("typedef struct { float *a, *b; } s;", "one a line"),
        ("typedef struct { half a; } s;", "unknown type"),
        ("#define TANDEM_X 1.5", "not an integer"),
        ("#ifdef X\nTANDEM_API int f(int a);\n#endif", "no conditional"),
        ("TANDEM_API int f(struct_t *a);", "unknown type"),
        ("TANDEM_API int f(int);", "needs a type and a name"),
        ("int f(int a);", "TANDEM_API prototype"),
        ("TANDEM_API float *f(int a);", "return type"),
        ("typedef struct { int a; } s;\nTANDEM_API int f(s a);", "by pointer"),
        ("TANDEM_API int f(int a);\nTANDEM_API int f(int a);", "declared twice"),
    ],
)
def test_the_parser_refuses_what_it_cannot_read(text, message) -> None:
    with pytest.raises(contract.ContractError, match=message):
        contract.parse(text)


def test_no_kernel_module_repeats_a_constant() -> None:
    """The shared constants are read from the header, never written down again in Python."""
    literal = re.compile(r"^[A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)* = \(?\s*-?\d", re.M)
    for path in sorted(HERE.glob("*.py")):
        found = literal.search(path.read_text(encoding="utf-8"))
        assert found is None, (path.name, found and found[0])
    from tandem.kernels.native import decode_stack, linear_gguf

    assert linear_gguf.PREFILL_ROWS == contract.constant("TANDEM_GGUF_TILE_ROWS") > 1
    assert decode_stack.MAX_PARTS == contract.constant("TANDEM_MAX_PARTS") > 1
    with pytest.raises(KeyError, match="TANDEM_MAX_PARTS"):
        contract.constant("TANDEM_NO_SUCH")

"""The native kernels' contract, read from their C header (``tandem_kernels.h``).

The header is the one place that declares what the library exports: its functions, the
structs they take and the constants both languages rely on. This module parses it and
makes the Python side from it: :func:`constant` answers a ``#define``, :func:`struct` a
``ctypes.Structure`` with the header's fields, and :func:`bind` gives each exported
function its prototype. A bound function checks its arity on every call (a call with one
argument too many or too few raises TypeError, where a plain ctypes function would pass
the extra ones on) and takes its arguments by position or by the header's names.

The parser reads the plain forms the header keeps to, and raises :class:`ContractError`
on anything else, so a declaration it cannot read never passes unbound.
"""

from __future__ import annotations

import ctypes
import functools
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from tandem.kernels.native import builder

HEADER = Path(__file__).with_name(builder.HEADER)
API = "TANDEM_API"

# value types (by value); every pointer is c_void_p but a struct pointer, POINTER(struct)
SCALARS: dict[str, type] = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "float": ctypes.c_float,
}
_NAME = r"[A-Za-z_]\w*"
_DEFINE = re.compile(rf"^\s*#\s*define\s+({_NAME})(?:\s+(.*?))?\s*$")
_STRUCT = re.compile(rf"typedef\s+struct\s*\{{([^{{}}]*)\}}\s*({_NAME})\s*;")
_FIELD = re.compile(rf"^(.+?)\s*\b({_NAME})\s*(?:\[\s*(\w+)\s*\])?$")
_FUNCTION = re.compile(rf"^{API}\s+(.+?)\s*\b({_NAME})\s*\(([^()]*)\)$")
_PARAM = re.compile(rf"^(.+?)\s*\b({_NAME})$")


class ContractError(ValueError):
    """The header holds a declaration the contract cannot read, or breaks it."""


@dataclass(frozen=True, slots=True)
class CType:
    """A type as declared: its base name (``const`` dropped) and its pointer depth."""

    base: str
    pointers: int

    def __str__(self) -> str:
        return self.base + " *" * self.pointers


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    ctype: CType
    length: int | None  # an array field's length, None for one value


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    restype: CType
    params: tuple[tuple[str, CType], ...]


@dataclass(frozen=True, slots=True)
class Contract:
    constants: dict[str, int]
    structs: dict[str, tuple[Field, ...]]
    functions: dict[str, Function]


def _ctype(text: str, where: str) -> CType:
    words = text.replace("*", " * ").split()
    words = [w for w in words if w != "const"]
    pointers = words.count("*")
    names = [w for w in words if w != "*"]
    if len(names) != 1 or words[: len(names)] != names:
        raise ContractError(f"{where}: cannot read the type {text.strip()!r}")
    return CType(names[0], pointers)


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse(text: str) -> Contract:
    """The contract a header's text declares; ContractError on a form it cannot read."""
    text = _strip_comments(text)
    constants: dict[str, int] = {}
    body = []
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            body.append(line)
            continue
        directive = re.match(r"\s*#\s*(\w*)", line).group(1)  # type: ignore[union-attr]
        if directive not in ("define", "ifndef", "endif", "include"):
            raise ContractError(f"#{directive}: the contract has no conditional declarations")
        m = _DEFINE.match(line)
        if m and m.group(2) and m.group(1) != API:
            if not re.fullmatch(r"-?\d+", m.group(2)):
                raise ContractError(f"#define {m.group(1)}: not an integer: {m.group(2)!r}")
            constants[m.group(1)] = int(m.group(2))
    code = " ".join(body)
    structs: dict[str, tuple[Field, ...]] = {}
    for m in _STRUCT.finditer(code):
        structs[m.group(2)] = _fields(m.group(2), m.group(1), constants, structs)
    code = _STRUCT.sub(" ", code)
    functions: dict[str, Function] = {}
    for statement in code.split(";"):
        statement = " ".join(statement.split())
        if not statement:
            continue
        fn = _function(statement, structs)
        if fn.name in functions:
            raise ContractError(f"{fn.name} is declared twice")
        functions[fn.name] = fn
    return Contract(constants, structs, functions)


def _known(ctype: CType, structs: dict, where: str) -> None:
    if ctype.base in structs or ctype.base in SCALARS:
        return
    if ctype.pointers and ctype.base in ("void", "float", "uint8_t", "int8_t"):
        return
    raise ContractError(f"{where}: unknown type {ctype}")


def _fields(name: str, text: str, constants: dict, structs: dict) -> tuple[Field, ...]:
    fields = []
    for decl in filter(None, (" ".join(d.split()) for d in text.split(";"))):
        m = _FIELD.match(decl)
        if m is None or "," in decl:
            raise ContractError(f"struct {name}: cannot read the field {decl!r} (one a line)")
        ctype = _ctype(m.group(1), f"{name}.{m.group(2)}")
        _known(ctype, structs, f"{name}.{m.group(2)}")
        length = None
        if m.group(3) is not None:
            size = m.group(3)
            length = int(size) if size.isdigit() else constants.get(size)
            if length is None:
                raise ContractError(f"{name}.{m.group(2)}: unknown array length {size!r}")
        fields.append(Field(m.group(2), ctype, length))
    return tuple(fields)


def _function(statement: str, structs: dict) -> Function:
    m = _FUNCTION.match(statement)
    if m is None:
        raise ContractError(f"cannot read {statement!r} (a {API} prototype was expected)")
    name, params = m.group(2), []
    restype = _ctype(m.group(1), name)
    if restype.pointers or (restype.base not in SCALARS and restype.base != "void"):
        raise ContractError(f"{name}: return type {restype} is not int, int64_t, float or void")
    args = m.group(3).strip()
    if args != "void":
        for i, arg in enumerate(a.strip() for a in args.split(",")):
            p = _PARAM.match(arg)
            if p is None:
                raise ContractError(f"{name}: parameter {i} {arg!r} needs a type and a name")
            ctype = _ctype(p.group(1), f"{name}({p.group(2)})")
            _known(ctype, structs, f"{name}({p.group(2)})")
            if ctype.base in structs and not ctype.pointers:
                raise ContractError(f"{name}({p.group(2)}): pass structs by pointer")
            params.append((p.group(2), ctype))
    return Function(name, restype, tuple(params))


@functools.cache
def contract() -> Contract:
    """The contract of :data:`HEADER`, read once per process."""
    return parse(HEADER.read_text(encoding="utf-8"))


def constant(name: str) -> int:
    """The header's ``#define name``; KeyError naming the known ones where there is none."""
    constants = contract().constants
    if name not in constants:
        raise KeyError(f"{name} is not a constant of {HEADER.name}: {sorted(constants)}")
    return constants[name]


# One class per struct for the life of the process (not a cache: ctypes tells struct types
# apart by identity, so a second class of the same struct would refuse the first's values).
_STRUCTS: dict[str, type[ctypes.Structure]] = {}
_STRUCTS_LOCK = threading.RLock()


def struct(name: str) -> type[ctypes.Structure]:
    """The ctypes Structure of the header's ``typedef struct {...} name``."""
    with _STRUCTS_LOCK:
        if name in _STRUCTS:
            return _STRUCTS[name]
        fields = contract().structs.get(name)
        if fields is None:
            known = sorted(contract().structs)
            raise KeyError(f"{name} is not a struct of {HEADER.name}: {known}")
        layout = []
        for f in fields:
            t = _value_type(f.ctype)
            layout.append((f.name, t * f.length if f.length is not None else t))
        cls = type(name, (ctypes.Structure,), {"_fields_": layout, "__doc__": f"C {name}"})
        _STRUCTS[name] = cls
        return cls


def _value_type(ctype: CType) -> type:
    if ctype.pointers == 0:
        return struct(ctype.base) if ctype.base in contract().structs else SCALARS[ctype.base]
    if ctype.pointers == 1 and ctype.base in contract().structs:
        return ctypes.POINTER(struct(ctype.base))
    return ctypes.c_void_p


def prototype(fn: Function) -> tuple[type | None, list[type]]:
    """(restype, argtypes) of a function of the contract."""
    restype = None if fn.restype.base == "void" else _value_type(fn.restype)
    return restype, [_value_type(t) for _, t in fn.params]


def bind(
    lib: ctypes.CDLL, names: tuple[str, ...] | None = None, source: Contract | None = None
) -> ctypes.CDLL:
    """``lib`` with each function of the contract (or of ``names``) bound to its prototype
    as an attribute of that name; AttributeError where the library lacks one. ``source``:
    another contract's prototypes (a test's), with the header's structs."""
    functions = (source or contract()).functions
    for name in functions if names is None else names:
        fn = functions[name]
        restype, argtypes = prototype(fn)
        proto = ctypes.CFUNCTYPE(restype, *argtypes)
        setattr(lib, name, proto((name, lib), tuple((1, p) for p, _ in fn.params)))
    return lib

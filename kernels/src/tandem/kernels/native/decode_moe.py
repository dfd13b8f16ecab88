"""A decode-stack layer's mixture of experts for the C table (``decode_moe.c``): the entry
the caller gives (:class:`MoeEntry`), its C struct, and the scratch a token of it needs."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

from tandem.kernels.native.contract import struct
from tandem.kernels.native.lin_spec import LinSpec
from tandem.kernels.native.moe import RoutingSpec

Moe = struct("tandem_moe")


@dataclass(frozen=True, slots=True)
class MoeEntry:
    """A layer's experts: the router (``LinSpec`` [E, C]), each routed expert's
    (gate_up [2I, C], down [C, I]), the shared expert's (gate_up, down) or None, its
    sigmoid gate ([1, C]) or None; ``routing`` (:class:`RoutingSpec`, its experts E)
    chooses each token's experts. ``experts`` are those held, from expert ``first`` on (a
    tensor-parallel rank's run of them; all E from 0 on a whole model). Entries are
    ``decode_stack.LinSpec``s."""

    router: LinSpec
    experts: tuple[tuple[LinSpec, LinSpec], ...]
    routing: RoutingSpec
    shared: tuple[LinSpec, LinSpec] | None = None
    shared_gate: LinSpec | None = None
    first: int = 0

    def __post_init__(self) -> None:
        if not self.experts:
            raise ValueError("MoeEntry.experts must hold at least one expert")
        if not 0 <= self.first <= self.routing.experts - len(self.experts):
            raise ValueError(
                f"MoeEntry.first must be in [0, {self.routing.experts - len(self.experts)}] "
                f"({len(self.experts)} experts held of the routing's {self.routing.experts}), "
                f"got {self.first}"
            )
        why = self.routing.reach()
        if why is not None:
            raise ValueError(f"MoeEntry.routing: the C routing does not take {why}")
        if self.shared_gate is not None and self.shared is None:
            raise ValueError("MoeEntry.shared_gate needs a shared expert (MoeEntry.shared)")

    @property
    def intermediate(self) -> int:
        return self.experts[0][1].k

    @property
    def shared_intermediate(self) -> int:
        return 0 if self.shared is None else self.shared[1].k

    def linears(self) -> list[LinSpec]:
        """Every LinSpec of the entry (for the most rows of one GGUF part)."""
        out = [self.router, *(lin for pair in self.experts for lin in pair)]
        out += [*(self.shared or ()), *(() if self.shared_gate is None else (self.shared_gate,))]
        return out

    def floats(self, hidden: int) -> int:
        """Scratch floats a token of this layer needs (decode_ops.h, stack_moe): ids and
        one expert's pairs (int64: two floats each), weights, logits, done, rows, y, gu,
        act, gate."""
        e, k = self.routing.experts, self.routing.top_k
        inter = max(self.intermediate, self.shared_intermediate)
        return 4 * k + k + e + k * hidden + 2 * hidden + 3 * inter + 1


def moe_struct(
    entry: MoeEntry, lin: Callable[[LinSpec], ctypes.Structure]
) -> tuple[ctypes.Structure, list]:
    """The C struct of ``entry`` (``lin``: LinSpec -> C tandem_linear) and the ctypes
    objects it points into (kept alive by the caller; the routing's score bias is the
    caller's to keep)."""
    moe = Moe()
    e = len(entry.experts)
    moe.routing = entry.routing.struct()
    moe.first, moe.held = entry.first, e
    moe.intermediate, moe.shared_intermediate = entry.intermediate, entry.shared_intermediate
    moe.router = lin(entry.router)
    gate_up = (type(moe.router) * e)(*(lin(g) for g, _ in entry.experts))
    down = (type(moe.router) * e)(*(lin(d) for _, d in entry.experts))
    moe.gate_up = ctypes.cast(gate_up, type(moe.gate_up))
    moe.down = ctypes.cast(down, type(moe.down))
    if entry.shared is not None:
        moe.shared_gate_up, moe.shared_down = (lin(s) for s in entry.shared)
    if entry.shared_gate is not None:
        moe.shared_gated = 1
        moe.shared_gate = lin(entry.shared_gate)
    return moe, [gate_up, down]

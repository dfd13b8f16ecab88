"""Copying checkpoint tensors into a model whose modules are named and fused its own way.

An architecture's name map says, for each checkpoint module inside a layer, where its
tensors land: a module of ours (renamed, or the same name), rows of a fused module (q, k
and v in one projection), or one expert's slice of a stacked expert weight. A parameter
with a :class:`~tandem.core.parallel.layout.Layout` (a tensor-parallel shard) takes only
the part of each tensor its layout holds.

torch is imported where tensors are copied, not with the module: the architectures
import their name maps from here, and reading a config's spec (the engine's front
process reads the layers' windows) stays torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor, nn

from tandem.core.parallel.layout import Layout, copies

# Tensors some checkpoints carry that are derived state, not weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_LISTED = 8


@dataclass(frozen=True, slots=True)
class Shard:
    """Where a checkpoint module's tensors land in ours: ``target`` (a module path inside
    a layer), rows ``[offset, offset + size)`` of it (``size`` None: all rows), along
    ``expert``'s slice first where the target stacks experts."""

    target: str
    offset: int = 0
    size: int | None = None
    expert: int | None = None


NameMap = Mapping[str, Shard]


def fused(parts: Iterable[tuple[str, int]], target: str, expert: int | None = None) -> NameMap:
    """Checkpoint modules ``(name, rows)`` stacked in this order into ``target``."""
    out: dict[str, Shard] = {}
    offset = 0
    for name, rows in parts:
        out[name] = Shard(target, offset, rows, expert)
        offset += rows
    return out


def drop_layers_from(
    weights: Iterable[tuple[str, Tensor]], num_layers: int
) -> Iterable[tuple[str, Tensor]]:
    """The tensors of layers ``0 .. num_layers - 1`` and outside the layers: a checkpoint's
    extra layers (DeepSeek-V3's multi-token prediction) are not part of the decoder."""
    for name, tensor in weights:
        parts = name.split(".")
        if len(parts) > 2 and parts[:2] == ["model", "layers"] and int(parts[2]) >= num_layers:
            continue
        yield name, tensor


def expected_names(model: nn.Module, shards: NameMap) -> dict[str, tuple[nn.Parameter, Shard]]:
    """Every checkpoint name the model needs -> (parameter, where in it)."""
    by_target: dict[str, list[tuple[str, Shard]]] = {}
    for source, shard in shards.items():
        by_target.setdefault(shard.target, []).append((source, shard))
    names: dict[str, tuple[nn.Parameter, Shard]] = {}
    for name, param in model.named_parameters():
        module, _, leaf = name.rpartition(".")
        for target, sources in by_target.items():
            if module == target or module.endswith("." + target):
                prefix = module[: len(module) - len(target)]
                for source, shard in sources:
                    names[f"{prefix}{source}.{leaf}"] = (param, shard)
                break
        else:
            names[name] = (param, Shard(module))
    return names


def _destination(param: nn.Parameter, shard: Shard) -> Tensor:
    dest = param if shard.expert is None else param[shard.expert]
    if shard.size is None:
        return dest
    return dest[shard.offset : shard.offset + shard.size]


def shard_box(shard: Shard, full: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The part of the full parameter a checkpoint tensor fills: its expert, its rows."""
    lead = [] if shard.expert is None else [(shard.expert, shard.expert + 1)]
    rest = full[len(lead) :]
    rows = (0, rest[0]) if shard.size is None else (shard.offset, shard.offset + shard.size)
    return (*lead, rows, *((0, n) for n in rest[1:]))


def _load_shard(
    name: str, param: nn.Parameter, shard: Shard, layout: Layout, tensor: Tensor
) -> None:
    box = shard_box(shard, layout.full)
    want = tuple(b - a for a, b in box)
    lead = 0 if shard.expert is None else 1  # the expert dim, absent from the tensor
    if tuple(tensor.shape) != want[lead:]:
        raise ValueError(
            f"weight {name!r} has shape {list(tensor.shape)} but the model expects "
            f"{list(want[lead:])}"
        )
    source = tensor.unsqueeze(0) if lead else tensor
    for src, dst in copies(layout, box):
        param[dst].copy_(source[src])


def load_named(
    model: nn.Module,
    weights: Iterable[tuple[str, Tensor]],
    shards: NameMap,
    skip: Iterable[str] = (),
    layouts: Mapping[str, Layout] | None = None,
) -> None:
    """Load every expected tensor exactly once; raise on missing, unexpected or misshaped.

    ``layouts`` (parameter name -> layout) marks the parameters that hold a shard; they
    start zeroed (padding rows, a bias another rank adds) and take their part only."""
    import torch

    expected = expected_names(model, shards)
    sharded: dict[int, Layout] = {}
    for pname, param in model.named_parameters():
        if layouts and pname in layouts:
            sharded[id(param)] = layouts[pname]
            param.data.zero_()
    skipped = set(skip)
    loaded: set[str] = set()
    unexpected: list[str] = []
    with torch.no_grad():
        for name, tensor in weights:
            entry = expected.get(name)
            if entry is None:
                if name not in skipped and not name.endswith(_IGNORED_SUFFIXES):
                    unexpected.append(name)
                continue
            layout = sharded.get(id(entry[0]))
            if layout is not None:
                _load_shard(name, entry[0], entry[1], layout, tensor)
                loaded.add(name)
                continue
            dest = _destination(*entry)
            if tuple(tensor.shape) != tuple(dest.shape):
                raise ValueError(
                    f"weight {name!r} has shape {list(tensor.shape)} but the model expects "
                    f"{list(dest.shape)}"
                )
            dest.copy_(tensor)
            loaded.add(name)
    missing = sorted(set(expected) - loaded)
    problems = []
    if missing:
        problems.append(f"missing weights ({len(missing)}): {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected weights ({len(unexpected)}): {_listing(sorted(unexpected))}")
    if problems:
        raise ValueError("checkpoint does not match the model: " + "; ".join(problems))


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f", ... and {len(names) - _LISTED} more" if len(names) > _LISTED else "")

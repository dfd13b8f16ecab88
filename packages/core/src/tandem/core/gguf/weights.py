"""Loading a model's weights from a GGUF checkpoint, read in place.

With ``keep=True`` (``quantization="gguf"``) every linear layer and embedding whose parts
are stored in a format the kernels run (:data:`tandem.kernels.gguf_blocks.FORMATS`) keeps
them as stored: its bytes are used straight from the file's mapping, or, where its rows
must move (llama.cpp's rotary order) or several tensors make one module (q, k, v ->
``qkv_proj``), copied once into one block tensor, with no float weight ever made. Stacked
experts are kept the same way, one weight per expert and projection, each a view of the
file's mapping (an expert's gate and up a stack of two views: nothing is copied). Every
other tensor (norms, routers, or all of them with ``keep=False``) is converted to floats
one at a time and copied into the model as a safetensors checkpoint would be. Nothing is
written to disk.

A tensor-parallel rank's model (built with a ``tp``) keeps only its shard of each kept
tensor (:mod:`tandem.core.gguf.shards`): a run of rows is a view of the mapping still, a
range of the inputs is copied once into one block tensor (bytes, not floats); a module
whose input range does not start and end on a block is loaded in floats instead, as a
tensor in a format the kernels do not run is, with a warning naming it (from rank 0).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from tandem.core.gguf.checkpoint import GGUFCheckpoint, StoredTensor
from tandem.core.gguf.shards import padded_rows, param_layouts, shard_pieces, split_blocks
from tandem.core.layers.embedding import Embedding
from tandem.core.layers.linear import Linear
from tandem.core.layers.moe import Stacked
from tandem.core.layers.weight_form import GgufBlocks
from tandem.core.models.weights import Shard, expected_names
from tandem.core.parallel.layout import Layout
from tandem.kernels.gguf_blocks import FORMATS, QuantStack, QuantWeight

LOGGER = logging.getLogger("tandem")


def kept_modules(
    model: nn.Module,
    shards: Any,
    stored: dict[str, int],
    expected: dict[str, tuple[Any, Shard]] | None = None,
    layouts: dict[int, Layout] | None = None,
) -> dict[str, nn.Module]:
    """Checkpoint names whose module will be kept as stored -> that module: a linear
    layer, stacked experts or an embedding whose every part is in a kernel format (an
    embedding's in one) and, in a tensor-parallel rank's model, whose shard of each part
    starts and ends its input range on a block (:func:`split_blocks`; a module that does
    not is loaded in floats on every rank, with a warning from rank 0 alone). ``expected``
    and ``layouts``: the model's :func:`expected_names` and :func:`param_layouts`, where
    the caller has them already."""
    expected = expected if expected is not None else expected_names(model, shards)
    layouts = layouts if layouts is not None else param_layouts(model)
    owner = {id(p): m for m in model.modules() for p in m.parameters(recurse=False)}
    # every rank loads such a module in floats, but only the first says so: its own input
    # range (from 0) ends inside a block wherever another rank's does
    tp = getattr(model, "tp", None)
    first_rank = tp is None or tp.rank == 0
    groups: dict[int, list[str]] = {}
    modules: dict[int, nn.Module] = {}
    for name, (param, _) in expected.items():
        module = owner[id(param)]
        kept = isinstance(module, (Linear, Embedding, Stacked)) and param is module.weight
        if kept and name.endswith(".weight"):
            groups.setdefault(id(module), []).append(name)
            modules[id(module)] = module
    plan: dict[str, nn.Module] = {}
    for key, names in groups.items():
        kinds = {stored.get(n) for n in names}
        mixed_ok = isinstance(modules[key], (Linear, Stacked)) or len(kinds) == 1
        if not (all(kind in FORMATS for kind in kinds) and mixed_ok):
            continue
        whys = []
        for n in names:
            param, shard = expected[n]
            layout = layouts.get(id(param))
            why = None if layout is None else split_blocks(n, stored[n], shard, layout)
            whys += [why] if why is not None else []
        if whys:
            if first_rank:
                LOGGER.warning("%s; loaded in floats instead", whys[0])
            continue
        plan.update((n, modules[key]) for n in names)
    return plan


def load_gguf(
    model: nn.Module, checkpoint: GGUFCheckpoint, device: torch.device, keep: bool = True
) -> int:
    """Build ``model`` (on the meta device) on ``device`` from ``checkpoint``; returns
    how many modules were kept as stored."""
    from tandem.core.models.architectures import architecture

    spec = model.spec  # type: ignore[attr-defined]
    shards = architecture(spec.architecture).names(spec)
    expected = expected_names(model, shards)
    layouts = param_layouts(model)
    stored = checkpoint.stored_types()
    plan = kept_modules(model, shards, stored, expected, layouts) if keep else {}
    for module in set(plan.values()):
        module.register_parameter("weight", None)  # no float copy is ever made
    model.to_empty(device=device)
    parts: dict[nn.Module, list[tuple[int, int, int, Tensor]]] = {}
    formats: dict[nn.Module, int] = {}  # a module's first stored type: its padding's, at least

    def floats() -> Any:
        for t in checkpoint.tensors():
            if t.name in plan:
                param, shard = expected[t.name]
                layout = layouts.get(id(param))
                data = _as_tensor(t)
                if layout is None:
                    pieces = [(shard.expert or 0, shard.offset, t.type, data)]
                else:
                    owned = not checkpoint.file.holds(t.data)  # rows moved: a copy
                    pieces = shard_pieces(data, t.type, shard, layout, owned)
                parts.setdefault(plan[t.name], []).extend(pieces)
                formats.setdefault(plan[t.name], t.type)
            else:
                values = t.floats()  # a copy: the file's pages of it are done with
                checkpoint.file.drop(t.data)
                yield t.name, torch.from_numpy(values)
        # the last tensor read: the kept weights go in now, before the model finishes
        # loading (latent attention moves rows of two projections, kept or not)
        for module, pieces in parts.items():
            pieces.sort(key=lambda p: p[:2])
            if isinstance(module, Stacked):
                module.use_quantized(_experts(pieces, module.shape[2], device))
                continue
            if isinstance(module, Linear):
                n, k = module.out_features, module.in_features
            else:
                n, k = module.num_embeddings, module.embedding_dim
            rows = padded_rows([p[1:] for p in pieces], n, k, formats[module])
            module.use_quantized(_weight(rows, k, device, checkpoint.file.drop))

    model.load_weights(floats())  # type: ignore[attr-defined]
    checkpoint.file.release(list(_mapped_ranges(model)))
    return len(parts)


def _mapped_ranges(model: nn.Module) -> Any:
    """(start, end) addresses of every weight kept as stored (those that are views of the
    file's mapping among them: the pages to keep)."""
    forms = [getattr(m, "form", None) for m in model.modules()]  # Linear's, Embedding's
    forms += [f for m in model.modules() if isinstance(m, Stacked) for f in m.forms]
    stack: list[Any] = [form.blocks for form in forms if isinstance(form, GgufBlocks)]
    while stack:
        item = stack.pop()
        if isinstance(item, QuantWeight):
            start = item.data.data_ptr()
            yield start, start + item.data.nbytes
        elif isinstance(item, QuantStack):
            stack.extend(item.parts)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _experts(pieces: list[tuple[int, int, int, Tensor]], k: int, device: torch.device) -> list[Any]:
    """Stacked experts' (expert, row offset, GGUF type, rows) pieces in order -> one
    QuantWeight per expert, or a QuantStack of its pieces (gate and up): no copies."""
    by_expert: dict[int, list[QuantWeight]] = {}
    for e, _, qtype, rows in pieces:
        by_expert.setdefault(e, []).append(QuantWeight(rows.to(device), qtype, rows.shape[0], k))
    return [w[0] if len(w) == 1 else QuantStack(tuple(w)) for _, w in sorted(by_expert.items())]


def _as_tensor(t: StoredTensor) -> Tensor:
    """A stored tensor's bytes as a uint8 tensor sharing the mapping where it can."""
    data = t.data if t.data.dtype == np.uint8 else t.data.view(np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a copy-on-write mapping: writable in torch's eyes
        return torch.from_numpy(data)


def _weight(pieces: list[tuple[int, int, Tensor]], k: int, device: torch.device, drop: Any) -> Any:
    """A module's (row offset, GGUF type, rows) pieces in row order -> one QuantWeight,
    or a QuantStack with one QuantWeight per run of pieces in the same format. A single
    piece stays the file's own bytes (unless it is not contiguous: a tensor-parallel
    rank's range of each row's blocks); a run of several is copied into one tensor."""
    runs: list[tuple[int, list[Tensor]]] = []
    for _, qtype, rows in pieces:
        if runs and runs[-1][0] == qtype:
            runs[-1][1].append(rows)
        else:
            runs.append((qtype, [rows]))
    weights = []
    for qtype, chunks in runs:
        data = chunks[0] if len(chunks) == 1 else torch.cat(chunks)
        for chunk in chunks if len(chunks) > 1 else ():
            drop(chunk.numpy())  # copied: the file's pages of it are done with
        if not data.is_contiguous():
            data = data.contiguous()
        weights.append(QuantWeight(data.to(device), qtype, data.shape[0], k))
    return weights[0] if len(weights) == 1 else QuantStack(tuple(weights))

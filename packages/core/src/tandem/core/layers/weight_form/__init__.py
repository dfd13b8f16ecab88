"""The form a weight is kept in, and the one interface every user of a weight calls.

A weight [n, k] is kept in exactly one form, chosen when it is loaded or converted and
never re-decided per call:

- :class:`Dense`: the float weight its module holds, multiplied on the CPU through a copy
  packed for the engine's kernel (``native``: the C kernel, ``onednn``; ``torch``: plain
  ``F.linear``, no copy);
- :class:`Int8`: int8 per output channel (``quantization="int8"``), made from a dense
  weight, which still multiplies off the CPU;
- :class:`Panels`: an fp32 weight in the C kernel's panels alone, its float tensor freed
  (an engine's model, once its kernels are final: see :meth:`WeightForm.standalone`);
- :class:`GgufBlocks`: a GGUF file's blocks as stored (one format);
- :class:`StackedParts`: GGUF blocks whose row ranges are stored in different formats
  (a fused q/k/v of a Q4_K_M file), stacked along n.

Each answers the same questions: its shape, ``matmul`` (x [T, k] -> [T, n]), its name in
the execution plan, a row lookup where it is an embedding table, and its entry in the C
decode stack's table (or the reason it has none). ``Linear``, the logits, the experts and
the embedding hold forms; the decode stack and the plan ask them.

The interface is :mod:`.form`; the float forms (Panels too) are in :mod:`.dense`, the
GGUF ones in :mod:`.gguf`.
"""

from __future__ import annotations

from tandem.core.layers.weight_form.dense import Dense, Int8, Panels
from tandem.core.layers.weight_form.form import CEntry, Takes, WeightForm, check_shape
from tandem.core.layers.weight_form.gguf import GgufBlocks, StackedParts, gguf_form

__all__ = [
    "CEntry",
    "Dense",
    "GgufBlocks",
    "Int8",
    "Panels",
    "StackedParts",
    "Takes",
    "WeightForm",
    "check_shape",
    "gguf_form",
]

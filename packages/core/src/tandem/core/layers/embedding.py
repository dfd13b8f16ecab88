"""The token embedding: a float table, or a GGUF table kept in its blocks.

Its table is one :class:`~tandem.core.layers.weight_form.WeightForm`, ``form``: a lookup
reads rows from it (a GGUF table decodes only the rows it reads), and tied logits
multiply by it.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from tandem.core.layers.linear import check_kernel, keep_form_alone
from tandem.core.layers.no_init import Embedding as _NoInitEmbedding
from tandem.core.layers.weight_form import Dense, WeightForm, check_shape, gguf_form
from tandem.kernels.gguf_blocks import QuantWeight


class Embedding(_NoInitEmbedding):
    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = None) -> None:
        super().__init__(num_embeddings, embedding_dim, dtype=dtype)
        self.form: WeightForm = Dense(self._parameters)
        self.out_dtype = self.weight.dtype  # a GGUF table's rows are cast to it

    def use_quantized(self, weight: QuantWeight) -> None:
        """Look rows up in ``weight`` (GGUF blocks, [vocab, dim]) from now on."""
        shape = (self.num_embeddings, self.embedding_dim)
        self.form = check_shape(gguf_form(weight), shape, "embedding")

    def use_kernel(self, kernel: str) -> None:
        """Multiply tied logits on ``kernel`` (one of ``LINEAR_KERNELS``) from now on."""
        self.form.use_kernel(check_kernel(kernel))

    def free_float(self) -> int:
        """Read rows from the table's form alone where that holds all of it (a tied
        table's panels, GGUF blocks) and free the float table; the bytes freed."""
        return keep_form_alone(self)

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.form.rows(input_ids).to(self.out_dtype)

    def _apply(self, fn: Any, recurse: bool = True) -> Embedding:
        self.form = self.form.moved()
        super()._apply(fn, recurse)
        if self.weight is not None:  # .to(dtype): the rows come out in the new dtype
            self.out_dtype = self.weight.dtype
        return self

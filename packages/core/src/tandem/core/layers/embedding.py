"""The token embedding: a float table, or a GGUF table kept in its blocks.

With a :class:`~tandem.kernels.gguf_blocks.QuantWeight` (``quantization="gguf"``) a
lookup dequantizes only the rows it reads, and tied logits multiply by the blocks.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from tandem.core.layers.no_init import Embedding as _NoInitEmbedding
from tandem.kernels import ops
from tandem.kernels.gguf_blocks import QuantWeight


class Embedding(_NoInitEmbedding):
    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = None) -> None:
        super().__init__(num_embeddings, embedding_dim, dtype=dtype)
        self.quant: QuantWeight | None = None
        self.out_dtype = self.weight.dtype

    def use_quantized(self, weight: QuantWeight) -> None:
        """Look rows up in ``weight`` (GGUF blocks, [vocab, dim]) from now on."""
        if (weight.n, weight.k) != (self.num_embeddings, self.embedding_dim):
            raise ValueError(
                f"quantized table is [{weight.n}, {weight.k}], the embedding "
                f"[{self.num_embeddings}, {self.embedding_dim}]"
            )
        self.quant = weight

    def forward(self, input_ids: Tensor) -> Tensor:
        if self.quant is not None:
            return ops.gguf_rows(self.quant, input_ids).to(self.out_dtype)
        return super().forward(input_ids)

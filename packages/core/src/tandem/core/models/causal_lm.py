"""A causal LM of any supported architecture: the decoder stack and its logits.

The architecture (the class's name, one per entry of
:data:`tandem.core.models.architectures.ARCHITECTURES`) chooses the spec and the weight
names; everything else is the same code for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from tandem.core.heap import release_free_heap
from tandem.core.layers.attention_backend import for_device, get_attention_backend
from tandem.core.layers.attention_metadata import AttentionMetadata
from tandem.core.layers.kernel_choice import KernelChoice, resolve_kernels
from tandem.core.layers.linear import Linear
from tandem.core.layers.norm import RMSNorm
from tandem.core.layers.parallel import collect_layouts, vocab_layout
from tandem.core.layers.self_attention import KVCache
from tandem.core.layers.weight_form import Dense, WeightForm
from tandem.core.models.architectures import architecture, build_spec
from tandem.core.models.decoder import DecoderModel
from tandem.core.models.weights import drop_layers_from, load_named
from tandem.core.parallel.group import TensorParallel
from tandem.core.parallel.partition import check_tensor_parallel
from tandem.kernels.backends import AttentionBackend
from tandem.kernels.ops.linear import PackedWeight

TRIM_BYTES = 256 << 20  # freed floats handed back to the system every so many bytes


class CausalLM(nn.Module):
    """``forward`` -> hidden states; ``compute_logits`` -> fp32 logits. No sampler here."""

    def __init__(
        self,
        hf_config: Any,
        dtype: torch.dtype | None = None,
        max_model_len: int | None = None,
        tp: TensorParallel | None = None,
    ) -> None:
        super().__init__()
        arch = type(self).__name__
        self.hf_config = hf_config
        self.spec = spec = build_spec(hf_config, arch, max_model_len)
        if tp is not None:
            check_tensor_parallel(spec, tp.size)
        self.tp = tp
        self.model = DecoderModel(spec, dtype, tp)
        self.lm_head: Linear | None = None
        if not spec.tie_word_embeddings:
            rows = spec.vocab_size
            if tp is not None:
                layout, rows = vocab_layout(spec.vocab_size, spec.hidden_size, tp)
                self.tp_layouts = {"lm_head.weight": layout}
            self.lm_head = Linear(spec.hidden_size, rows, bias=False, dtype=dtype)
        # the embedding's int8 copy, after quantize("int8"): tied logits multiply by it
        self._tied_int8: WeightForm | None = None
        self.floats_freed = 0  # bytes of float weights freed by prepare(free_float=True)
        # what runs the ops (use_kernels); a model run without an engine takes the
        # defaults at its first step
        self.kernels: KernelChoice | None = None
        self._backend: AttentionBackend | None = None

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor,
        kv_caches: list[KVCache],
        attn_metadata: AttentionMetadata,
    ) -> Tensor:
        # input_ids, positions: [T] long -> hidden [T, C]
        self._check_inputs(input_ids, positions, kv_caches, attn_metadata)
        backend = self._backend
        if backend is None:
            self.use_kernels(resolve_kernels())
            backend = self._backend
        return self.model(input_ids, positions, kv_caches, attn_metadata, backend)

    def set_max_model_len(self, max_model_len: int) -> None:
        """Run with a context of ``max_model_len`` tokens, as if built with it: a rope
        whose factors depend on the context (longrope) takes the ones for it, and the rope
        tables cover that many positions. For an engine that shortened the context after
        loading, before its first step."""
        spec = build_spec(self.hf_config, type(self).__name__, max_model_len)
        for layer, new in zip(self.model.layers, spec.layers):
            layer.self_attn.rotary.use(new.rope, spec.max_position)
        self.spec = spec
        self.model.decode_stack.drop()

    def compute_logits(self, hidden: Tensor) -> Tensor:
        # hidden: [N, C] -> [N, V] fp32
        if hidden.dim() != 2 or hidden.shape[-1] != self.spec.hidden_size:
            raise ValueError(
                f"hidden must have shape [N, {self.spec.hidden_size}], got {list(hidden.shape)}"
            )
        if self.lm_head is not None:
            logits = self.lm_head(hidden).float()
        else:
            logits = self.tied_head.matmul(hidden).float()
        spec = self.spec
        if self.tp is not None:  # [N, V / ranks] -> [N, V]
            logits = self.tp.gather_columns(logits, spec.vocab_size)
        if spec.logits_divisor != 1.0:
            logits = logits.div_(spec.logits_divisor)
        if spec.final_softcap is not None:
            logits = logits.div_(spec.final_softcap).tanh_().mul_(spec.final_softcap)
        return logits

    def prepare(self, free_float: bool = False) -> int:
        """Pack every linear weight for its CPU kernel now: the engines call this while
        loading, where it overlaps the front's own start-up, instead of in the first
        step (0.3-1.3 s for SmolLM2's 121 layers).

        ``free_float`` (an engine's model, its kernels final) then frees each float
        weight whose form holds all of it (the C kernel's panels, int8, GGUF blocks:
        :meth:`WeightForm.standalone`), one module at a time, so that the weights are
        resident once and the load peaks at the floats plus one layer's copy. A weight
        kept in panels alone runs on the native kernel alone, and no longer loads or
        moves. Returns the bytes freed."""
        self.model.decode_stack.drop()
        if self.lm_head is None:
            self.tied_head.prepare()
        if free_float and self._tied_int8 is not None:
            self._tied_int8 = self._tied_int8.standalone()
        freed = untrimmed = 0
        for module in self.modules():
            if module is self:
                continue
            if hasattr(module, "prepare"):
                module.prepare()
            if free_float and hasattr(module, "free_float"):
                n = module.free_float()
                freed, untrimmed = freed + n, untrimmed + n
            if untrimmed >= TRIM_BYTES:  # hand the freed floats back before the next copies
                release_free_heap()
                untrimmed = 0
        if untrimmed:
            release_free_heap()
        self.floats_freed += freed
        return freed

    def quantize(self, method: str) -> int:
        """Switch the MLP projections (experts included), the attention output projection
        and the LM head to ``method`` ("int8"): int8 weights per output channel,
        activations quantized per token, outlier activations in fp32. The q/k/v
        projection stays as it is: on SmolLM2 int8 there took greedy agreement with
        float32 from ~97% to ~95% (256 positions; tests/models/test_int8.py checks >= 95%
        on 768). Returns how many layers were switched."""
        if method != "int8":
            raise ValueError(f"quantization must be one of int8, got {method!r}")
        self.model.decode_stack.drop()
        done = sum(layer.mlp.quantize() for layer in self.model.layers)
        done += sum(layer.self_attn.o_proj.quantize() for layer in self.model.layers)
        if not done:
            raise ValueError("quantization='int8' needs torch._int_mm (torch >= 2.2 on the CPU)")
        if self.lm_head is not None:
            done += self.lm_head.quantize()
        else:  # none for a table kept in GGUF blocks
            self._tied_int8 = self.model.embed_tokens.form.quantized()
            done += self._tied_int8 is not None
        return done

    def _apply(self, fn: Any, recurse: bool = True) -> CausalLM:
        self._tied_int8 = None  # .to() / .float(): float weights again, as Linear does
        self.model.decode_stack.drop()
        return super()._apply(fn, recurse)

    def load_weights(self, weights: Iterable[tuple[str, Tensor]]) -> None:
        """Copy checkpoint-named tensors in; errors name missing/unexpected/misshaped ones."""
        if self.floats_freed:
            raise ValueError(
                "load_weights: this model keeps its weights in its kernels' copies alone "
                "(its float weights were freed at load: free_float); load a new model instead"
            )
        skip = {"lm_head.weight"} if self.lm_head is None else set()
        arch = architecture(self.spec.architecture)
        if arch.extra_layers:  # e.g. DeepSeek-V3's multi-token-prediction layer
            weights = drop_layers_from(weights, self.spec.num_layers)
        self.model.decode_stack.drop()
        load_named(self, weights, arch.names(self.spec), skip, collect_layouts(self))
        for module in self.modules():
            if module is not self and hasattr(module, "finish_loading"):
                module.finish_loading()
        if self.spec.norm_offset:  # the checkpoint stores each norm's offset from 1
            with torch.no_grad():
                for module in self.modules():
                    if isinstance(module, RMSNorm):
                        module.weight.add_(self.spec.norm_offset)

    @property
    def attention_backend(self) -> str | None:
        """The attention backend's name (None before :meth:`use_kernels`)."""
        return None if self.kernels is None else self.kernels.attention

    @property
    def tied_head(self) -> WeightForm:
        """The weight tied logits multiply by: the embedding's table in its own form, or
        its int8 copy after :meth:`quantize`."""
        tied = self._tied_int8
        return self.model.embed_tokens.form if tied is None else tied

    @property
    def _tied_pack(self) -> PackedWeight | None:
        """The tied float table's packed copy (for inspection)."""
        form = self.model.embed_tokens.form
        return form.pack if isinstance(form, Dense) else None

    def use_kernels(self, kernels: KernelChoice) -> None:
        """Run on ``kernels`` from now on: the attention backend of every layer, the
        matmul kernel of every linear layer (and expert), the decode stack on or off.
        The engines call it once, before the weights are packed (:meth:`prepare`)."""
        self.kernels = kernels = for_device(kernels, self.model.norm.weight.device.type)
        self._backend = get_attention_backend(kernels.attention)
        for module in self.modules():
            if module is not self and hasattr(module, "use_kernel"):
                module.use_kernel(kernels.linear)
        self.model.use_decode_stack = kernels.decode_stack == "c"
        self.model.decode_stack.drop()

    def _check_inputs(
        self,
        input_ids: Tensor,
        positions: Tensor,
        kv_caches: list[KVCache],
        meta: AttentionMetadata,
    ) -> None:
        if input_ids.dim() != 1 or input_ids.dtype != torch.long:
            raise ValueError(
                f"input_ids must be a 1-D long tensor [T], got "
                f"{input_ids.dtype} of shape {list(input_ids.shape)}"
            )
        if positions.shape != input_ids.shape:
            raise ValueError(
                f"positions must have the shape of input_ids "
                f"{list(input_ids.shape)}, got {list(positions.shape)}"
            )
        if len(kv_caches) != self.spec.num_layers:
            raise ValueError(
                f"kv_caches must hold one (k_cache, v_cache) per layer "
                f"({self.spec.num_layers}), got {len(kv_caches)}"
            )
        if meta.num_tokens != input_ids.shape[0]:
            raise ValueError(
                f"attn_metadata covers {meta.num_tokens} tokens but input_ids "
                f"has {input_ids.shape[0]}"
            )

"""The fixtures ``make.py`` builds: architecture, quantized presets, and every change to the
architecture's tiny test config, each with the reason llama.cpp needs it.

To keep the directory small, BPE fixtures have 320 tokens (not 512), dense MLPs are 32 wide
(not 128) and the MoE fixtures have one layer (``SMALL``, ``ONE_LAYER``); every other value is
the architecture's tiny test config unless ``why`` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SPM_VOCAB = 512  # a SentencePiece BPE model needs the corpus' characters (coverage >= 0.98)


@dataclass(frozen=True)
class Fixture:
    arch: str  # tandem.core.testing arch name
    # the quantized files: quantizer ftypes (Q4_K_M, Q4_0, Q8_0 ...) or "convert:OUTTYPE" for
    # the converter's own (q8_0, f16, bf16); one name or a tuple of the presets of one source
    quant: str | tuple[str, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    why: str = ""  # why each override: what llama.cpp cannot represent
    tokenizer: str | None = None  # a directory under tokenizers/ replacing the BPE tokenizer
    config_extra: dict[str, Any] = field(default_factory=dict)
    keep_f32: bool = True  # commit the f32 file (False: rebuilt only as the quantizer's input)
    vocab: int = 320
    note: str = ""  # a known difference between llama.cpp and transformers on this source

    @property
    def presets(self) -> tuple[str, ...]:
        return (self.quant,) if isinstance(self.quant, str) else self.quant


SMALL = {"intermediate_size": 32}  # dense MLPs of 32, not 128: the files stay small
ONE_LAYER = {"num_hidden_layers": 1}  # MoE fixtures: every layer is sparse, one shows the layout
# the files people pick, from one source: llama.cpp's common quantizer presets and the
# converter's 16-bit outputs
PRESETS = (
    "Q2_K",
    "Q3_K_M",
    "Q4_K_M",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "Q4_0",
    "convert:f16",
    "convert:bf16",
)

FIXTURES: dict[str, Fixture] = {
    "llama": Fixture("llama", "Q4_K_M", SMALL),
    "llama-k256": Fixture(
        "llama",
        "Q4_K_M",
        {"hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 1},
        "rows of 256 so that Q4_K_M keeps its k-quants (Q4_K, Q6_K) instead of falling back",
        keep_f32=False,
    ),
    "llama-presets": Fixture(
        "llama",
        PRESETS,
        {
            "hidden_size": 256,
            "intermediate_size": 256,
            "num_hidden_layers": 1,
            "tie_word_embeddings": True,
        },
        "rows of 256 so that every k-quant preset keeps its k-quants; tied embeddings (as "
        "Llama 3.2's) so that the F16 and BF16 files stay under 1 MB",
        keep_f32=False,
    ),
    "mistral": Fixture("mistral", "convert:q8_0", SMALL),
    "mixtral": Fixture(
        "mixtral",
        "Q4_0",
        {**ONE_LAYER, "sliding_window": None},
        "llama.cpp's llama architecture has no sliding window and the converter drops it",
        note="the routers of experts 0 and 1 are tied (the arch's trap): on an exact tie "
        "llama.cpp's top-k keeps the other expert than torch.topk, so its greedy tokens "
        "differ from transformers' where a tie decides",
    ),
    "qwen2": Fixture("qwen2", "Q4_K_M", SMALL),
    "qwen2moe": Fixture(
        "qwen2_moe",
        "Q8_0",
        {**ONE_LAYER, "decoder_sparse_step": 1},
        "llama.cpp's qwen2moe needs every layer sparse (decoder_sparse_step is not written)",
    ),
    "qwen3": Fixture("qwen3", "Q4_K_M", SMALL),
    "qwen3moe": Fixture(
        "qwen3_moe",
        "Q4_0",
        {**ONE_LAYER, "mlp_only_layers": []},
        "llama.cpp's qwen3moe needs every layer sparse (mlp_only_layers is not written)",
    ),
    "gemma2": Fixture(
        "gemma2",
        "Q8_0",
        {**SMALL, "query_pre_attn_scalar": 32},
        "llama.cpp scales scores by 1/sqrt(head_dim); query_pre_attn_scalar is not written",
        tokenizer="tokenizers/spm_plain",
        vocab=SPM_VOCAB,
    ),
    "gemma3": Fixture(
        "gemma3",
        "Q4_K_M",
        {
            **SMALL,
            "query_pre_attn_scalar": 32,
            "attn_logit_softcapping": None,
            "layer_types": None,
            "num_hidden_layers": 6,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
        },
        "scores scaled by 1/sqrt(head_dim); the converter asserts no attention soft cap; "
        "layer types are not written and llama.cpp slides on 5 layers of every 6, so the "
        "checkpoint has 6 layers in HF's default pattern (5 local, then 1 global), with "
        "fewer heads to stay small",
    ),
    "granite": Fixture("granite", "Q4_0", SMALL),
    "olmo2": Fixture("olmo2", "Q4_K_M", SMALL),
    "phi3": Fixture(
        "phi3",
        "Q4_K_M",
        {**SMALL, "sliding_window": None, "original_max_position_embeddings": 256},
        "llama.cpp disables Phi-3's sliding window at run time; it picks the long rope factors "
        "when its context (padded to 256) exceeds original_max_position_embeddings, HF when "
        "the sequence does, so 256 keeps both on the short factors for prompts up to 256",
        tokenizer="tokenizers/spm_prefix",
        vocab=SPM_VOCAB,
        note="a text that starts with a space: llama.cpp adds its dummy-prefix piece as well, "
        "transformers' LlamaTokenizer (legacy=False) does not",
    ),
    "deepseek2": Fixture(
        "deepseek_v3",
        "Q4_K_M",
        SMALL,
        "config.json gets scoring_func=sigmoid (as DeepSeek-V3's own has): transformers "
        "does not save it, and without it llama.cpp routes with softmax",
        config_extra={"scoring_func": "sigmoid"},
    ),
}

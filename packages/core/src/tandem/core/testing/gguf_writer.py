"""A GGUF file made from a Hugging Face Llama, Qwen2 or Qwen3 directory, as llama.cpp's
converter lays it out.

For tests of the GGUF reader without a download: float32 tensors under GGUF names,
Llama's query/key rows in llama.cpp's interleaved rotary order (Qwen's as they are), the
BPE tokenizer's vocabulary and merges as ``gpt2`` tokenizer metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_LAYER = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def gguf_name(name: str) -> str:
    base, _, leaf = name.rpartition(".")
    if base in _TOP:
        return f"{_TOP[base]}.{leaf}"
    parts = base.split(".")  # model.layers.N.<module path>
    return f"blk.{parts[2]}.{_LAYER['.'.join(parts[3:])]}.{leaf}"


def permute(w: Any, heads: int) -> Any:
    """Hugging Face's rotary row order -> llama.cpp's (each head's halves interleaved)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(
    hf_dir: str | Path,
    out: str | Path,
    qtypes: dict[str, int] | None = None,
    sampling: dict[str, float] | None = None,
) -> Path:
    """``hf_dir`` as a GGUF file; ``qtypes`` stores the tensors whose names end with a key
    in that GGUF block format (2: Q4_0, 3: Q4_1, 6: Q5_0, 7: Q5_1, 8: Q8_0, 12: Q4_K, 13: Q5_K,
    14: Q6_K; the
    blocks made by :func:`tandem.kernels.gguf_blocks.quantize`), F32 otherwise.
    ``sampling`` writes the file's sampling defaults (``{"temp": 0.6, "top_k": 20}``: the
    ``general.sampling.*`` keys, written with the gguf package's own ``add_sampling_*``)."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    src, out = Path(hf_dir), Path(out)
    cfg = json.loads((src / "config.json").read_text())
    tok = json.loads((src / "tokenizer.json").read_text())
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    arch = cfg["model_type"]  # llama, qwen2 or qwen3: the GGUF architecture of the same name
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(head_dim)
    if arch != "llama":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    rope = cfg.get("rope_parameters") or {}
    w.add_rope_freq_base(float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv_: kv_[1])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for t, _ in vocab])
    merges = tok["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    special = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    w.add_token_types([3 if i in special else 1 for i, _ in vocab])  # 3: control
    for key in ("bos", "eos", "pad"):
        value = cfg.get(f"{key}_token_id")
        if value is not None:
            getattr(w, f"add_{key}_token_id")(int(value))
    w.add_add_bos_token(True)
    for key, value in (sampling or {}).items():
        getattr(w, f"add_sampling_{key}")(value)
    for name, t in load_file(str(src / "model.safetensors")).items():
        t = t.astype(np.float32)
        if arch == "llama" and name.endswith("q_proj.weight"):
            t = permute(t, heads)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            t = permute(t, kv)
        qtype = next((q for end, q in (qtypes or {}).items() if name.endswith(end)), None)
        if qtype is None:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(t))
            continue
        import torch

        from tandem.kernels.gguf_blocks import quantize

        data = quantize(torch.from_numpy(np.ascontiguousarray(t)), qtype).data.numpy()
        w.add_tensor(gguf_name(name), data, raw_dtype=gguf.GGMLQuantizationType(qtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out

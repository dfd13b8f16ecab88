"""Random-init checkpoints in the shapes of real models, as GGUF files from llama.cpp's tools.

Start-up and memory depend on a model's shape and file format, not on trained weights, so
``gguf_startup.py`` measures files made here: a Hugging Face checkpoint initialised at
random (transformers' own init), saved as float16 safetensors, then llama.cpp's converter
(to F16, and F32 where asked) and quantizer (from the F16 file: :data:`QUANTIZED`;
``gguf_files.py``), so every format holds the same weights. ``make(venv, name, root,
formats)`` returns ``{format: path}``; everything is made once under ``root/name`` and kept.

Shapes (:data:`SHAPES`):

- ``llama-1b``: Llama, hidden 2048, 16 layers, 32 heads / 8 KV heads, intermediate 8192,
  SmolLM2's vocabulary (49152), untied output: 1.17 B parameters;
- ``gemma3-270m``: Gemma 3 270M's shape (18 layers, hidden 640, 4 heads / 1 KV head,
  head_dim 256, intermediate 2048, sliding window 512 on five layers of six, vocabulary
  262144, tied): 268 M parameters, two thirds of them the embedding. Its vocabulary is a
  sentencepiece model made here (:func:`write_spm`), the real one's size and special ids;
- ``qwen3-0.6b``: Qwen 3 0.6B's shape (28 layers, hidden 1024, 16 heads / 8 KV heads,
  head_dim 128, q/k norms, intermediate 3072, vocabulary 151936, tied): 596 M parameters.
  Its tokenizer is SmolLM2's (49152 pieces; the converter pads the rest of the rows);
- ``llama-270m`` and ``llama-0.6b``: Llama (no q/k norms, no sliding window, plain
  attention scale) in Gemma 3 270M's and Qwen 3 0.6B's sizes (layers, hidden, heads,
  head_dim, intermediate, vocabulary, tied embeddings), each with its model's tokenizer
  as made here (the sentencepiece model of 262144 pieces; SmolLM2's, padded): 268 M and
  596 M parameters, and llama.cpp's quantizer picks the same tensor types, so each pair
  differs in the architecture alone: beside the other, what the size costs and what the
  architecture does.

The checkpoint is made in the llama.cpp venv's python (it has torch, transformers and
sentencepiece; this file runs there as a script), with the tokenizer SmolLM2's file
carries (:func:`tandem.core.gguf.tokenizer.tokenizer_dir`) where a shape uses it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

LLAMA: dict[str, Any] = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
# Gemma 3 270M's and Qwen 3 0.6B's sizes: theirs, and the Llamas' of the same sizes
SIZES_270M: dict[str, Any] = {
    "hidden_size": 640,
    "intermediate_size": 2048,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "vocab_size": 262144,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
SIZES_06B: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
SHAPES: dict[str, dict[str, Any]] = {
    "llama-1b": {
        **LLAMA,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    "gemma3-270m": {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        **SIZES_270M,
        "sliding_window": 512,
        "query_pre_attn_scalar": 256,
    },
    "qwen3-0.6b": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], **SIZES_06B},
    "llama-270m": {**LLAMA, **SIZES_270M, "rope_theta": 1000000.0},
    "llama-0.6b": {**LLAMA, **SIZES_06B},
}
SPM_SHAPES = ("gemma3-270m", "llama-270m")  # the vocabulary is a sentencepiece model made here
CONVERTED = ("f16", "f32")  # llama.cpp's converter, from the checkpoint
QUANTIZED = ("q8_0", "q4_k_m", "q4_1")  # llama.cpp's quantizer, from the F16 file
FORMATS = (*CONVERTED, *QUANTIZED)


def make(venv: Path, name: str, root: Path, formats: list[str]) -> dict[str, str]:
    """``name``'s GGUF files in ``formats`` (among :data:`FORMATS`), made where missing."""
    from gguf_files import convert, quantize

    if name not in SHAPES:
        raise ValueError(f"name must be one of {', '.join(SHAPES)}, got {name!r}")
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"formats must be among {', '.join(FORMATS)}, got {unknown}")
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    files = {fmt: out / f"{name}-{fmt}.gguf" for fmt in FORMATS}
    hf = checkpoint(venv, name, root)
    for fmt in CONVERTED:
        needed = fmt in formats or (fmt == "f16" and set(formats) & set(QUANTIZED))
        if needed and not files[fmt].exists():
            part = files[fmt].with_suffix(".part")
            convert(venv, hf, fmt, part)
            part.rename(files[fmt])
    for fmt in QUANTIZED:
        if fmt in formats and not files[fmt].exists():
            part = files[fmt].with_suffix(".part")
            quantize(venv, files["f16"], part, fmt)
            part.rename(files[fmt])
    made = [files[f] for f in FORMATS if files[f].exists()]
    if made and not (hf / "tokenizer.json").exists():
        _fast_tokenizer(hf, made[0])
    return {fmt: str(files[fmt]) for fmt in formats}


def _fast_tokenizer(hf: Path, gguf: Path) -> None:
    """``hf/tokenizer.json``, the vocabulary as the file carries it, so that the checkpoint's
    tokenizer loads without sentencepiece (which only the llama.cpp venv has)."""
    from tandem.core.gguf.tokenizer import tokenizer_dir

    shutil.copy(tokenizer_dir(gguf) / "tokenizer.json", hf / "tokenizer.json")


def checkpoint(venv: Path, name: str, root: Path) -> Path:
    """The random-init Hugging Face checkpoint of shape ``name`` (``root/name/hf``), made
    in the llama.cpp venv where missing."""
    hf = root / name / "hf"
    if not (hf / "config.json").is_file():
        tokenizer = "" if name in SPM_SHAPES else str(_smollm2_tokenizer())
        cmd = [str(venv / "bin" / "python"), __file__, "--checkpoint", name]
        subprocess.run([*cmd, "--out", str(hf), "--tokenizer", tokenizer], check=True)
    return hf


def _smollm2_tokenizer() -> Path:
    from tandem.core.catalog.default_model import gguf_file
    from tandem.core.gguf.tokenizer import tokenizer_dir

    return tokenizer_dir(gguf_file(print))


# -- run in the llama.cpp venv ----------------------------------------------------------


def write_checkpoint(name: str, out: Path, tokenizer: str) -> None:
    """A random-init checkpoint of shape ``name`` in ``out`` (float16 safetensors)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = dict(SHAPES[name])
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer:
        for item in Path(tokenizer).iterdir():
            shutil.copy(item, out / item.name)
        special = json.loads((out / "tokenizer_config.json").read_text())
        vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
        shape["bos_token_id"] = vocab.get(special.get("bos_token"), 1)
        shape["eos_token_id"] = vocab.get(special.get("eos_token"), 2)
    else:
        write_spm(out, shape["vocab_size"])
        shape |= {"pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2}
    config = AutoConfig.for_model(**shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.to(torch.float16).save_pretrained(str(out))
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e6:.0f} M parameters in {out}", flush=True)


def write_spm(out: Path, vocab_size: int) -> None:
    """``out/tokenizer.model``: a sentencepiece BPE model of ``vocab_size`` pieces with
    Gemma's special ids (pad, eos, bos, unk = 0..3), two chat turn markers, the 256 byte
    pieces, then words: every string over a small alphabet by length (each one's prefix
    is a piece, so BPE reaches it), best first; and a tokenizer_config.json naming them."""
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    kinds = pb.ModelProto.SentencePiece
    heads = [("<pad>", kinds.CONTROL), ("<eos>", kinds.CONTROL), ("<bos>", kinds.CONTROL)]
    heads += [("<unk>", kinds.UNKNOWN), ("<start_of_turn>", kinds.USER_DEFINED)]
    heads += [("<end_of_turn>", kinds.USER_DEFINED)]
    heads += [(f"<0x{b:02X}>", kinds.BYTE) for b in range(256)]
    alphabet = "\u2581etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUM0123456789.,"
    words = (
        "".join(chars)
        for n in itertools.count(1)
        for chars in itertools.product(alphabet, repeat=n)
    )
    for i, (text, kind) in enumerate(itertools.chain(heads, ((w, kinds.NORMAL) for w in words))):
        if i == vocab_size:
            break
        piece = proto.pieces.add()
        piece.piece, piece.type, piece.score = text, kind, 0.0 if kind != kinds.NORMAL else -i
    spec = proto.trainer_spec
    spec.model_type, spec.vocab_size, spec.byte_fallback = pb.TrainerSpec.BPE, vocab_size, True
    spec.pad_id, spec.eos_id, spec.bos_id, spec.unk_id = 0, 1, 2, 3
    proto.normalizer_spec.name, proto.normalizer_spec.add_dummy_prefix = "identity", False
    (out / "tokenizer.model").write_bytes(proto.SerializeToString())
    SentencePieceProcessor(model_file=str(out / "tokenizer.model"))  # it loads
    tokens = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
    tokens |= {"unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}
    (out / "tokenizer_config.json").write_text(json.dumps(tokens, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description="one random-init checkpoint (llama.cpp venv)")
    parser.add_argument("--checkpoint", required=True, choices=sorted(SHAPES))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tokenizer", default="", help="a tokenizer directory to copy")
    args = parser.parse_args()
    write_checkpoint(args.checkpoint, args.out, args.tokenizer)


if __name__ == "__main__":
    sys.exit(main())

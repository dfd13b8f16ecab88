"""Tiny GGUF files of every architecture, made by llama.cpp's own converter and quantizer.

    python tests/models/gguf_files/make.py --venv PATH [--only NAME ...] [--work DIR] [--no-check]

Run from the repository root in the project's venv. PATH is the llama.cpp venv that
``benchmarks/llama_cpp_venv.sh`` builds (default ``benchmarks/results/llama-cpp-venv``): its
python has ``llama_cpp``, torch, transformers, sentencepiece (and protobuf, needed only to
retrain the committed SentencePiece tokenizers with ``--retrain-spm``), and the sdist's
``vendor/llama.cpp`` (``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py``) lies in
``<venv>/src``. Nothing of llama.cpp is edited; ``llama_tools.py`` drives it.

For each fixture below: the source checkpoint is made by ``tandem.core.testing.make_model``
(the architecture's tiny test config, with the overrides listed and explained in FIXTURES),
then edited as the manifest records (see ``tandem.core.testing.gguf_fixtures``); the
converter writes ``NAME-f32.gguf`` and the quantizer (or the converter's own ``--outtype
q8_0``) writes the quantized file. ``manifest.json`` says, for every file, its source (exact
``make_model`` arguments and edits), GGUF architecture, format, tensor types, size and digest,
and what the checks found: whether llama.cpp loads and runs it, whether its tokenizer and
greedy tokens equal the checkpoint's under transformers, and whether transformers' own GGUF
loader reads it.

The BPE test tokenizer has no pre-tokenizer hash that the converter knows; ``llama_tools.py``
names it ``gpt-2`` (the same split) and the checks compare llama.cpp's tokens with ours. Gemma 2
and Phi-3 are converted only with a SentencePiece ``tokenizer.model`` (their converters have no
BPE path for our tokenizer class), so those two carry SentencePiece vocabularies trained here on
the same corpus (``tokenizers/``): Phi-3's with a dummy prefix (Llama style, llama.cpp adds the
space), Gemma 2's without (its converter writes ``add_space_prefix = false``).

To keep the directory small, BPE fixtures have 320 tokens (not 512), dense MLPs are 32 wide
(not 128) and the MoE fixtures have one layer (``SMALL``, ``ONE_LAYER``); every other value is
the architecture's tiny test config unless FIXTURES says why not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.core.testing.gguf_fixtures import MANIFEST, build_source
from tandem.core.testing.tokenizer import CHAT_TEMPLATE, corpus

HERE = Path(__file__).resolve().parent
TOOLS = HERE / "llama_tools.py"
SPM_VOCAB = 512  # a SentencePiece BPE model needs the corpus' characters (coverage >= 0.98)


@dataclass(frozen=True)
class Fixture:
    arch: str  # tandem.core.testing arch name
    quant: str  # quantizer ftype (Q4_K_M, Q4_0, Q8_0) or "convert:q8_0" for the converter's own
    overrides: dict[str, Any] = field(default_factory=dict)
    why: str = ""  # why each override: what llama.cpp cannot represent
    tokenizer: str | None = None  # a directory under tokenizers/ replacing the BPE tokenizer
    config_extra: dict[str, Any] = field(default_factory=dict)
    keep_f32: bool = True  # commit the f32 file (False: rebuilt only as the quantizer's input)
    vocab: int = 320
    note: str = ""  # a known difference between llama.cpp and transformers on this source


SMALL = {"intermediate_size": 32}  # dense MLPs of 32, not 128: the files stay small
ONE_LAYER = {"num_hidden_layers": 1}  # MoE fixtures: every layer is sparse, one shows the layout

FIXTURES: dict[str, Fixture] = {
    "llama": Fixture("llama", "Q4_K_M", SMALL),
    "llama-k256": Fixture(
        "llama",
        "Q4_K_M",
        {"hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 1},
        "rows of 256 so that Q4_K_M keeps its k-quants (Q4_K, Q6_K) instead of falling back",
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


def tool(venv: Path, *args: str) -> dict[str, Any]:
    """One llama_tools.py subcommand in the llama.cpp venv; its JSON result."""
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(TOOLS), *args], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"llama_tools {args[0]} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_spm(venv: Path, kind: str, work: Path) -> dict[str, Any]:
    """tokenizers/spm_prefix or spm_plain: tokenizer.model and the HF files made from it."""
    out = HERE / "tokenizers" / kind
    shutil.rmtree(out, ignore_errors=True)
    lines, config = work / "corpus.json", work / f"{kind}-config.json"
    lines.write_text(json.dumps(corpus()), encoding="utf-8")
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    settings = {**special, "add_bos_token": True, "add_eos_token": False}
    config.write_text(json.dumps({**settings, "chat_template": CHAT_TEMPLATE}), encoding="utf-8")
    prefix = "1" if kind == "spm_prefix" else "0"
    return tool(venv, "spm", str(lines), str(out), prefix, str(SPM_VOCAB), str(config))


def source_entry(fx: Fixture) -> dict[str, Any]:
    overrides = {"vocab_size": fx.vocab, **fx.overrides}
    entry: dict[str, Any] = {
        "arch": fx.arch,
        "make_model": {"size": "tiny", "arch": fx.arch, "seed": 0, "overrides": overrides},
        "why": fx.why or None,
    }
    if fx.note:
        entry["note"] = fx.note
    if fx.tokenizer:
        entry["tokenizer"] = fx.tokenizer
    if fx.config_extra:
        entry["config_extra"] = fx.config_extra
    return entry


def describe(venv: Path, path: Path, made_by: str, source: str) -> dict[str, Any]:
    info = tool(venv, "inspect", str(path))
    meta = info["metadata"]
    types = Counter(kind for kind, _ in info["tensors"].values())
    return {
        "source": source,
        "gguf_architecture": meta["general.architecture"],
        "format": made_by.split()[-1].upper(),
        "made_by": made_by,
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "tensor_types": dict(sorted(types.items())),
        "tokenizer_model": meta.get("tokenizer.ggml.model"),
        "tokenizer_pre": meta.get("tokenizer.ggml.pre"),
    }


def make_files(venv: Path, name: str, fx: Fixture, hf_dir: Path, work: Path) -> dict[str, Any]:
    """Convert and quantize one fixture; returns {file name: record} of the committed files."""
    f32 = work / f"{name}-f32.gguf"
    pre = tool(venv, "convert", str(hf_dir), str(f32), "f32", "gpt-2")["pre_tokenizer"]
    made = {f32: "convert_hf_to_gguf --outtype f32"}
    if fx.quant.startswith("convert:"):
        outtype = fx.quant.split(":", 1)[1]
        quant = work / f"{name}-{outtype}.gguf"
        tool(venv, "convert", str(hf_dir), str(quant), outtype, "gpt-2")
        made[quant] = f"convert_hf_to_gguf --outtype {outtype}"
    else:
        quant = work / f"{name}-{fx.quant.lower()}.gguf"
        tool(venv, "quantize", str(f32), str(quant), fx.quant)
        made[quant] = f"llama_model_quantize(f32 file) {fx.quant}"
    records = {}
    for path, how in made.items():
        if path == f32 and not fx.keep_f32:
            continue
        record = describe(venv, path, how, name)
        record["pre_tokenizer_chosen_by"] = (pre or {}).get("how")
        shutil.copy2(path, HERE / path.name)
        records[path.name] = record
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=Path("benchmarks/results/llama-cpp-venv"))
    parser.add_argument("--only", nargs="*", choices=sorted(FIXTURES), default=None)
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (kept)")
    parser.add_argument("--no-check", action="store_true", help="skip the llama.cpp/HF checks")
    parser.add_argument("--retrain-spm", action="store_true", help="remake tokenizers/spm_*")
    args = parser.parse_args(argv)
    venv = args.venv.resolve()
    if not (venv / "bin" / "python").is_file():
        parser.error(f"--venv {args.venv} has no bin/python")
    work = args.work or Path(tempfile.mkdtemp(prefix="gguf-files-"))
    work.mkdir(parents=True, exist_ok=True)
    path = HERE / MANIFEST
    manifest = json.loads(path.read_text()) if path.is_file() and args.only else {}
    manifest["tools"] = tool_versions(venv)
    sources, files = manifest.setdefault("sources", {}), manifest.setdefault("files", {})
    names = args.only or sorted(FIXTURES)
    for kind in sorted({FIXTURES[n].tokenizer for n in names if FIXTURES[n].tokenizer}):
        if args.retrain_spm or not (HERE / kind / "tokenizer.model").is_file():
            print(kind, make_spm(venv, Path(kind).name, work), flush=True)
    for name in names:
        fx = FIXTURES[name]
        sources[name] = source_entry(fx)
        for old in [f for f, r in files.items() if r["source"] == name]:
            del files[old]
        target = work / "sources" / name
        shutil.rmtree(target, ignore_errors=True)
        hf_dir = build_source(sources[name], HERE, target)
        records = make_files(venv, name, fx, hf_dir, work)
        if not args.no_check:
            from checks import check_file

            for file_name, record in records.items():
                record["checks"] = check_file(venv, TOOLS, HERE / file_name, hf_dir, work)
        files.update(records)
        print(name, json.dumps({k: _summary(r) for k, r in records.items()}), flush=True)
    manifest["sources"] = dict(sorted(sources.items()))
    manifest["files"] = dict(sorted(files.items()))
    path.write_text(dump(manifest), encoding="utf-8")
    return 0


def tool_versions(venv: Path) -> dict[str, str]:
    code = "import llama_cpp, transformers; print(llama_cpp.__version__, transformers.__version__)"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    llama, hf = out.stdout.split()
    git = ["git", "-C", str(venv / "src" / "vendor" / "llama.cpp"), "rev-parse", "HEAD"]
    commit = subprocess.run(git, capture_output=True, text=True).stdout.strip() or "unknown"
    return {"llama_cpp_python": llama, "llama.cpp": commit, "transformers (converter side)": hf}


def dump(manifest: dict[str, Any]) -> str:
    """Indented JSON with each list of numbers on one line."""
    text = json.dumps(manifest, indent=2, ensure_ascii=False)
    flat = re.sub(
        r"\[\s+([-\d.,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text
    )
    return flat + "\n"


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    checks = record.get("checks", {})
    return {"bytes": record["bytes"], "types": record["tensor_types"], **checks.get("summary", {})}


if __name__ == "__main__":
    sys.exit(main())

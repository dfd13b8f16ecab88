"""Tiny GGUF files of every architecture, made by llama.cpp's own converter and quantizer.

    python tests/models/gguf_files/make.py --venv PATH [--only NAME ...] [--work DIR] [--no-check]

Run from the repository root in the project's venv. PATH is the llama.cpp venv that
``benchmarks/llama_cpp_venv.sh`` builds (default ``benchmarks/results/llama-cpp-venv``): its
python has ``llama_cpp``, torch, transformers, sentencepiece (and protobuf, needed only to
retrain the committed SentencePiece tokenizers with ``--retrain-spm``), and the sdist's
``vendor/llama.cpp`` (``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py``) lies in
``<venv>/src``. Nothing of llama.cpp is edited; ``llama_tools.py`` drives it.

For each fixture of ``fixtures.py``: the source checkpoint is made by
``tandem.core.testing.make_model`` (the architecture's tiny test config, with the overrides
listed and explained there), then edited as the manifest records (see
``tandem.core.testing.gguf_fixtures``); the converter writes ``NAME-f32.gguf`` and the
quantizer (or the converter's own ``--outtype q8_0 / f16 / bf16``) writes each of the
fixture's presets, ``NAME-PRESET.gguf`` (one source may have several: ``llama-presets`` has
the presets people pick, Q2_K to Q8_0, F16 and BF16).
``manifest.json`` says, for every file, its source (exact ``make_model`` arguments and edits),
GGUF architecture, format, tensor types, size and digest, and what the checks found: whether
llama.cpp loads and runs it, whether its tokenizer and greedy tokens equal the checkpoint's
under transformers, and whether transformers' own GGUF loader reads it.

The BPE test tokenizer has no pre-tokenizer hash that the converter knows; ``llama_tools.py``
names it ``gpt-2`` (the same split) and the checks compare llama.cpp's tokens with ours. Gemma 2
and Phi-3 are converted only with a SentencePiece ``tokenizer.model`` (their converters have no
BPE path for our tokenizer class), so those two carry SentencePiece vocabularies trained here on
the same corpus (``tokenizers/``): Phi-3's with a dummy prefix (Llama style, llama.cpp adds the
space), Gemma 2's without (its converter writes ``add_space_prefix = false``).

The fixtures, their overrides and the reason for each are in ``fixtures.py``.
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
from pathlib import Path
from typing import Any

from fixtures import FIXTURES, SPM_VOCAB, Fixture

from tandem.core.testing.gguf_fixtures import MANIFEST, build_source
from tandem.core.testing.tokenizer import CHAT_TEMPLATE, corpus

HERE = Path(__file__).resolve().parent
TOOLS = HERE / "llama_tools.py"


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
    for preset in fx.presets:
        if preset.startswith("convert:"):
            outtype = preset.split(":", 1)[1]
            quant = work / f"{name}-{outtype}.gguf"
            tool(venv, "convert", str(hf_dir), str(quant), outtype, "gpt-2")
            made[quant] = f"convert_hf_to_gguf --outtype {outtype}"
        else:
            quant = work / f"{name}-{preset.lower()}.gguf"
            tool(venv, "quantize", str(f32), str(quant), preset)
            made[quant] = f"llama_model_quantize(f32 file) {preset}"
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

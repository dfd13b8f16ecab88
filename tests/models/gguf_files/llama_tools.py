"""The llama.cpp side of ``make.py``: run inside the llama.cpp venv, one subcommand per call.

    convert HF_DIR OUT OUTTYPE PRE    the vendored converter, unchanged
    quantize SRC DST FTYPE            llama.cpp's quantizer (ftype name, e.g. Q4_K_M)
    spm CORPUS OUT PREFIX VOCAB CFG   a SentencePiece BPE model and the HF files made from it
    inspect GGUF                      metadata and tensor types, as JSON
    run GGUF REQUEST                  llama.cpp's tokens, last logits and greedy tokens

``convert`` drives ``convert_hf_to_gguf.py`` in this process without editing it. Its BPE
vocabulary step names the pre-tokenizer by hashing the tokens of a fixed text, and a locally
trained tokenizer has no known hash; when (and only when) the hash is unknown, PRE is used
instead. ``make.py`` passes ``gpt-2``: llama.cpp's split for byte-level BPE with the GPT-2
regex and no prefix space, which is what the test tokenizer does, and ``make.py`` checks that
llama.cpp's tokens equal the tokenizer's on sample texts. Every result goes to stdout as JSON.
"""

from __future__ import annotations

import io
import json
import runpy
import sys
from pathlib import Path
from typing import Any


def _llama_cpp_dir() -> Path:
    here = Path(sys.executable).resolve().parent.parent  # <venv>/bin/python -> <venv>
    for base in (here, Path(sys.prefix)):
        found = base / "src" / "vendor" / "llama.cpp"
        if (found / "convert_hf_to_gguf.py").is_file():
            return found
    raise SystemExit(f"no src/vendor/llama.cpp/convert_hf_to_gguf.py under {sys.prefix}")


def convert(hf_dir: str, out: str, outtype: str, pre: str) -> dict[str, Any]:
    root = _llama_cpp_dir()
    sys.path[:0] = [str(root), str(root / "gguf-py")]
    from conversion import base

    identify = base.TextModel.get_vocab_base_pre
    chosen: dict[str, str] = {}

    def get_vocab_base_pre(self: Any, tokenizer: Any) -> str:
        try:
            name = identify(self, tokenizer)
            chosen["pre"], chosen["how"] = name, "hash"
        except NotImplementedError:
            name = pre
            chosen["pre"], chosen["how"] = name, "forced"
        return name

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    # general.name is fixed: llama.cpp keys vocabulary quirks on it (a name containing "phi3"
    # requires Phi-3's <|endoftext|> token, src/llama-vocab.cpp)
    sys.argv = [str(root / "convert_hf_to_gguf.py"), hf_dir, "--outtype", outtype, "--outfile", out]
    sys.argv += ["--model-name", "tandem-tiny"]
    runpy.run_path(str(root / "convert_hf_to_gguf.py"), run_name="__main__")
    return {"pre_tokenizer": chosen or None}


def quantize(src: str, dst: str, ftype: str) -> dict[str, Any]:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({src}, {ftype}) returned {rc}")
    return {"ftype": ftype}


def train_spm(corpus: str, out_dir: str, prefix: str, vocab: str, config: str) -> dict[str, Any]:
    """Llama-style ids (unk 0, bos 1, eos 2, pad 3), byte fallback, one thread: deterministic.

    ``config`` is a JSON file of tokenizer_config.json fields (special tokens, chat template).
    """
    import sentencepiece as spm

    lines = json.loads(Path(corpus).read_text(encoding="utf-8"))
    config = json.loads(Path(config).read_text(encoding="utf-8"))
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=int(vocab),
        model_type="bpe",
        byte_fallback=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=3,
        pad_piece="<pad>",
        add_dummy_prefix=prefix == "1",
        num_threads=1,
        character_coverage=0.9995,
        split_digits=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        allow_whitespace_only_pieces=True,
        minloglevel=2,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.model").write_bytes(buf.getvalue())
    return _hf_files(out, prefix == "1", config, lines)


def _hf_files(out: Path, prefix: bool, config: dict[str, Any], lines: list[str]) -> dict[str, Any]:
    """tokenizer.json and its config, converted by transformers from tokenizer.model."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    settings = {
        "tokenizer_class": "LlamaTokenizer",
        "add_prefix_space": prefix,
        "legacy": False,
        **config,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(out)
    tok.save_pretrained(out)
    reloaded = AutoTokenizer.from_pretrained(out)
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    differ = [t for t in lines if reloaded.encode(t) != [1, *sp.encode(t)]]
    return {
        "class": type(reloaded).__name__,
        "lines": len(lines),
        "differ_from_sentencepiece": differ,
    }


def inspect(path: str) -> dict[str, Any]:
    root = _llama_cpp_dir()
    sys.path[:0] = [str(root / "gguf-py")]
    import gguf

    reader = gguf.GGUFReader(path)
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            continue
        value = field.contents()
        if isinstance(value, list) and len(value) > 16:
            value = f"[{len(value)} items]"
        meta[key] = value
    tensors = {t.name: [t.tensor_type.name, [int(n) for n in t.shape]] for t in reader.tensors}
    return {"metadata": meta, "tensors": tensors}


def run(path: str, request: str) -> dict[str, Any]:
    """Load with llama_cpp.Llama; tokenize texts; last-position logits and greedy tokens."""
    import llama_cpp
    import numpy as np

    req = json.loads(Path(request).read_text(encoding="utf-8"))
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, logits_all=True, verbose=False, seed=0)
    tokens = [llm.tokenize(t.encode(), add_bos=True, special=False) for t in req["texts"]]
    results = []
    for prompt in req["prompts"]:
        llm.reset()
        llm.eval(prompt)
        last = np.asarray(llm.scores[len(prompt) - 1], dtype=np.float64)
        greedy = []
        for tok in llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0, min_p=0.0):
            greedy.append(int(tok))
            if len(greedy) == req["new_tokens"]:
                break
        results.append({"last_logits": last.tolist(), "greedy": greedy})
    return {"tokens": tokens, "prompts": results}


COMMANDS = {
    "convert": convert,
    "quantize": quantize,
    "spm": train_spm,
    "inspect": inspect,
    "run": run,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        raise SystemExit(f"usage: llama_tools.py {{{','.join(COMMANDS)}}} ARGS...")
    result = COMMANDS[sys.argv[1]](*sys.argv[2:])
    sys.stdout.flush()
    print("\n" + json.dumps(result))

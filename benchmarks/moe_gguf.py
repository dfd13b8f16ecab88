"""A mixture-of-experts GGUF file with its experts kept in their blocks
(``quantization="gguf"``) beside the same file dequantized to float32: memory and decode
tokens/s, in the same run.

    python benchmarks/moe_gguf.py --llama-cpp-venv benchmarks/results/llama-cpp-venv \\
        [--ftype Q4_K_M] [--batches 1 8] [--context 128] [--rounds 3] [--threads N]

The model is Mixtral-shaped as in ``moe_decode.py`` (hidden 512, 8 layers, 8 experts of
intermediate 768, top-2), made here, converted by llama.cpp's converter and quantized by
its quantizer (``--ftype``; made once under ``$TANDEM_CACHE_DIR/gguf-moe-bench``). Each
form loads in a child process of its own, the two alternating each round; a child reports
its resident memory grown by loading (RSS after the load minus before it) and the best
decode step of each batch (one forward through the paged cache, every sequence at
``--context`` tokens, plus its logits). Prints both forms and the ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SHAPE = {"intermediate_size": 768, "num_local_experts": 8, "num_experts_per_tok": 2}


def gguf_file(venv: Path, ftype: str) -> Path:
    from tandem.core import envs
    from tandem.core.testing import llama_cpp, make_model

    hf = make_model(size="small", arch="mixtral", sliding_window=None, **SHAPE)
    root = Path(envs.TANDEM_CACHE_DIR) / "gguf-moe-bench"
    root.mkdir(parents=True, exist_ok=True)
    f32, out = root / f"{hf.name}-F32.gguf", root / f"{hf.name}-{ftype}.gguf"
    if not out.is_file():
        if not f32.is_file():
            llama_cpp.convert(venv, hf, f32)
        llama_cpp.quantize(venv, f32, out, ftype)
    return out


def child(path: str, form: str, batches: list[int], context: int, seconds: float) -> None:
    """Load ``path`` as ``form`` (kept / float), then time decode steps; prints JSON."""
    import psutil
    import torch
    from moe_decode import best_ms, decode_step

    from tandem.core.engine.loader import load_model

    torch.set_grad_enabled(False)
    before = psutil.Process().memory_info().rss
    model = load_model(path, dtype=torch.float32, quantization="gguf" if form == "kept" else None)
    grown = psutil.Process().memory_info().rss - before
    ms = {b: best_ms(decode_step(model, b, context), seconds) for b in batches}
    print(json.dumps({"rss_mb": grown / 2**20, "ms": ms}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp-venv", required=True, metavar="DIR")
    parser.add_argument("--ftype", default="Q4_K_M", help="llama.cpp's file type")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="per batch, form and round")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--child", nargs=2, metavar=("PATH", "FORM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    if args.child:
        child(args.child[0], args.child[1], args.batches, args.context, args.seconds)
        return
    path = gguf_file(Path(args.llama_cpp_venv), args.ftype)
    print(f"{path.name}: {path.stat().st_size / 2**20:.1f} MB")
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for form in ("kept", "float"):
            cmd = [sys.executable, __file__, "--llama-cpp-venv", args.llama_cpp_venv]
            cmd += ["--child", str(path), form, "--context", str(args.context)]
            cmd += ["--seconds", str(args.seconds), "--batches", *map(str, args.batches)]
            if args.threads is not None:
                cmd += ["--threads", str(args.threads)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            seen = best.setdefault(form, {"rss_mb": got["rss_mb"], "ms": {}})
            seen["rss_mb"] = min(seen["rss_mb"], got["rss_mb"])
            for b, ms in got["ms"].items():
                seen["ms"][b] = min(seen["ms"].get(b, float("inf")), ms)
    kept, floats = best["kept"], best["float"]
    print(f"memory grown at load: kept {kept['rss_mb']:.0f} MB, float {floats['rss_mb']:.0f} MB")
    heads = ("batch", "kept ms", "float ms", "kept tok/s", "float tok/s", "speedup")
    print("".join(f"{h:>{w}}" for h, w in zip(heads, (5, 10, 10, 12, 13, 9))))
    for b in map(str, args.batches):
        k, f = kept["ms"][b], floats["ms"][b]
        rates = f"{int(b) / k * 1e3:>12.0f}{int(b) / f * 1e3:>13.0f}"
        print(f"{b:>5}{k:>10.2f}{f:>10.2f}{rates}{f / k:>8.2f}x")


if __name__ == "__main__":
    main()

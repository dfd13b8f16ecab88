"""The GGUF decode kernel (M = 1..4) against itself as committed at a git ref, same run.

    python benchmarks/gguf_decode.py [--baseline main] [--formats Q8_0 Q4_1 ...]
        [--shape 576,1536,30,49152] [--threads 2] [--ms 1,4] [--rounds 5]

The GGUF C sources of ``--baseline`` (every ``native/*gguf*`` file at that ref) are built
into a library beside the working tree's, with the same flags. Every linear layer of the
shape (as :func:`linear.shapes` lists them) is kept in each format and the whole set is
called through both libraries in turn, rounds alternating, so a busy spell of a shared
machine falls on both; each side's best pass counts. Prints per format and M: weight MB,
ms per pass and GB/s of each side, the speed ratio, and the largest difference of their
outputs relative to the output's scale (sum order only: ~1e-6). The calls go straight to
the C entries, so this is the kernels' own time (``linear.py --gguf`` adds the op's
Python side).
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from linear import shapes

from tandem.kernels.gguf_blocks import BY_NAME, quantize
from tandem.kernels.native import builder
from tandem.kernels.native.loader import library

NATIVE = "kernels/src/tandem/kernels/native"


def build_ref(ref: str, into: Path) -> Path:
    """The GGUF kernels as committed at ``ref``, built into ``into``/ref.so."""
    root = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    ).stdout.strip()
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{ref}:{NATIVE}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    ).stdout.split()
    files = [n for n in names if "gguf" in n or n.endswith(".h")]
    for name in files:
        text = subprocess.run(
            ["git", "show", f"{ref}:{NATIVE}/{name}"], capture_output=True, check=True, cwd=root
        ).stdout
        (into / name).write_bytes(text)
    sources = [str(into / n) for n in files if n.endswith(".c")]
    out = into / "ref.so"
    cmd = [builder.find_compiler(), *builder.FLAGS, *sources, "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return out


def bind(lib: ctypes.CDLL) -> ctypes._CFuncPtr:
    fn = lib.tandem_linear_gguf
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    fn.argtypes += [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", metavar="REF")
    parser.add_argument("--formats", nargs="+", default=["Q8_0", "Q4_0", "Q4_1", "Q5_0"])
    parser.add_argument("--shape", default="576,1536,30,49152", metavar="H,I,L,V")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ms", default="1", metavar="M,M,...")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bad = [f for f in args.formats if f not in BY_NAME]
    if bad:
        raise SystemExit(f"--formats must be among {sorted(BY_NAME)}, got {bad}")
    ms = [int(v) for v in args.ms.split(",")]
    if any(m < 1 or m > 15 for m in ms):
        raise SystemExit(f"--ms must be decode row counts in 1..15, got {args.ms}")
    torch.set_num_threads(args.threads)
    h, inter, layers, vocab = (int(v) for v in args.shape.split(","))
    cfg = SimpleNamespace(hidden_size=h, num_attention_heads=h // 64, head_dim=64)
    cfg.__dict__.update(num_key_value_heads=max(1, h // 256), intermediate_size=inter)
    cfg.__dict__.update(num_hidden_layers=layers, vocab_size=vocab)
    ours = library()
    if ours is None:
        raise SystemExit("the native kernels are not available here")
    with tempfile.TemporaryDirectory() as tmp:
        ref = ctypes.CDLL(str(build_ref(args.baseline, Path(tmp))))
    fns = {args.baseline: bind(ref), "tree": ours.tandem_linear_gguf}
    gen = torch.Generator().manual_seed(0)
    floats = [(torch.randn(n, k, generator=gen) * k**-0.5, k) for k, n in shapes(cfg)]
    print(f"{len(floats)} linear layers, threads={args.threads}, baseline={args.baseline}")
    print(
        f"{'M':>3} {'format':<7}{'MB':>8}{'ref ms':>9}{'GB/s':>7}{'tree ms':>9}{'GB/s':>7}"
        f"{'speedup':>9}{'max diff':>10}"
    )
    for name in args.formats:
        qs = [quantize(w, BY_NAME[name]) for w, _ in floats]
        size = sum(q.data.nbytes for q in qs)
        for m in ms:
            xs = {k: torch.randn(m, k, generator=gen) for k, _ in shapes(cfg)}
            outs = {side: [torch.empty(m, q.n) for q in qs] for side in fns}
            calls = {
                side: [
                    (q.qtype, xs[q.k].data_ptr(), m, q.k, q.data.data_ptr(), q.n, o.data_ptr())
                    for q, o in zip(qs, outs[side])
                ]
                for side in fns
            }
            best = dict.fromkeys(fns, float("inf"))
            for _ in range(args.rounds):
                for side, fn in fns.items():
                    for _ in range(4):
                        start = time.perf_counter()
                        for call in calls[side]:
                            fn(*call)
                        best[side] = min(best[side], time.perf_counter() - start)
            diff = max(
                float((a - b).abs().max() / (b.abs().max() + 1e-30))
                for a, b in zip(outs["tree"], outs[args.baseline])
            )
            t_ref, t_new = best[args.baseline], best["tree"]
            print(
                f"{m:>3} {name:<7}{size / 1e6:8.1f}{t_ref * 1e3:9.2f}{size / t_ref / 1e9:7.1f}"
                f"{t_new * 1e3:9.2f}{size / t_new / 1e9:7.1f}{t_ref / t_new:9.2f}{diff:10.1e}",
                flush=True,
            )


if __name__ == "__main__":
    main()

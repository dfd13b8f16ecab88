"""The decode linear kernels (M = 1..4), GGUF blocks, fp32 and int8, against themselves as
committed at a git ref, same run.

    python benchmarks/gguf_decode.py [--baseline main] [--formats Q8_0 Q4_1 F16 Q2_K ...]
        [--shape 576,1536,30,49152] [--threads 2] [--ms 1,4] [--rounds 5] [--no-avx512]

The linear C sources of ``--baseline`` (every ``native/*gguf*`` file, the fp32 and the
int8 kernel, at that ref) are built into a library beside the working tree's, with the
same flags (``--no-avx512``: both built without AVX-512, the working tree's too, so that
the AVX2 kernels run here). Every linear layer of the
shape (as :func:`linear.shapes` lists them) is kept in each format and the whole set is
called through both libraries in turn, rounds alternating, so a busy spell of a shared
machine falls on both; each side's best pass counts. Prints per format and M: weight MB,
ms per pass and GB/s of each side, the speed ratio, the largest difference of their
outputs relative to the output's scale (sum order only: ~1e-6), and the speed as a ratio
to fp32 weights (the packed C kernel, ``linear_f32.c``, a line of its own per M, as is
the int8 kernel's, ``linear_i8.c``, on the weights rounded per channel). A format
the baseline has no kernel for (it answers -1: F16, BF16, Q2_K, Q3_K before they were
added) shows ``-`` on the baseline's side. The calls go straight to the C entries, so this
is the kernels' own time (``linear.py --gguf`` adds the op's Python side).
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from linear import shapes

from tandem.kernels.gguf_blocks import BY_NAME, block_values, quantize
from tandem.kernels.native import builder, linear_f32
from tandem.kernels.native.loader import library
from tandem.kernels.ops.linear_int8 import Int8Weight

NATIVE = "kernels/src/tandem/kernels/native"
FLOAT_SOURCES = ("linear_f32.c", "linear_i8.c", "quantize.c")  # fp32, int8 and its rounding


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], capture_output=True, check=True, cwd=cwd).stdout.decode()


def build(ref: str | None, into: Path, flags: tuple[str, ...] = ()) -> Path:
    """The GGUF kernels as committed at ``ref`` (None: as in the working tree), built into
    ``into``/lib.so with the native flags and ``flags``."""
    root = Path(git("rev-parse", "--show-toplevel").strip())
    if ref is None:
        names = [p.name for p in (root / NATIVE).iterdir()]
    else:
        names = git("ls-tree", "--name-only", f"{ref}:{NATIVE}", cwd=root).split()
    files = [n for n in names if "gguf" in n or n.endswith(".h") or n in FLOAT_SOURCES]
    into.mkdir(parents=True, exist_ok=True)
    for name in files:
        if ref is None:
            text = (root / NATIVE / name).read_text()
        else:
            text = git("show", f"{ref}:{NATIVE}/{name}", cwd=root)
        (into / name).write_text(text)
    sources = [str(into / n) for n in files if n.endswith(".c")]
    out = into / "lib.so"
    cmd = [builder.find_compiler(), *builder.FLAGS, *flags, *sources, "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return out


def bind(lib: ctypes.CDLL) -> ctypes._CFuncPtr:
    lib.tandem_gguf_block_bytes.restype = ctypes.c_int64
    lib.tandem_gguf_block_bytes.argtypes = [ctypes.c_int]
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.tandem_linear_f32.restype = ctypes.c_int
    lib.tandem_linear_f32.argtypes = [ptr, i64, i64, ptr, ptr, i64, ptr]
    lib.tandem_linear_i8.restype = i64
    lib.tandem_linear_i8.argtypes = [ptr, i64, i64, ptr, ptr, ptr, ptr, i64, i64]
    lib.tandem_linear_i8.argtypes += [ctypes.c_float, ptr]
    fn = lib.tandem_linear_gguf
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ptr, i64, i64, ptr, i64, ptr]
    return fn


def timed(runs: dict[str, Any], calls: dict[str, list[tuple]], rounds: int) -> dict[str, float]:
    """Each side's best pass over its calls, the sides in turn (a busy spell hits them all)."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for side, fn in runs.items():
            for _ in range(4):
                start = time.perf_counter()
                for call in calls[side]:
                    fn(*call)
                best[side] = min(best[side], time.perf_counter() - start)
    return best


def f32_call(p: linear_f32.PackedF32, x: torch.Tensor, out: torch.Tensor) -> tuple:
    """tandem_linear_f32's arguments for x [M, K] through the packed weight p."""
    return (x.data_ptr(), x.shape[0], p.k, p.panels.data_ptr(), None, p.n, out.data_ptr())


def int8_call(q: Int8Weight, x: torch.Tensor, out: torch.Tensor) -> tuple:
    """tandem_linear_i8's arguments for x [M, K] through q (outlier bound 6x rms)."""
    p = q.native
    return (x.data_ptr(), x.shape[0], p.k, p.blocks.data_ptr(), p.wsum.data_ptr(),
            q.scale.data_ptr(), None, p.n, p.kp, 6.0, out.data_ptr())  # fmt: skip


def float_rows(libs: dict[str, ctypes.CDLL], floats, packs, ms, rounds, gen, vnni) -> None:
    """fp32 (``packs``, the panels main made) and int8 (rounded per channel; where the
    libraries were built with AVX-512, ``vnni``) through both libraries."""
    int8 = [Int8Weight.pack(w) for w, _ in floats] if vnni else []
    if any(q is None or q.native is None for q in int8) or not vnni:
        print("int8: no C kernel here (AVX-512 VNNI)")
        int8 = []
    for name, size in (("fp32", 4), ("int8", 1))[: 2 if int8 else 1]:
        total = sum(w.numel() * size for w, _ in floats)
        for m in ms:
            xs = {k: torch.randn(m, k, generator=gen) for _, k in floats}
            outs = {side: [torch.empty(m, w.shape[0]) for w, _ in floats] for side in libs}
            calls: dict[str, list[tuple]] = {}
            for side in libs:
                if name == "fp32":
                    calls[side] = [f32_call(p, xs[p.k], o) for p, o in zip(packs, outs[side])]
                else:
                    pairs = zip(int8, outs[side])
                    calls[side] = [int8_call(q, xs[q.native.k], o) for q, o in pairs]
            entry = "tandem_linear_f32" if name == "fp32" else "tandem_linear_i8"
            best = timed({side: getattr(lib, entry) for side, lib in libs.items()}, calls, rounds)
            ref = next(iter(libs))
            diff = max(
                float((a - b).abs().max() / (b.abs().max() + 1e-30))
                for a, b in zip(outs["tree"], outs[ref])
            )
            print(
                f"{m:>3} {name:<7}{total / 1e6:8.1f}{best[ref] * 1e3:9.2f}"
                f"{total / best[ref] / 1e9:7.1f}{best['tree'] * 1e3:9.2f}"
                f"{total / best['tree'] / 1e9:7.1f}{best[ref] / best['tree']:9.2f}{diff:10.1e}"
                f"{'-':>8}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", metavar="REF")
    parser.add_argument("--formats", nargs="+", default=["Q8_0", "Q4_0", "Q4_1", "F16", "BF16"])
    parser.add_argument("--shape", default="576,1536,30,49152", metavar="H,I,L,V")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ms", default="1", metavar="M,M,...")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--no-avx512",
        action="store_true",
        help="both sides built without AVX-512: the AVX2 kernels of machines that lack it",
    )
    args = parser.parse_args()
    bad = [f for f in args.formats if f not in BY_NAME]
    if bad:
        raise SystemExit(f"--formats must be among {sorted(BY_NAME)}, got {bad}")
    ms = [int(v) for v in args.ms.split(",")]
    if any(m < 1 or m > 15 for m in ms):
        raise SystemExit(f"--ms must be decode row counts in 1..15, got {args.ms}")
    torch.set_num_threads(args.threads)
    h, inter, layers, vocab = (int(v) for v in args.shape.split(","))
    for name in args.formats:
        size = block_values(BY_NAME[name])
        if h % size or inter % size:
            raise SystemExit(
                f"--formats {name} needs hidden and intermediate sizes that are multiples of "
                f"{size}, got --shape {args.shape} (try --shape 2048,5632,2,32000)"
            )
    cfg = SimpleNamespace(hidden_size=h, num_attention_heads=h // 64, head_dim=64)
    cfg.__dict__.update(num_key_value_heads=max(1, h // 256), intermediate_size=inter)
    cfg.__dict__.update(num_hidden_layers=layers, vocab_size=vocab)
    ours = library()
    if ours is None:
        raise SystemExit("the native kernels are not available here")
    flags = ("-mno-avx512f",) if args.no_avx512 else ()
    with tempfile.TemporaryDirectory() as tmp:
        ref = ctypes.CDLL(str(build(args.baseline, Path(tmp) / "ref", flags)))
        if flags:  # the working tree's kernels built the same way
            ours = ctypes.CDLL(str(build(None, Path(tmp) / "tree", flags)))
            bind(ours)
    fns = {args.baseline: bind(ref), "tree": ours.tandem_linear_gguf}
    libs = {args.baseline: ref, "tree": ours}
    gen = torch.Generator().manual_seed(0)
    floats = [(torch.randn(n, k, generator=gen) * k**-0.5, k) for k, n in shapes(cfg)]
    packs = [linear_f32.pack(w) for w, _ in floats]
    if any(p is None for p in packs):
        raise SystemExit("the fp32 C kernel is not available here (no AVX2 / AVX-512)")
    print(f"{len(floats)} linear layers, threads={args.threads}, baseline={args.baseline}")
    print(
        f"{'M':>3} {'format':<7}{'MB':>8}{'ref ms':>9}{'GB/s':>7}{'tree ms':>9}{'GB/s':>7}"
        f"{'speedup':>9}{'max diff':>10}{'x fp32':>8}"
    )
    for name in args.formats:
        qs = [quantize(w, BY_NAME[name]) for w, _ in floats]
        size = sum(q.data.nbytes for q in qs)
        known = ref.tandem_gguf_block_bytes(BY_NAME[name]) > 0
        sides = {side: fn for side, fn in fns.items() if known or side == "tree"}
        for m in ms:
            xs = {k: torch.randn(m, k, generator=gen) for k, _ in shapes(cfg)}
            outs = {side: [torch.empty(m, q.n) for q in qs] for side in sides}
            calls = {
                side: [
                    (q.qtype, xs[q.k].data_ptr(), m, q.k, q.data.data_ptr(), q.n, o.data_ptr())
                    for q, o in zip(qs, outs[side])
                ]
                for side in sides
            }
            f32 = [torch.empty(m, p.n) for p in packs]
            calls["fp32"] = [f32_call(p, xs[p.k], o) for p, o in zip(packs, f32)]
            best = timed({**sides, "fp32": ours.tandem_linear_f32}, calls, args.rounds)
            t_new, t_f32 = best["tree"], best["fp32"]
            if known:
                diff = max(
                    float((a - b).abs().max() / (b.abs().max() + 1e-30))
                    for a, b in zip(outs["tree"], outs[args.baseline])
                )
                t_ref = best[args.baseline]
                ref_cols = f"{t_ref * 1e3:9.2f}{size / t_ref / 1e9:7.1f}"
                vs_ref = f"{t_ref / t_new:9.2f}{diff:10.1e}"
            else:
                ref_cols, vs_ref = f"{'-':>9}{'-':>7}", f"{'-':>9}{'-':>10}"
            print(
                f"{m:>3} {name:<7}{size / 1e6:8.1f}{ref_cols}{t_new * 1e3:9.2f}"
                f"{size / t_new / 1e9:7.1f}{vs_ref}{t_f32 / t_new:8.2f}",
                flush=True,
            )
    float_rows(libs, floats, packs, ms, args.rounds, gen, vnni=not flags)


if __name__ == "__main__":
    main()

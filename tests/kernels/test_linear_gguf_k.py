"""The GGUF kernel's parts beyond the per-format op tests (``test_linear_gguf.py``): a
stack of formats, and the plain-C paths (decode and prefill) that machines without AVX2
take, and the AVX2 ones that machines without AVX-512 take."""

from __future__ import annotations

import ctypes
import platform
import subprocess
from pathlib import Path

import pytest
import torch

from tandem.kernels.gguf_blocks import (
    FLOAT16,
    FORMATS,
    QuantStack,
    block_values,
    dequantize,
    quantize,
)
from tandem.kernels.ops.gguf_linear import linear_gguf, reference


def test_a_stack_of_formats_is_its_parts_side_by_side() -> None:
    g = torch.Generator().manual_seed(0)
    parts = (quantize(torch.randn(8, 256, generator=g), 12), quantize(torch.randn(4, 256), 14))
    stack = QuantStack(parts)
    assert (stack.n, stack.k, stack.name) == (12, 256, "Q4_K+Q6_K")
    x = torch.randn(3, 256, generator=g)
    got = linear_gguf(x, stack)
    torch.testing.assert_close(got, torch.cat([linear_gguf(x, p) for p in parts], dim=-1))
    want = torch.cat([reference(x, p.data, p.qtype, p.k) for p in parts], dim=-1)
    assert (got - want).norm() / want.norm() < 0.01  # the activations' int8 rounding
    with pytest.raises(ValueError, match="parts must be one or more QuantWeights of the same k"):
        QuantStack((parts[0], quantize(torch.randn(2, 512), 12)))


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flags")
@pytest.mark.parametrize(
    "isa", [("-mno-avx2", "-mno-fma", "-mno-f16c"), ("-mno-avx512f",)], ids=["plain", "avx2"]
)
def test_narrower_builds_match_the_reference(tmp_path, isa) -> None:
    """The kernels built without AVX2 / FMA / F16C (the scalar loops of every format), and
    without AVX-512 (the AVX2 loops, where this machine would take AVX-512's)."""
    from tandem.kernels.native import builder, contract

    here = Path(builder.__file__).parent
    lib_path = tmp_path / "narrow.so"
    flags = [*builder.FLAGS, *builder.CONTRACT_FLAGS, *isa]
    sources = [str(here / name) for name in builder.SOURCES if "gguf" in name]
    cmd = [builder.find_compiler(), *flags, *sources, "-o", str(lib_path)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    names = ("tandem_linear_gguf", "tandem_linear_gguf_f32", "tandem_linear_gguf_simd")
    lib = contract.bind(ctypes.CDLL(str(lib_path)), names)
    assert lib.tandem_linear_gguf_simd() == (len(isa) == 1)
    g = torch.Generator().manual_seed(1)
    for qtype in sorted(FORMATS):
        # 32-value blocks: a pair and an odd last block; F16 / BF16: any k (here past L1)
        k = 3 * block_values(qtype) if qtype not in FLOAT16 else 1100
        qw = quantize(torch.randn(11, k, generator=g), qtype)
        for m in (1, 3, 6):
            x = torch.randn(m, k, generator=g)
            out = torch.empty(m, 11)
            done = lib.tandem_linear_gguf(
                qtype, x.data_ptr(), m, k, qw.data.data_ptr(), 11, out.data_ptr()
            )
            assert done == 0
            want = reference(x, qw.data, qtype, k)
            w = dequantize(qw.data, qtype, k).abs()
            if qtype in FLOAT16:  # x as it is: fp32 sum order only
                bound = 2 * k * 2**-24 * (x.abs() @ w.t()) + 1e-30
            else:  # x rounded to int8 per 32 values: half a step times |W|, plus rounding
                half_step = x.reshape(m, -1, 32).abs().amax(-1, keepdim=True).expand(m, -1, 32)
                bound = (half_step.reshape(m, k) / 254) @ w.t() * 1.01 + 1e-4
            assert ((out - want).abs() <= bound).all(), FORMATS[qtype][0]
        # the prefill path on the last x (6 rows): fp32 tiles, x rounded as the rows round it
        tiles = torch.empty(6, 11)
        done = lib.tandem_linear_gguf_f32(
            qtype, x.data_ptr(), 6, k, qw.data.data_ptr(), 11, tiles.data_ptr()
        )
        assert done == 0
        torch.testing.assert_close(tiles, out, rtol=1e-4, atol=1e-4)

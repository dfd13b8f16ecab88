"""Tensor-parallel ranks decode through the one-call C stack (each rank its shard: its
heads, latent attention's among them, its MLP columns, its run of experts; the sums after
o and down, or after the experts, called back from C) and give the tokens and logits of
the modules, bit for bit (gloo, one process per rank)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tandem.kernels.native import decode_stack as native

from .test_sharded_forward import run_ranks

RANK = Path(__file__).with_name("rank_decode.py")
# pre norms with q/k/v biases; sandwich norms, GeGLU and soft caps; q/k norms per head;
# experts, each rank its run of them (with a gated shared expert; q/k norms); latent
# attention, each rank its heads (q through its own latent; q from x with biases), with
# DeepSeek-V3's routing
ARCHS = [
    *("qwen2", "gemma2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe"),
    *("deepseek_v3", "deepseek_v3_plain"),
]

pytestmark = pytest.mark.skipif(not native.available(), reason="the C kernels did not build")


def test_two_ranks_decode_through_the_c_stack_as_through_the_modules(tmp_path: Path) -> None:
    run_ranks(2, ARCHS, tmp_path, dtype=None, script=RANK)
    for arch in ARCHS:
        runs = torch.load(tmp_path / f"{arch}.pt")
        (c_tokens, c_logits, c_line), (m_tokens, m_logits, m_line) = runs["c"], runs["modules"]
        assert "on cpu x2 ranks" in c_line and "decode c (" in c_line, (arch, c_line)
        assert "rank 0 of 2, a sum over the ranks after o and down" in c_line, (arch, c_line)
        assert "decode modules (decode_stack='modules')" in m_line, (arch, m_line)
        assert torch.equal(c_tokens, m_tokens), arch
        assert torch.equal(c_logits, m_logits), (arch, (c_logits - m_logits).abs().max())


def test_the_c_stack_calls_the_sum_after_each_block_and_raises_what_it_raises(
    tiny_model: Path,
) -> None:
    """In one process, a group whose sum counts its calls (and leaves x as it is): two a
    layer, the output that of a stack without a group; a sum that fails stops the step
    with its own error."""
    from types import SimpleNamespace

    from tandem.core.engine.loader import load_model
    from tandem.core.kv.cache import allocate_kv_caches
    from tandem.core.layers.attention_metadata import build_metadata
    from tandem.core.layers.kernel_choice import KernelChoice
    from tandem.core.models.decode_stack import DecodeStack
    from tandem.core.parallel.group import CollectiveError

    kernels = KernelChoice(attention="cpu", decode_stack="c")
    model = load_model(str(tiny_model), "cpu", torch.float32, kernels=kernels)
    spec = model.spec
    caches = allocate_kv_caches(spec.num_layers, spec.num_kv_heads, spec.head_dim, 4, 16,
                                torch.float32, "cpu")  # fmt: skip
    with torch.inference_mode():
        prompt = torch.tensor([3, 17, 99, 250, 7])
        model(prompt, torch.arange(5), caches, build_metadata([5], [5], [[0]], 16))
        meta = build_metadata([1], [6], [[0]], 16)
        x = model.model.embed_tokens(torch.tensor([8]))
        calls = []

        def counted(t: torch.Tensor) -> torch.Tensor:
            calls.append(t.shape)
            return t

        def failed(t: torch.Tensor) -> torch.Tensor:
            raise CollectiveError("all_reduce over 2 ranks failed: a peer is gone")

        out = {}
        for name, tp in (
            ("whole", None),
            ("summed", SimpleNamespace(rank=0, size=1, all_reduce=counted)),
        ):
            stack = DecodeStack(model.model, spec, tp)  # type: ignore[arg-type]
            snapshot = [(k.clone(), v.clone()) for k, v in caches]
            out[name] = stack.run(x.clone(), torch.tensor([5]), snapshot, meta)
        assert out["whole"] is not None and out["summed"] is not None
        assert calls == [torch.Size([1, spec.hidden_size])] * (2 * spec.num_layers)
        assert all(torch.equal(a, b) for a, b in zip(out["whole"], out["summed"]))
        stack = DecodeStack(model.model, spec, SimpleNamespace(rank=0, size=2, all_reduce=failed))  # type: ignore[arg-type]
        with pytest.raises(CollectiveError, match="a peer is gone"):
            stack.run(x.clone(), torch.tensor([5]), caches, meta)

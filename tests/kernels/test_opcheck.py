"""torch.library.opcheck on every op: schema, fake (meta) kernel, dispatch under AOT."""

from __future__ import annotations

import pytest
import torch

import tandem.kernels.ops  # noqa: F401  (registers the ops)


def _norm_args():
    x = torch.randn(3, 8)
    return (x, torch.randn(8), 1e-6)


def _fused_args():
    return (torch.randn(3, 8), torch.randn(3, 8), torch.randn(8), 1e-6)


def _rotary_args():
    angles = torch.rand(16, 4)
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1)
    return (torch.tensor([0, 5, 9]), torch.randn(3, 4, 8), torch.randn(3, 2, 8), cache)


def _silu_args():
    return (torch.randn(3, 10),)


def _write_args():
    return (
        torch.randn(3, 2, 8),
        torch.randn(3, 2, 8),
        torch.zeros(4, 4, 2, 8),
        torch.zeros(4, 4, 2, 8),
        torch.tensor([7, -1, 2]),
    )


def _sample_args():
    probs = torch.rand(3, 11).softmax(-1)
    return (probs, torch.tensor([1, 2, 3]), torch.tensor([0, 0, 7]))


SIMPLE = {
    "torch_rms_norm": _norm_args,
    "torch_fused_add_rms_norm": _fused_args,
    "torch_rotary_embedding": _rotary_args,
    "torch_silu_and_mul": _silu_args,
    "torch_gelu_tanh_and_mul": _silu_args,
    "torch_write_kv_cache": _write_args,
    "torch_sample_seeded": _sample_args,
}


@pytest.mark.parametrize("name", sorted(SIMPLE))
def test_opcheck(name):
    torch.library.opcheck(getattr(torch.ops.tandem, name).default, SIMPLE[name]())


def test_opcheck_prefill(paged_case):
    case = paged_case(1, [3, 2], [0, 5], 4, 2, 8, 4, strided_tables=False)
    torch.library.opcheck(torch.ops.tandem.torch_prefill_attention.default, case.prefill_args())


def test_opcheck_decode(paged_case):
    case = paged_case(2, [1, 1, 1], [4, 0, 9], 4, 1, 8, 4, strided_tables=False)
    torch.library.opcheck(torch.ops.tandem.torch_decode_attention.default, case.decode_args())


def test_opcheck_window_and_softcap(paged_case):
    case = paged_case(3, [3, 1], [6, 9], 4, 2, 8, 4, strided_tables=False)
    prefill = torch.ops.tandem.torch_prefill_attention.default
    torch.library.opcheck(prefill, (*case.prefill_args(), 4, 30.0))
    dec = paged_case(4, [1, 1], [6, 9], 4, 2, 8, 4, strided_tables=False)
    decode = torch.ops.tandem.torch_decode_attention.default
    torch.library.opcheck(decode, (*dec.decode_args(), 3, 5.0))


def test_every_registered_op_is_checked():
    from tandem.kernels.ops import registered_op_names

    torch_ops = {n.split("::")[1] for n in registered_op_names() if "::torch_" in n}
    # fused_moe: test_moe.py; latent_*: test_latent.py; linear_gguf: test_linear_gguf.py
    checked_elsewhere = {
        "torch_prefill_attention",
        "torch_decode_attention",
        "torch_fused_moe",
        "torch_latent_prefill",
        "torch_latent_decode",
        "torch_linear_gguf",
    }
    assert torch_ops == set(SIMPLE) | checked_elsewhere

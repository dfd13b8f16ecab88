"""The attention-backend registry, the torch backend, and flash_attn on CUDA."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from tandem.kernels import reference
from tandem.kernels.backends import (
    AttentionBackend,
    available_backends,
    get_backend,
    known_backends,
)

HAS_FLASH = torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


def test_registry_names():
    assert known_backends() == ["torch", "cpu", "flash_attn"]
    assert "torch" in available_backends()
    assert ("flash_attn" in available_backends()) == HAS_FLASH


def test_listing_backends_does_not_import_flash_attn():
    was_loaded = "flash_attn" in sys.modules
    available_backends()
    assert ("flash_attn" in sys.modules) == was_loaded


def test_unknown_backend_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown attention backend 'xformers'.*'torch'"):
        get_backend("xformers")
    with pytest.raises(TypeError, match="backend name must be a str"):
        get_backend(None)


@pytest.mark.skipif(HAS_FLASH, reason="flash_attn is available here")
def test_unavailable_backend_is_refused():
    with pytest.raises(ValueError, match=r"'flash_attn' is not available.*\['torch'"):
        get_backend("flash_attn")


def test_each_call_builds_a_fresh_backend():
    a, b = get_backend("torch"), get_backend("torch")
    assert isinstance(a, AttentionBackend) and a.name == "torch"
    assert a is not b


def test_torch_backend_runs_a_mixed_step(paged_case):
    backend = get_backend("torch")
    case = paged_case(4, [3, 5], [2, 0], 4, 2, 8, 4)
    k_cache, v_cache = torch.zeros_like(case.k_cache), torch.zeros_like(case.v_cache)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    backend.write_kv_cache(case.k, case.v, k_cache, v_cache, case.slot_mapping)
    reference.write_kv_cache(case.k, case.v, want_k, want_v, case.slot_mapping)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    args = (
        case.q,
        case.k,
        case.v,
        case.k_cache,
        case.v_cache,
        case.cu_seqlens_q,
        case.seq_lens,
        case.block_tables,
        case.scale,
    )
    torch.testing.assert_close(backend.prefill(*args), reference.prefill_attention(*args))
    dec = paged_case(5, [1, 1], [6, 2], 4, 2, 8, 4)
    dargs = (dec.q, dec.k_cache, dec.v_cache, dec.seq_lens, dec.block_tables, dec.scale)
    torch.testing.assert_close(backend.decode(*dargs), reference.decode_attention(*dargs))
    assert all(name.startswith("tandem::") for name in backend.op_names())


# ------------------------------------------------------------------ flash_attn on CUDA

needs_flash = pytest.mark.skipif(not HAS_FLASH, reason="needs CUDA and flash_attn")


def _split(case):
    """(CUDA bf16 args, CPU fp32 args holding the same bf16-rounded values)."""
    floats = ("q", "k", "v", "k_cache", "v_cache")
    names = (*floats, "cu_seqlens_q", "seq_lens", "block_tables")
    ref = [
        getattr(case, n).to(torch.bfloat16).float() if n in floats else getattr(case, n)
        for n in names
    ]
    dev = [
        t.to("cuda", torch.bfloat16) if n in floats else t.to("cuda") for n, t in zip(names, ref)
    ]
    return dev, ref


@pytest.mark.gpu
@needs_flash
@pytest.mark.parametrize("heads", [(8, 8), (8, 2), (8, 1)])
def test_flash_attn_matches_reference(paged_case, heads):
    backend = get_backend("flash_attn")
    case = paged_case(7, [5, 300, 1], [0, 40, 600], *heads, 64, 256, strided_tables=False)
    dev, ref = _split(case)
    got = backend.prefill(*dev, case.scale).float().cpu()
    want = reference.prefill_attention(*ref, case.scale)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)

    dec = paged_case(8, [1, 1, 1], [0, 17, 700], *heads, 64, 256, strided_tables=False)
    dev, ref = _split(dec)
    dargs = [0, 3, 4, 6, 7]  # q, k_cache, v_cache, seq_lens, block_tables
    got = backend.decode(*[dev[i] for i in dargs], dec.scale).float().cpu()
    want = reference.decode_attention(*[ref[i] for i in dargs], dec.scale)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    assert "tandem::flash_attn_decode_attention" in backend.op_names()


@pytest.mark.gpu
@needs_flash
def test_flash_attn_refuses_small_blocks(paged_case):
    backend = get_backend("flash_attn")
    dec = paged_case(9, [1], [3], 4, 2, 64, 16, strided_tables=False)
    dev, _ = _split(dec)
    with pytest.raises(ValueError, match="multiple of 256"):
        backend.decode(dev[0], dev[3], dev[4], dev[6], dev[7], dec.scale)


_LAZY_SCRIPT = """
import torch
from tandem.kernels.backends import available_backends, known_backends
from tandem.kernels.backends import flash_attn_backend as fa
from tandem.kernels.ops import registered_op_names

available_backends(); known_backends()
assert not any("flash_attn" in n for n in registered_op_names()), registered_op_names()
assert not hasattr(torch.ops.tandem, "flash_attn_decode_attention")
assert fa._register() is fa._register()
names = registered_op_names()
assert "tandem::flash_attn_prefill_attention" in names, names
assert "tandem::flash_attn_decode_attention" in names, names
assert len(names) == len(set(names))
schema = str(torch.ops.tandem.flash_attn_prefill_attention.default._schema)
assert "float scale" in schema and "!" not in schema, schema
print("ok")
"""


@pytest.mark.slow
def test_flash_attn_ops_register_on_first_use_only():
    """Run in a fresh interpreter: registering ops here would outlive the test."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _LAZY_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ------------------------------------------------------------------ which kernel ran


def _tandem_ops_run(fn) -> set[str]:
    """The ``tandem::`` ops dispatched while ``fn`` runs (the profiler sees every op call)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {event.name for event in prof.events() if event.name.startswith("tandem::")}


def _implementation(op_name: str):
    """The Python function registered as the op's implementation (torch's op table)."""
    custom_ops = pytest.importorskip("torch._library.custom_ops")
    opdef = custom_ops.OPDEFS.get(op_name)
    assert opdef is not None, f"{op_name} is not a torch.library.custom_op"
    return opdef._init_fn


CPU_BACKENDS = [name for name in available_backends() if name != "flash_attn"]


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_each_backend_runs_its_own_kernels(paged_case, name):
    """A call to a backend dispatches only that backend's ops, implemented where it says."""
    backend = get_backend(name)
    own = set(backend.op_names())
    for op_name in own:  # each op's implementation is the kernels package's own function
        fn = _implementation(op_name)
        assert fn.__module__.startswith("tandem.kernels.ops"), (op_name, fn.__module__)
        assert op_name.split("::")[1].startswith(backend.name) or name == "cpu", op_name
    dec = paged_case(5, [1, 1], [6, 2], 4, 2, 8, 4)
    dargs = (dec.q, dec.k_cache, dec.v_cache, dec.seq_lens, dec.block_tables, dec.scale)
    out: list[torch.Tensor] = []
    ran = _tandem_ops_run(lambda: out.append(backend.decode(*dargs)))
    torch.testing.assert_close(out[0], reference.decode_attention(*dargs))
    assert ran <= own, f"{name} ran another backend's ops: {sorted(ran - own)}"
    if name == "torch":
        assert ran == {"tandem::torch_decode_attention"}
    else:  # the C kernel ran: no torch op was dispatched for attention
        assert "tandem::torch_decode_attention" not in ran
    case = paged_case(4, [3, 5], [2, 0], 4, 2, 8, 4)
    k_cache, v_cache = torch.zeros_like(case.k_cache), torch.zeros_like(case.v_cache)
    write = (case.k, case.v, k_cache, v_cache, case.slot_mapping)
    assert _tandem_ops_run(lambda: backend.write_kv_cache(*write)) == {
        "tandem::torch_write_kv_cache"
    }

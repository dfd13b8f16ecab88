"""Op names: one namespace, unique backend-qualified names, duplicates refused."""

from __future__ import annotations

import pytest
import torch

import tandem.kernels
from tandem.kernels.ops import OP_NAMESPACE, registered_op_names
from tandem.kernels.ops.library import define

EXPECTED = {
    "tandem::torch_rms_norm",
    "tandem::torch_fused_add_rms_norm",
    "tandem::torch_rotary_embedding",
    "tandem::torch_silu_and_mul",
    "tandem::torch_write_kv_cache",
    "tandem::torch_prefill_attention",
    "tandem::torch_decode_attention",
    "tandem::torch_sample_seeded",
}


def test_namespace():
    assert OP_NAMESPACE == tandem.kernels.OP_NAMESPACE == "tandem"


def test_registered_names_are_unique_and_resolvable():
    names = registered_op_names()
    assert len(names) == len(set(names))
    assert set(names) >= EXPECTED
    for name in names:
        ns, op = name.split("::")
        assert ns == "tandem"
        assert op.split("_")[0] in {"torch", "flash"}  # backend-qualified
        assert hasattr(torch.ops.tandem, op)


def test_defining_a_taken_name_is_refused():
    with pytest.raises(RuntimeError, match=r"tandem::torch_rms_norm is already registered"):
        define("torch_rms_norm")
    assert registered_op_names().count("tandem::torch_rms_norm") == 1


def test_schemas_declare_the_cache_mutation():
    schema = str(torch.ops.tandem.torch_write_kv_cache.default._schema)
    assert "Tensor(a2!) k_cache" in schema and "Tensor(a3!) v_cache" in schema
    for name in EXPECTED - {"tandem::torch_write_kv_cache"}:
        op = getattr(torch.ops.tandem, name.split("::")[1]).default
        assert "!" not in str(op._schema), name

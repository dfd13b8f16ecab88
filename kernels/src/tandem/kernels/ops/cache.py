"""Writing new K/V into the paged cache by slot mapping."""

from __future__ import annotations

from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.native import attention as native
from tandem.kernels.ops.library import call, define


def store(k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor) -> None:
    """Scatter k, v: [T, KVH, D] into caches [N, S, KVH, D]; slots < 0 are skipped.

    fp32 on the CPU: one C pass (``native.write_kv``). Otherwise plain torch indexing,
    so it runs on any device (the CUDA backends reuse it).
    """
    if native.write_kv(k, v, k_cache, v_cache, slot_mapping):
        return
    S = k_cache.shape[1]
    slots = slot_mapping.long()
    if bool((slots < 0).any()):
        keep = slots >= 0
        slots, k, v = slots[keep], k[keep], v[keep]
    if k_cache.is_contiguous() and v_cache.is_contiguous():
        # one row copy per token into the flat [N * S, KVH, D] view of each cache
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k.to(k_cache.dtype))
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v.to(v_cache.dtype))
        return
    index = (slots // S, slots % S)  # (block, offset), each [T']
    k_cache.index_put_(index, k.to(k_cache.dtype))
    v_cache.index_put_(index, v.to(v_cache.dtype))


@define("torch_write_kv_cache", mutates_args=("k_cache", "v_cache"))
def _write_kv_cache(
    k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor
) -> None:
    store(k, v, k_cache, v_cache, slot_mapping)


@_write_kv_cache.register_fake
def _(k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor) -> None:
    return None


def check_write(
    k: object, v: object, k_cache: object, v_cache: object, slot_mapping: object
) -> None:
    """Validate the arguments of a K/V cache write (reads slot_mapping's range)."""
    kc, vc = checks.paged_cache(k_cache, v_cache)
    kt = checks.tensor("k", k, 3, checks.FLOAT_DTYPES)
    vt = checks.tensor("v", v, 3, checks.FLOAT_DTYPES)
    if kt.shape != vt.shape:
        raise ValueError(f"v must have the shape of k {tuple(kt.shape)}, got {tuple(vt.shape)}")
    if kt.shape[1:] != kc.shape[2:]:
        raise ValueError(
            f"k.shape[1:] must equal k_cache.shape[2:] (KVH, D) {tuple(kc.shape[2:])}, "
            f"got {tuple(kt.shape[1:])}"
        )
    sm = checks.tensor("slot_mapping", slot_mapping, 1, checks.INT_DTYPES)
    checks.dim("slot_mapping", sm, 0, kt.shape[0], "the number of tokens k.shape[0]")
    checks.same_device(k=kt, v=vt, k_cache=kc, v_cache=vc, slot_mapping=sm)
    num_slots = kc.shape[0] * kc.shape[1]
    if sm.numel() and int(sm.max()) >= num_slots:
        raise ValueError(
            f"slot_mapping values must be < {num_slots} (blocks x block size) or -1 for "
            f"padding, got {int(sm.max())}"
        )


def write_kv_cache(
    k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor
) -> None:
    """Store k, v: [T, KVH, D] at ``slot_mapping``: [T] (block * S + offset; -1 = skip)."""
    check_write(k, v, k_cache, v_cache, slot_mapping)
    call("torch_write_kv_cache", k, v, k_cache, v_cache, slot_mapping)

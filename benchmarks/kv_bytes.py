"""KV cache bytes per token: latent attention beside plain attention, and what a
sliding-window model holds over a long generation.

    python benchmarks/kv_bytes.py [--tokens 32768] [--measure 256]

Part 1 is arithmetic on the architectures' real sizes (transformers' defaults, as
``tandem.core.config.hf_defaults`` writes them down) and the cache shape the engines allocate
(``ModelConfig.num_kv_heads`` x ``head_dim``, K and V, bf16): DeepSeek-V3's latent row
beside the full K and V its 128 heads would cache. Part 2 gives the sliding-window models'
cache at ``--tokens``: every block, what the KV managers hold (where every layer slides,
the blocks behind the window are freed: :mod:`tandem.core.kv.window`; where only some
layers slide, as in Gemma, those layers' own pool keeps their window), and the bound each
layer's own window gives. Part 3 measures it on the tiny windowed Mistral (window 8,
blocks of 4) on both engines: the most blocks in use after a step while generating
``--measure`` tokens, in a cache of 12 blocks (a whole sequence would need
``(--measure + 4) / 4``), against the window's bound; and on the tiny Gemma 2 (one local
layer, window 8, and one global layer), whose local pool keeps the window beside the
global layer's whole sequence.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import torch

from tandem.core.config.cache import CacheConfig
from tandem.core.config.hf_defaults import DEFAULTS
from tandem.core.config.model import ModelConfig
from tandem.core.kv.window import kv_window, local_layers, peak_blocks
from tandem.core.models.architectures import build_spec
from tandem.core.spec.model import ModelSpec
from tandem.core.testing import add_request

BF16 = 2


def cache_shape(arch: str) -> tuple[ModelConfig, ModelSpec]:
    hf = SimpleNamespace(**DEFAULTS[arch], architectures=[arch])
    if getattr(hf, "num_key_value_heads", None) is None:
        hf.num_key_value_heads = hf.num_attention_heads
    here = Path(".")
    mc = ModelConfig(here, hf, arch, torch.bfloat16, hf.max_position_embeddings, [], here)
    return mc, build_spec(hf, arch)


def per_token(mc: ModelConfig) -> int:
    """Bytes one token takes in the cache, all layers, K and V."""
    return mc.num_layers * mc.num_kv_heads * mc.head_dim * 2 * BF16


def latent_table() -> None:
    mc, spec = cache_shape("DeepseekV3ForCausalLM")
    lat = spec.attention.latent
    assert lat is not None
    heads = spec.num_heads
    plain = mc.num_layers * heads * (lat.qk_nope_head_dim + lat.qk_rope_head_dim + lat.v_head_dim)
    ours = per_token(mc)
    print("DeepSeek-V3 (61 layers, 128 heads), bf16, bytes per token:")
    print(f"  latent row cached (512 + 64 values per layer): {ours:>10,}")
    print(f"  full K and V of every head (128 x (192 + 128)): {plain * BF16:>9,}")
    print(f"  ratio: {plain * BF16 / ours:.1f}x")


def held_blocks(spec: ModelSpec, tokens: int, block: int) -> int:
    """Blocks of one layer a sequence of ``tokens`` holds between steps, as the KV
    managers keep them: every block, the window's where every layer slides, the window's
    in the local layers where some slide (:mod:`tandem.core.kv.window`)."""
    local, local_window = local_layers(spec.windows)
    cache = CacheConfig(
        block, None, None, 1, tokens, False,
        sliding_window=kv_window(spec.windows), step_tokens=1,
        local_layers=local, local_window=local_window, num_layers=spec.num_layers,
    )  # fmt: skip
    return cache.layer_blocks_for(tokens)


def window_table(tokens: int) -> None:
    block = 16
    print(f"\nsliding-window models at {tokens} tokens, bf16, blocks of {block} (MiB):")
    print(f"{'architecture':<22}{'every block':>13}{'held':>10}{'per-layer bound':>17}")
    for arch in ("MistralForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        mc, spec = cache_shape(arch)
        layer = mc.num_kv_heads * mc.head_dim * 2 * BF16
        every = layer * mc.num_layers * tokens
        held = layer * block * held_blocks(spec, tokens, block)
        bounded = sum(layer * min(tokens, w or tokens) for w in spec.windows)
        print(f"{arch:<22}{every / 2**20:>13.0f}{held / 2**20:>10.0f}{bounded / 2**20:>17.0f}")


def measured(tokens: int) -> None:
    from tandem.core.testing import make_model

    block, window = 4, 8
    for arch, what in (("mistral_window", "Mistral"), ("gemma2", "Gemma 2 (local, global)")):
        path = make_model(arch=arch)
        print(f"\ntiny {what}, window {window}, blocks of {block}, {tokens + 4} tokens:")
        for name in ("v0", "v1"):
            print(f"  {name}: " + _watch(name, path, block, window, tokens))


def _watch(name: str, path: Path, block: int, window: int, tokens: int) -> str:
    from tandem.core.config.engine_args import EngineArgs
    from tandem.core.engine.protocol import load_engine_class
    from tandem.core.inputs.sampling_params import SamplingParams

    whole = -(-(tokens + 4) // block)
    args = EngineArgs(
        model=str(path),
        dtype="float32",
        block_size=block,
        max_model_len=tokens + 8,
        num_kv_blocks=12 if "mistral" in str(path) else whole + 2,
        max_num_batched_tokens=8,
    )
    engine = load_engine_class(name).from_engine_args(args)
    try:
        grouped = engine.config.cache.grouped
        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
        add_request(engine, "r", [1, 5, 9, 13], params)
        peak = 0
        while engine.has_unfinished_requests():
            engine.step()
            stats = engine.stats()
            peak = max(peak, stats.num_kv_blocks - stats.num_free_kv_blocks)
    finally:
        engine.shutdown()
    bound = peak_blocks(window, 1, block)
    if grouped:  # the global layer's every block beside the local layer's window
        return (
            f"at most {peak} blocks in use (bound {whole} + {bound}; "
            f"every block of both: {2 * whole})"
        )
    return f"at most {peak} blocks in use (bound {bound}; every block: {whole})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--measure", type=int, default=256)
    args = parser.parse_args()
    latent_table()
    window_table(args.tokens)
    if args.measure:
        measured(args.measure)


if __name__ == "__main__":
    main()

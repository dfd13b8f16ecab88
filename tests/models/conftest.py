"""Session-wide tiny checkpoints and a small paged-cache driver for the model tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tandem.core.engine.loader import load_model
from tandem.core.kv.cache import allocate_kv_caches
from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.testing import make_model

ARCHS = ("llama", "mistral", "qwen2")


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: make_model(root / arch, arch=arch) for arch in ARCHS}


@pytest.fixture(scope="session")
def sharded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sharded-model")
    return make_model(root / "llama", arch="llama", max_shard_size="100KB")


class PagedRunner:
    """Drives a model step by step over a paged cache whose blocks are handed out shuffled."""

    def __init__(
        self, model: torch.nn.Module, block_size: int = 4, num_blocks: int = 96, seed: int = 0
    ) -> None:
        spec = model.spec
        self.model = model
        self.block_size = block_size
        self.caches = allocate_kv_caches(
            spec.num_layers,
            spec.num_kv_heads,
            spec.head_dim,
            num_blocks,
            block_size,
            torch.float32,
            "cpu",
        )
        gen = torch.Generator().manual_seed(seed)
        self.free = torch.randperm(num_blocks, generator=gen).tolist()
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def step(self, chunks: list[tuple[int, list[int]]]) -> torch.Tensor:
        """Run ``(seq_id, new_tokens)`` chunks (prefills first); logits [T, V] for every token."""
        ids, positions, q_lens, s_lens, tables = [], [], [], [], []
        for sid, tokens in chunks:
            start = self.lens.get(sid, 0)
            end = start + len(tokens)
            table = self.tables.setdefault(sid, [])
            while len(table) * self.block_size < end:
                table.append(self.free.pop())
            self.lens[sid] = end
            ids += tokens
            positions += range(start, end)
            q_lens.append(len(tokens))
            s_lens.append(end)
            tables.append(list(table))
        meta = build_metadata(q_lens, s_lens, tables, self.block_size)
        with torch.no_grad():
            hidden = self.model(torch.tensor(ids), torch.tensor(positions), self.caches, meta)
            return self.model.compute_logits(hidden)


@pytest.fixture
def paged_runner() -> type[PagedRunner]:
    return PagedRunner


@pytest.fixture
def use_kernels():
    """``use_kernels(model, linear=..., attention=..., decode_stack=...)``: run a model
    (often a session's shared one) on other kernels for one test; every model given
    any gets back what it had when the test ends."""
    saved: list[tuple[torch.nn.Module, object]] = []

    def give(model: torch.nn.Module, **switches: str) -> None:
        saved.append((model, model.kernels))
        model.use_kernels(resolve_kernels(**switches))

    yield give
    for model, kernels in reversed(saved):
        model.use_kernels(kernels if kernels is not None else resolve_kernels())


@pytest.fixture(scope="session")
def tandem_models(model_dirs: dict[str, Path]) -> dict[str, torch.nn.Module]:
    return {arch: load_model(path) for arch, path in model_dirs.items()}


@pytest.fixture(scope="session")
def hf_models(model_dirs: dict[str, Path]) -> dict[str, torch.nn.Module]:
    from transformers import AutoModelForCausalLM

    return {
        arch: AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        for arch, path in model_dirs.items()
    }


@pytest.fixture
def stack_ran(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the one-call C decode stack ran each step (``DecodeStack.run`` answered)."""
    from tandem.core.models import decode_stack

    ran: list[bool] = []
    real = decode_stack.DecodeStack.run

    def run(self, x, positions, caches, meta):  # type: ignore[no-untyped-def]
        out = real(self, x, positions, caches, meta)
        ran.append(out is not None)
        return out

    monkeypatch.setattr(decode_stack.DecodeStack, "run", run)
    return ran

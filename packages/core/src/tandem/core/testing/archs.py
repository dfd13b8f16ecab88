"""The tiny test configs of every architecture, and what is done to their random weights.

Each config is declared beside its architecture (``Architecture.tests``). Windows are
shorter than the test prompts, head sizes differ from hidden / heads, and every scalar a
family multiplies by is far from 1, so that a model that skips one of them cannot match
transformers by luck.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tandem.core.models.architectures import ARCHITECTURES

# every test config, by the name make_model(arch=...) takes: each is declared with its
# architecture (Architecture.tests), as transformers' config class and the fields set
TEST_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    name: config for arch in ARCHITECTURES.values() for name, config in arch.tests.items()
}
# the Llama family's first three, which the parity suites of their own cover
LLAMA_FAMILY = ("llama", "mistral", "qwen2")
# the rest, each set to hit its architecture's traps
TRAPS: tuple[str, ...] = tuple(sorted(n for n in TEST_CONFIGS if n not in LLAMA_FAMILY))


def _bias_router_scores(model: torch.nn.Module) -> None:
    """DeepSeek's routing correction starts at 0: give it values that change the choice."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("e_score_correction_bias"):
                param.normal_(0.0, 0.3)
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.3)


def _tie_first_routers(model: torch.nn.Module) -> None:
    """Experts 0 and 1 get the same router row: equal scores, whose order decides."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("gate.weight") and param.dim() == 2 and param.shape[0] > 1:
                param[1].copy_(param[0])


# changes made to an architecture's random weights after they are drawn
TWEAKS: dict[str, Callable[[torch.nn.Module], None]] = {
    "mixtral": _tie_first_routers,
    "deepseek_v3": _bias_router_scores,
    "deepseek_v3_plain": _bias_router_scores,
}

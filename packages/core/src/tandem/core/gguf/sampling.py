"""A GGUF file's generation defaults, in the form of a ``generation_config.json``.

A GGUF file may say how it wants to be sampled (``general.sampling.temp``, ``top_k``,
``top_p``, ``min_p``, ``penalty_repeat``, written by llama.cpp's converter from the
model's own generation config). Those become the fields a Hugging Face
``generation_config.json`` would hold, so :meth:`SamplingParams.from_generation_config`
reads a file and a directory alike. A file that says nothing is greedy, as a directory
without a generation config is under ``transformers``.
"""

from __future__ import annotations

from typing import Any, Protocol

# general.sampling.<key> -> the generation_config.json field it is
SAMPLING_KEYS = {
    "temp": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "penalty_repeat": "repetition_penalty",
}
_SAMPLES = ("temperature", "top_k", "top_p", "min_p")


class Metadata(Protocol):
    def value(self, key: str, default: Any = None) -> Any: ...


def generation_config(metadata: Metadata, config: dict[str, Any]) -> dict[str, Any]:
    """The generation config of a file with ``metadata`` and model ``config``: its BOS and
    EOS ids, and its sampling defaults where it has any (``do_sample`` unless its
    temperature is 0)."""
    gen = {k: config[k] for k in ("bos_token_id", "eos_token_id") if k in config}
    for key, name in SAMPLING_KEYS.items():
        value = metadata.value(f"general.sampling.{key}")
        if value is not None:
            gen[name] = value
    if any(name in gen for name in _SAMPLES):
        gen["do_sample"] = gen.get("temperature", 1.0) != 0
    return gen

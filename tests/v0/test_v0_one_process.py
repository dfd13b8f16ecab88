"""Engine v0 runs the model in the caller's process: it refuses the arguments that ask
for more processes, naming the argument, before it loads anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.core import LLM


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tensor_parallel_size", 2),
        ("data_parallel_size", 2),
        ("distributed_executor_backend", "ray"),
    ],
)
def test_more_than_one_process_is_refused(tiny_model: Path, name: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"engine v0 runs the model in one process: {name}"):
        LLM(tiny_model, engine="v0", **{name: value})


def test_the_defaults_are_accepted(tiny_model: Path) -> None:
    kw = {"tensor_parallel_size": 1, "data_parallel_size": 1, "distributed_executor_backend": "mp"}
    with LLM(tiny_model, engine="v0", max_model_len=64, **kw) as llm:
        assert llm.generate("a b", use_tqdm=False)[0].outputs[0].token_ids

"""``SamplingParams`` fields left out take the model's own defaults in ``LLM``: from a
directory's generation_config.json or a GGUF file's ``general.sampling.*`` metadata;
fields given explicitly win, ``temperature=0`` included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tandem.core import LLM, SamplingParams
from tandem.core.testing.gguf_writer import write_gguf

pytestmark = pytest.mark.engines("v0", "v1")

PROMPT = "a b c"
# the class's own values for the fields the model sets: what a request got before
CLASS_VALUES = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}


@pytest.fixture
def sampling_model(tiny_model: Path, tmp_path: Path) -> Path:
    """The tiny model whose generation_config asks to sample, narrowly."""
    target = tmp_path / "sampling-model"
    shutil.copytree(tiny_model, target)
    gen = json.loads((target / "generation_config.json").read_text())
    gen.update(do_sample=True, temperature=0.5, top_k=3, repetition_penalty=1.3, max_new_tokens=5)
    (target / "generation_config.json").write_text(json.dumps(gen))
    return target


def _tokens(llm: LLM, params: SamplingParams) -> list[list[int]]:
    outs = llm.generate([PROMPT] * 4, params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def test_fields_left_out_take_the_model_defaults(sampling_model: Path, engine: str) -> None:
    with LLM(sampling_model, engine=engine, max_model_len=64) as llm:
        model = llm.default_sampling_params()
        partial = _tokens(llm, SamplingParams(max_tokens=8, seed=11, ignore_eos=True))
        want = _tokens(llm, model.replace(max_tokens=8, seed=11, ignore_eos=True))
        plain = SamplingParams(max_tokens=8, seed=11, ignore_eos=True, **CLASS_VALUES)
        # the model's defaults make a difference here, so the test can see them taken
        assert _tokens(llm, plain) != want
        assert partial == want
        streamed = [
            t
            for out in llm.stream(PROMPT, SamplingParams(max_tokens=8, seed=11, ignore_eos=True))
            for t in out.outputs[0].token_ids
        ]
        assert streamed == want[0]


def test_an_explicit_temperature_0_wins(sampling_model: Path, tiny_model: Path, engine: str):
    params = SamplingParams(temperature=0, ignore_eos=True)
    with LLM(tiny_model, engine=engine, max_model_len=64) as llm:
        greedy = _tokens(llm, params.replace(max_tokens=5))
    with LLM(sampling_model, engine=engine, max_model_len=64) as llm:
        # greedy, under the model's top_k and penalty, as long as its max_new_tokens
        want = _tokens(llm, params.replace(top_k=3, repetition_penalty=1.3, max_tokens=5))
        assert _tokens(llm, params) == want
        assert _tokens(llm, params.replace(repetition_penalty=1.0)) == greedy


def test_a_gguf_file_carries_its_sampling_defaults(tiny_model: Path, tmp_path: Path, engine):
    sampling = {"temp": 0.25, "top_k": 7, "top_p": 0.75, "min_p": 0.125, "penalty_repeat": 1.5}
    carries = write_gguf(tiny_model, tmp_path / "sampling.gguf", sampling=sampling)
    silent = write_gguf(tiny_model, tmp_path / "silent.gguf")
    with LLM(carries, engine=engine, max_model_len=64) as llm:
        d = llm.default_sampling_params()
        assert (d.temperature, d.top_k, d.top_p, d.min_p, d.repetition_penalty) == (
            0.25,
            7,
            0.75,
            0.125,
            1.5,
        )
    with LLM(silent, engine=engine, max_model_len=64) as llm:
        assert llm.default_sampling_params().greedy  # nothing said: greedy, as a directory

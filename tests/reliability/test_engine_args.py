"""Bad engine arguments, property-based: refused by name up front, or an engine that works.

Arguments go through the front door's checks (``EngineArgs.from_kwargs`` and
``create_config``, both in the caller's process). An accepted set builds an engine of
the current kind (engine v1 with its in-process client, so a case costs no process
start) that must serve the probe: at float32, with room for the probe, its greedy
tokens equal the ones a default engine gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relhelpers import PROBE_IDS, PROBE_TOKENS, probe_params

from tandem.core.config.engine_args import EngineArgs
from tandem.core.engine.protocol import load_engine_class
from tandem.core.testing import add_request, run_to_completion

pytestmark = [pytest.mark.reliability, pytest.mark.engines("v0", "v1")]

junk = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.floats(), st.just([1]))
size = st.one_of(st.none(), st.integers(-1, 300), junk)
ENGINE_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "tokenizer": st.one_of(st.none(), st.sampled_from(["/nonexistent/tok", ""]), junk),
    "dtype": st.one_of(st.sampled_from(["auto", "float32", "bfloat16", "float8", "fp32"]), junk),
    "device": st.one_of(st.sampled_from(["auto", "cpu", "cuda", "tpu"]), junk),
    "seed": st.one_of(st.integers(-1, 2**64), junk),
    "max_model_len": size,
    "block_size": st.one_of(st.sampled_from([0, 1, 3, 8, 16, 64]), junk),
    "num_kv_blocks": st.one_of(st.none(), st.integers(-1, 40), junk),
    "kv_cache_memory_bytes": st.one_of(st.none(), st.integers(-1, 1 << 20), junk),
    "max_num_seqs": st.one_of(st.integers(-1, 4), junk),
    "max_num_batched_tokens": size,
    "enable_prefix_caching": st.one_of(st.booleans(), junk),
    "enable_chunked_prefill": st.one_of(st.booleans(), junk),
    "num_threads": st.one_of(st.none(), st.integers(-1, 2), junk),
    "gpu_memory_utilization": st.floats(0, 1),  # not a field
    "speculative_config": st.one_of(
        st.none(),
        st.sampled_from(
            [
                {"method": "ngram"},
                {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2},
                {"method": "eagle"},
                {"method": "ngram", "num_speculative_tokens": 0},
                {"model": "/nonexistent/draft"},
                {"bogus": 1},
            ]
        ),
        junk,
    ),
    "num_speculative_tokens": st.one_of(st.none(), st.integers(-1, 20), junk),
    "speculative_model": st.one_of(st.none(), st.sampled_from(["/nonexistent/draft", ""]), junk),
}
VALID_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "dtype": st.sampled_from(["auto", "float32", "bfloat16"]),
    "device": st.sampled_from(["auto", "cpu"]),
    "seed": st.integers(0, 2**64),
    "max_model_len": st.one_of(st.none(), st.integers(8, 256)),
    "block_size": st.sampled_from([1, 8, 16, 64]),
    "max_num_seqs": st.integers(1, 4),
    "enable_prefix_caching": st.booleans(),
    "enable_chunked_prefill": st.booleans(),
    "num_threads": st.sampled_from([None, 1]),
}
# mostly valid fields, then one field drawn from every value (valid or not)
engine_kwargs = st.tuples(
    st.fixed_dictionaries({}, optional=VALID_FIELDS),
    st.sampled_from(sorted(ENGINE_FIELDS)).flatmap(
        lambda k: ENGINE_FIELDS[k].map(lambda v: (k, v))
    ),
).map(lambda t: {**t[0], t[1][0]: t[1][1]})


def build(engine: str, args: EngineArgs) -> Any:
    cls = load_engine_class(engine)
    if engine == "v1":
        return cls.from_engine_args(args, multiprocess=False)
    return cls.from_engine_args(args)


def test_engine_args(tiny_model: Path, engine: str) -> None:
    tried: list[bool] = []
    threads = torch.get_num_threads()

    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(kw=engine_kwargs, bad_model=st.integers(0, 19))
    def case(kw: dict[str, Any], bad_model: int) -> None:
        model: Any = {0: "/nonexistent/model", 1: 7, 2: str(tiny_model / "config.json")}.get(
            bad_model, str(tiny_model)
        )
        try:
            args = EngineArgs.from_kwargs(model, **kw)
            args.create_config()
        except Exception as exc:
            assert isinstance(exc, (ValueError, TypeError)), repr(exc)
            names = [*kw, "model", "KV cache", "max_model_len"]
            assert any(name in str(exc) for name in names), f"{exc} names none of {names}"
            tried.append(False)
            return
        eng = build(engine, args)
        try:
            # the context: the one given, else the model's or what the KV cache holds
            room = eng.config.model.max_model_len - len(PROBE_IDS)
            if room < 1:  # a context shortened below the probe refuses it by name
                with pytest.raises(ValueError, match="max_model_len"):
                    add_request(eng, "probe", list(PROBE_IDS), probe_params())
                tried.append(True)
                return
            done = run_to_completion(eng, [("probe", list(PROBE_IDS), probe_params())])
            tokens = list(done["probe"].outputs[0].token_ids)
            stats = eng.stats()
            assert stats.num_free_kv_blocks == stats.num_kv_blocks
        finally:
            eng.shutdown()
            torch.set_num_threads(threads)  # num_threads is process-wide on CPU
        assert len(tokens) == min(PROBE_TOKENS, room)
        if args.dtype in ("auto", "float32"):
            assert tokens == reference[: len(tokens)]
        tried.append(True)

    reference = default_probe(tiny_model, engine)
    case()
    served, refused = sum(tried), len(tried) - sum(tried)
    print(f"\nreliability bad-input EngineArgs: {len(tried)} cases, {served} built, {refused} no")
    assert served >= 3 and refused >= 3


def default_probe(model: Path, engine: str) -> list[int]:
    eng = build(engine, EngineArgs(model=str(model), max_model_len=128))
    try:
        done = run_to_completion(eng, [("probe", list(PROBE_IDS), probe_params())])
    finally:
        eng.shutdown()
    return list(done["probe"].outputs[0].token_ids)

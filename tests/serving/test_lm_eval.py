"""An evaluation harness against ``tandem serve``: EleutherAI lm-eval's loglikelihood
(multiple-choice) task through its ``local-completions`` client, scored side by side with
lm-eval's own transformers backend on the same checkpoint. Slow; skipped without lm_eval."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from servhelpers import MODEL_NAME

pytestmark = pytest.mark.slow

DOCS = [
    {"question": "The cat sat on the", "choices": ["mat", "moon", "river"], "answer": 0},
    {"question": "One, two, three,", "choices": ["four", "blue", "seven"], "answer": 0},
    {"question": "The sky is", "choices": ["green", "blue", "loud"], "answer": 1},
    {"question": "Water is", "choices": ["dry", "wet", "square"], "answer": 1},
    {"question": "A dog says", "choices": ["moo", "quack", "woof"], "answer": 2},
]
TASK = """task: tandem_tiny_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
"""


def _task(tmp: Path) -> Path:
    data = tmp / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp / "tandem_tiny_choice.yaml").write_text(TASK.format(data=data))
    return tmp


def _scores(model: str, args: str, include: Path) -> tuple[float, list[float]]:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    out = simple_evaluate(
        model=model,
        model_args=args,
        tasks=["tandem_tiny_choice"],
        task_manager=TaskManager(include_path=str(include)),
        log_samples=True,
        batch_size=1,
    )
    samples = sorted(out["samples"]["tandem_tiny_choice"], key=lambda s: s["doc_id"])
    lls = [float(r[0][0]) for s in samples for r in s["resps"]]
    return out["results"]["tandem_tiny_choice"]["acc,none"], lls


@pytest.fixture
def lm_eval() -> Iterator[None]:
    """lm_eval, its import's env vars (HF_XET_HIGH_PERFORMANCE, ...) undone afterwards."""
    before = dict(os.environ)
    try:
        pytest.importorskip("lm_eval")
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]


def test_lm_eval_loglikelihood_matches_transformers(
    lm_eval, server_url, tiny_model, tmp_path
) -> None:
    include = _task(tmp_path)
    served = (
        f"base_url={server_url}/v1/completions,model={MODEL_NAME},tokenizer={tiny_model},"
        "tokenizer_backend=huggingface,num_concurrent=1,max_retries=1,add_bos_token=True"
    )
    acc, lls = _scores("local-completions", served, include)
    ref_acc, ref_lls = _scores(
        "hf", f"pretrained={tiny_model},dtype=float32,device=cpu,add_bos_token=True", include
    )
    print(f"acc: tandem serve {acc:.3f}, transformers {ref_acc:.3f}")
    for got, want in zip(lls, ref_lls):
        print(f"  loglikelihood {got:10.4f}  transformers {want:10.4f}")
    assert len(lls) == len(ref_lls) == sum(len(d["choices"]) for d in DOCS)
    assert lls == pytest.approx(ref_lls, abs=2e-3)  # fp32, sums in different orders
    assert acc == ref_acc

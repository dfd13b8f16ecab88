"""``quantization="gguf"`` split over ranks: each rank keeps its shard of the file's blocks
as stored (no float weight for a kept module) and the ranks give the whole model's logits,
the file's blocks as stored on one process: to the order of float sums with the blocks
dequantized, and near them (the same top token) on the C kernels, which round the
activations to int8 per block (a sum over the ranks in another order may round one value
the other way)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Set
from pathlib import Path

import pytest
import torch
from models.gguf_moe_files import made_or_skip
from safetensors.torch import load_file, save_file

from tandem.core.testing import make_model
from tandem.core.testing.gguf_writer import write_gguf

from .rank_forward import prompt_logits
from .rank_gguf import exact_logits, gguf_model, held
from .test_sharded_forward import run_ranks

RANK = Path(__file__).with_name("rank_gguf.py")
ROPE = {"rope_type": "default", "rope_theta": 10000.0}
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
# every matrix in Q8_0; a vocabulary of 509 (odd): rank 1's shard of the embedding and of
# the head ends in a padding row
Q8 = {f"{p}.weight": 8 for p in (*PROJ, "embed_tokens", "lm_head")}
# the projections in 4 bits (both kinds), the tied embedding in Q8_0
Q4 = {f"{p}.weight": 2 if p.startswith("mlp") else 3 for p in PROJ} | {"embed_tokens.weight": 8}
# K-quants: o's K of 256 split in two is not a whole block of 256 (floats there), down's
# K of 512 is (kept); q, k and v of two formats (a stack)
K_SHAPE = {"hidden_size": 256, "intermediate_size": 512}
QK = {"q_proj.weight": 12, "k_proj.weight": 12, "v_proj.weight": 14, "o_proj.weight": 13}
QK |= {"mlp.gate_proj.weight": 12, "mlp.up_proj.weight": 12, "mlp.down_proj.weight": 14}
QK |= {"embed_tokens.weight": 6, "lm_head.weight": 14}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tp-gguf")
    llama = make_model(size="tiny", arch="llama", rope_parameters=ROPE, vocab_size=509)
    qwen2 = make_model(size="tiny", arch="qwen2")
    wide = make_model(size="tiny", arch="llama", rope_parameters=ROPE, **K_SHAPE)
    return {
        "q8": write_gguf(llama, root / "llama-q8.gguf", Q8),
        "q4": write_gguf(qwen2, root / "qwen2-q4.gguf", Q4),
        "qk": write_gguf(wide, root / "llama-qk.gguf", QK),
        "one": write_gguf(_one_token(llama, root / "one-token"), root / "one-token.gguf", Q8),
    }


def _one_token(src: Path, out: Path) -> Path:
    """``src``'s checkpoint cut to a vocabulary of one token (token 0's rows of the
    embedding and the head); its tokenizer stays whole (a GGUF file's is read as a whole
    one, and the logits are all that is compared)."""
    shutil.copytree(src, out)
    config = json.loads((out / "config.json").read_text())
    config.update(vocab_size=1, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    (out / "config.json").write_text(json.dumps(config))
    weights = load_file(out / "model.safetensors")
    vocab = ("embed_tokens.weight", "lm_head.weight")
    cut = {n: t[:1].clone() if n.endswith(vocab) else t for n, t in weights.items()}
    save_file(cut, out / "model.safetensors")
    return out


def _whole(path: Path) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The file on one process: its logits on the C kernels, without their rounding, and
    what the model holds."""
    model = gguf_model(str(path), None)
    logits = prompt_logits(model, None, torch.float32)
    report = held(model, str(path))
    return logits, exact_logits(model, None), report


def _near(split: torch.Tensor, whole: torch.Tensor, tol: float, agree: float = 1.0) -> None:
    """Within ``tol`` of ``whole`` (relative), the top token the same at ``agree`` of the
    positions."""
    assert split.shape == whole.shape
    assert (split - whole).norm() / whole.norm() < tol
    same = (split.argmax(-1) == whole.argmax(-1)).float().mean().item()
    assert same >= agree, same


def _ranks(out: Path, path: Path, size: int = 2) -> list[dict]:
    return [json.loads((out / f"{path.stem}.rank{r}.json").read_text()) for r in range(size)]


def _check_shards(whole: dict, ranks: list[dict], floats: Set[str] = frozenset()) -> None:
    """Each rank holds in floats what the whole model does (plus ``floats``: modules whose
    input range splits a block), every other weight in the whole model's formats, and
    decodes through the C stack on its shard."""
    for r, rank in enumerate(ranks):
        assert set(rank["floats"]) == set(whole["floats"]) | floats, r
        for name, forms in rank["forms"].items():
            if name not in floats:
                want = whole["forms"][name]
                assert set(forms) <= set(want) and len(forms) <= len(want), (r, name)
        decode, note, size = rank["plan"]
        assert (decode, size) == ("c", len(ranks)), (r, note)
        assert f"rank {r} of {len(ranks)}" in note


def test_two_ranks_keep_their_shard_of_the_blocks(files: dict[str, Path], tmp_path: Path):
    run_ranks(2, [str(files["q8"]), str(files["q4"])], tmp_path, None, RANK, premake=False)
    for key in ("q8", "q4"):
        logits, exact, whole = _whole(files[key])
        assert all(f.startswith("gguf") for fs in whole["forms"].values() for f in fs)
        assert whole["plan"][0] == "c" and not whole["floats"]
        ranks = _ranks(tmp_path, files[key])
        _check_shards(whole, ranks)
        # a run of rows stays a view of the file's mapping (no copy); o's and down's input
        # ranges are copied; rank 1's vocabulary shard of the Q8_0 file ends in padding
        row_parallel = {n for n in whole["views"] if n.endswith(("o_proj", "down_proj"))}
        assert "model.embed_tokens" in whole["views"] and row_parallel
        for r, rank in enumerate(ranks):
            padded = {"model.embed_tokens", "lm_head"} if key == "q8" and r == 1 else set()
            assert set(rank["views"]) == set(whole["views"]) - row_parallel - padded, r
        # each rank holds half the blocks (rank 1 of the Q8_0 file a padding row more)
        total = whole["block_bytes"]
        assert all(0.5 * total <= r["block_bytes"] <= 0.51 * total for r in ranks)
        assert sum(r["block_bytes"] for r in ranks) >= total
        stem = files[key].stem
        split = torch.load(tmp_path / f"{stem}.exact.pt")
        assert split.shape == exact.shape
        torch.testing.assert_close(split, exact, atol=1e-4, rtol=0)
        _near(torch.load(tmp_path / f"{stem}.pt"), logits, 0.01)


def test_a_shard_past_the_last_row_is_padding_alone() -> None:
    """Rows of zero blocks in the stored format where a rank holds none of the real
    rows, as where it holds some of them."""
    from tandem.core.gguf.shards import padded_rows
    from tandem.kernels.gguf_blocks import row_bytes

    ((offset, qtype, rows),) = padded_rows([], 1, 64, 8)
    assert (offset, qtype) == (0, 8) and rows.shape == (1, row_bytes(8, 64))
    assert not rows.any()
    real = torch.ones(1, row_bytes(8, 64), dtype=torch.uint8)
    assert [(o, q, r.shape[0]) for o, q, r in padded_rows([(0, 8, real)], 2, 64, 8)] == [
        (0, 8, 1),
        (1, 8, 1),
    ]


@pytest.mark.slow
def test_a_vocabulary_of_fewer_rows_than_ranks(files: dict[str, Path], tmp_path: Path) -> None:
    """One token over 2 ranks: rank 1 holds no row of the embedding or the head, only
    the padding row, as zero blocks in the file's format (it failed to load, "parts must
    be one or more QuantWeights"); the ranks give the one process's logits (slow: about
    12 s; the padding alone is checked without ranks above)."""
    path = files["one"]
    run_ranks(2, [str(path)], tmp_path, None, RANK, premake=False)
    logits, exact, whole = _whole(path)
    ranks = _ranks(tmp_path, path)
    _check_shards(whole, ranks)
    vocab = ("model.embed_tokens", "lm_head")
    assert all(ranks[1]["forms"][n] == ["gguf Q8_0"] for n in vocab), ranks[1]["forms"]
    assert not set(vocab) & set(ranks[1]["views"])  # zeros of its own, not the file's
    split = torch.load(tmp_path / f"{path.stem}.exact.pt")
    assert split.shape == exact.shape == (21, 1)
    torch.testing.assert_close(split, exact, atol=1e-4, rtol=0)
    _near(torch.load(tmp_path / f"{path.stem}.pt"), logits, 0.01)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe", "deepseek_v3"])
def test_two_ranks_keep_their_whole_experts_of_a_moe_file(name: str, tmp_path: Path) -> None:
    """A MoE file (Q8_0, made by llama.cpp) over 2 ranks: each rank keeps its run of whole
    experts' blocks as views of the file's mapping (Qwen2-MoE's 6 experts: 3 a rank, its
    shared expert split as a dense MLP; DeepSeek-V3's latent attention split by heads),
    and the ranks give the whole model's logits."""
    path, _ = made_or_skip()(name, "Q8_0")
    run_ranks(2, [str(path)], tmp_path, None, RANK, premake=False)
    logits, exact, whole = _whole(path)
    ranks = _ranks(tmp_path, path)
    _check_shards(whole, ranks)
    count = max(len(forms) for forms in whole["forms"].values())
    experts = {n for n, forms in whole["forms"].items() if len(forms) == count}
    assert count > 1 and experts <= set(whole["views"])
    for rank in ranks:
        assert all(len(rank["forms"][n]) == count // 2 for n in experts)
        assert experts <= set(rank["views"])
    split = torch.load(tmp_path / f"{path.stem}.exact.pt")
    torch.testing.assert_close(split, exact, atol=1e-4, rtol=0)
    _near(torch.load(tmp_path / f"{path.stem}.pt"), logits, 0.01)


@pytest.mark.slow
def test_a_moe_file_with_fewer_experts_than_ranks_is_refused_before_any_process() -> None:
    """One expert over 2 ranks: rank 0 would hold none (its load failed, "weights must be
    0 quantized weights"): the engine's arguments are refused, naming the field (slow:
    llama.cpp makes the file, about 15 s)."""
    from tandem.core.config.engine_args import EngineArgs

    path, _ = made_or_skip()("mixtral", "Q8_0", num_local_experts=1, num_experts_per_tok=1)
    args = EngineArgs(model=str(path), device="cpu", tensor_parallel_size=2, max_num_seqs=4)
    with pytest.raises(
        ValueError, match=r"tensor_parallel_size=2 must be at most num_experts \(1\)"
    ):
        args.create_config()


FIXTURES = Path(__file__).parents[1] / "models" / "gguf_files"


@pytest.mark.slow
def test_two_ranks_run_files_made_by_llama_cpp(tmp_path: Path) -> None:
    """The repository's llama.cpp fixtures (Q4_K_M: Q4_K beside Q6_K; Q8_0; Q4_0 experts):
    the ranks' logits are the one process's, the blocks dequantized; a projection whose
    input range on a rank would cut a block (down's 32 inputs over 2 ranks: 16) is the
    only module in floats."""
    names = ["qwen2-q4_k_m", "deepseek2-q4_k_m", "gemma2-q8_0", "qwen3moe-q4_0"]
    paths = [FIXTURES / f"{name}.gguf" for name in names]
    run_ranks(2, [str(p) for p in paths], tmp_path, None, RANK, premake=False)
    for path in paths:
        _, exact, whole = _whole(path)
        ranks = _ranks(tmp_path, path)
        floats = set(ranks[0]["floats"]) - set(whole["floats"])
        assert all(n.endswith(("o_proj", "down_proj")) for n in floats), (path.stem, floats)
        _check_shards(whole, ranks, floats)
        split = torch.load(tmp_path / f"{path.stem}.exact.pt")
        torch.testing.assert_close(split, exact, atol=1e-4, rtol=0, msg=path.stem)


def test_an_input_range_inside_a_block_is_loaded_in_floats(files, tmp_path) -> None:
    """o's K of 256 over 2 ranks: 128 inputs a rank, half a Q5_K block: o alone in floats,
    of the blocks' values (equal, without the kernels' rounding; on the C kernels near:
    the activations into o are not rounded to int8 on the ranks, as on one process)."""
    path = files["qk"]
    run_ranks(2, [str(path)], tmp_path, None, RANK, premake=False)
    logits, exact, whole = _whole(path)
    o = {f"model.layers.{i}.self_attn.o_proj" for i in range(2)}
    _check_shards(whole, _ranks(tmp_path, path), o)
    assert {f for n, fs in whole["forms"].items() for f in fs if "down" in n} == {"gguf Q6_K"}
    split = torch.load(tmp_path / f"{path.stem}.exact.pt")  # o's floats: the blocks' values
    torch.testing.assert_close(split, exact, atol=1e-4, rtol=0)
    _near(torch.load(tmp_path / f"{path.stem}.pt"), logits, 0.05, agree=0.9)


def test_the_refusal_names_the_layer_k_ranks_and_block() -> None:
    from tandem.core.gguf.shards import split_blocks
    from tandem.core.models.weights import Shard
    from tandem.core.parallel.layout import split

    layout = split((256, 256), 1, (128, 256))  # rank 1 of 2
    why = split_blocks("model.layers.3.self_attn.o_proj.weight", 13, Shard("o_proj"), layout)
    assert why == (
        "model.layers.3.self_attn.o_proj.weight: K=256 split over tensor_parallel_size=2 "
        "gives 128 inputs a rank, not a multiple of the Q5_K block (256 values)"
    )
    assert split_blocks("o.weight", 8, Shard("o_proj"), layout) is None  # Q8_0: blocks of 32


@pytest.mark.parametrize("rank", [0, 1])
def test_a_module_split_inside_a_block_is_named_in_a_warning(files, caplog, rank) -> None:
    """Each rank's model (built on the meta device: no group needed) keeps every module
    of the K-quant file but o, whose input range of 128 is half a Q5_K block; rank 0
    alone names o in a warning (once for the group, not once a rank)."""
    from tandem.core.config.model import load_model_config
    from tandem.core.gguf.checkpoint import open_checkpoint
    from tandem.core.gguf.weights import kept_modules
    from tandem.core.layers.no_init import no_init
    from tandem.core.models import get_model_class
    from tandem.core.models.architectures import architecture
    from tandem.core.parallel.group import TensorParallel

    config = load_model_config(files["qk"])
    with torch.device("meta"), no_init():
        model = get_model_class(config.architecture)(
            config.hf_config, dtype=torch.float32, tp=TensorParallel(rank, 2)
        )
    shards = architecture(model.spec.architecture).names(model.spec)
    stored = open_checkpoint(files["qk"]).stored_types()
    with caplog.at_level("WARNING", logger="tandem"):
        plan = kept_modules(model, shards, stored)
    floats = {n for n, kind in stored.items() if kind in (0, 1)}  # F32 / F16: the norms
    assert set(plan) == set(stored) - floats - {n for n in stored if "o_proj" in n}
    assert [r.getMessage() for r in caplog.records] == [
        f"model.layers.{i}.self_attn.o_proj.weight: K=256 split over tensor_parallel_size=2 "
        "gives 128 inputs a rank, not a multiple of the Q5_K block (256 values); loaded in "
        "floats instead"
        for i in range(2)
        if rank == 0
    ]


def test_the_v1_engine_runs_a_gguf_file_over_two_ranks(files, tmp_path, monkeypatch) -> None:
    """A ``.gguf`` path at ``tensor_parallel_size=2``: as stored by default, the same
    greedy tokens as one process, and a plan that says what rank 0 holds and runs."""
    from tandem.core import LLM, SamplingParams

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    outs, plans = [], []
    for tp in (1, 2):
        with LLM(
            model=str(files["q4"]), engine="v1", max_model_len=64, tensor_parallel_size=tp
        ) as llm:
            assert llm.config.quantization == "gguf"
            done = llm.generate(["one two three", "Item 3"], params, use_tqdm=False)
            outs.append([o.outputs[0].token_ids for o in done])
            plans.append(llm.engine.plan)
    assert outs[0] == outs[1]
    assert "cpu x2 ranks" in plans[1] and "rank 0 of 2" in plans[1], plans[1]
    forms = next(line for line in plans[1].splitlines() if line.startswith("weights"))
    assert forms == next(line for line in plans[0].splitlines() if line.startswith("weights"))

"""Loader validation: every kind of bad pipeline names the step and the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ci import PipelineError, load, parse

FILES = [
    "pyproject.toml",
    "README.md",
    "kernels/src/tandem/kernels/ops.py",
    "packages/engine-v0/src/tandem/v0/engine.py",
    "packages/engine-v1/src/tandem/v1/engine.py",
    "tests/kernels/test_ops.py",
    "tests/engine/test_engine.py",
]


def base() -> dict[str, Any]:
    return {
        "settings": {
            "python": ["3.11"],
            "install": "python -m pip install -r requirements-dev.txt",
            "engines": ["v0", "v1"],
            "always": ["pyproject.toml"],
        },
        "step": [
            {"label": "docs", "command": "python -m ci docs", "depends_on": ["README.md"]},
            {"label": "kernels", "tests": ["tests/kernels"], "depends_on": ["kernels/**"]},
            {
                "label": "engine",
                "tests": ["tests/engine"],
                "engines": ["v0", "v1"],
                "depends_on": ["packages/engine-{engine}/**"],
                "timeout": 60,
            },
        ],
    }


def with_change(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base())
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


DELETE = object()


def test_base_is_valid() -> None:
    pipeline = parse(base(), FILES)
    assert [j.name for j in pipeline.jobs()] == ["docs", "kernels", "engine-v0", "engine-v1"]
    assert pipeline.settings.parallel == 1


def test_parallel_setting_is_read() -> None:
    assert parse(with_change(("settings", "parallel"), 3), FILES).settings.parallel == 3


def test_the_pipeline_runs_two_jobs_at_once() -> None:
    assert load(Path(__file__).parents[2] / "ci" / "pipeline.toml").settings.parallel == 2


CASES = [
    # (where, new value, words the message must contain)
    (("step", 2, "engines"), ["v0", "v2"], ["step 'engine'", "'engines'", "'v2'", "v0, v1"]),
    (("step", 1, "tests"), DELETE, ["step 'kernels'", "'tests'", "neither"]),
    (("step", 0, "tests"), ["tests/kernels"], ["step 'docs'", "'tests'", "both"]),
    (("step", 1, "depends_on"), ["kernal/**"], ["step 'kernels'", "'depends_on'", "kernal/**"]),
    (("step", 1, "tests"), ["tests/kernel"], ["step 'kernels'", "'tests'", "tests/kernel"]),
    (("settings", "always"), ["nothing.txt"], ["[settings]", "'always'", "nothing.txt"]),
    (("step", 1, "label"), "docs", ["step 'docs'", "'label'", "duplicate label"]),
    (("step", 0, "label"), "engine-v1", ["step 'engine'", "clashes", "engine-v1"]),
    (("step", 1, "timeot"), 10, ["step 'kernels'", "unknown key 'timeot'", "timeout"]),
    (("settings", "pythons"), ["3.11"], ["[settings]", "unknown key 'pythons'"]),
    (("extra",), {}, ["unknown key 'extra'"]),
    (("step", 2, "timeout"), 0, ["step 'engine'", "'timeout'", "1..21600", "0"]),
    (("step", 2, "timeout"), "60", ["step 'engine'", "'timeout'", "'60'"]),
    (("step", 2, "timeout"), True, ["step 'engine'", "'timeout'", "True"]),
    (("step", 2, "timeout"), 10**6, ["step 'engine'", "'timeout'", "1000000"]),
    (("step", 1, "label"), "Kernels", ["step #2", "'label'", "'Kernels'"]),
    (("step", 1, "depends_on"), ["x/{engine}/**"], ["step 'kernels'", "{engine}", "no engines"]),
    (("step", 0, "pytest_args"), ["-x"], ["step 'docs'", "'pytest_args'"]),
    (("step", 0, "allow_empty"), True, ["step 'docs'", "'allow_empty'"]),
    (("step", 1, "gpu"), "yes", ["step 'kernels'", "'gpu'", "'yes'"]),
    (("step", 1, "engines"), "v0", ["step 'kernels'", "'engines'", "list"]),
    (("settings", "python"), ["3"], ["[settings]", "'python'", "'3'"]),
    (("settings", "install"), "", ["[settings]", "'install'"]),
    (("settings", "prepare"), "  ", ["[settings]", "'prepare'", "non-empty"]),
    (("settings", "prepare"), 3, ["[settings]", "'prepare'", "3"]),
    (("settings", "parallel"), 0, ["[settings]", "'parallel'", "1..64", "0"]),
    (("settings", "parallel"), "2", ["[settings]", "'parallel'", "'2'"]),
    (("settings", "engine_args"), ["--engines"], ["'engine_args'", "{engine}"]),
    (("step",), [], ["at least one [[step]]"]),
    (("step", 0, "command"), "python -c 'x", ["step 'docs'", "'command'", "split"]),
    (("step", 1, "depends_on"), ["/abs/**"], ["step 'kernels'", "'depends_on'", "relative"]),
]


@pytest.mark.parametrize(("where", "value", "words"), CASES)
def test_bad_pipeline_is_named(where: tuple[Any, ...], value: Any, words: list[str]) -> None:
    with pytest.raises(PipelineError) as info:
        parse(with_change(where, value), FILES)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_engine_glob_must_match_for_every_engine() -> None:
    files = [f for f in FILES if "engine-v1" not in f]
    with pytest.raises(PipelineError, match=r"step 'engine'.*'depends_on'.*engine v1"):
        parse(base(), files)


def test_pipeline_errors_are_value_errors() -> None:
    assert issubclass(PipelineError, ValueError)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="not found"):
        load(tmp_path / "missing.toml", files=FILES)
    broken = tmp_path / "broken.toml"
    broken.write_text("[settings\n")
    with pytest.raises(PipelineError, match="not valid TOML"):
        load(broken, files=FILES)

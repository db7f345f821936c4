"""The files six HuggingFace models recorded on an H100 (torch 2.11, ``tests/test_hf_models_gpu.py``): every
line parses strictly, the odd leading dimensions reach the AMD configs as valid BLAS ld's, and the
recorded call counts weigh the shapes."""

from __future__ import annotations

import json

import pytest

from pipeline.formats.rocm import to_amd
from pipeline.formats.tunableop import read_file
from pipeline.stages.configs import render as configs
from pipeline.stages.gather.shapes import apply_weights, gather

from .helpers import FIXTURES

CORPUS = sorted((FIXTURES / "tunableop").glob("torch2.11_hf_*_untuned0.csv"))
ARCHS = [path.name.split("_")[2] for path in CORPUS]


def test_the_corpus_covers_six_architectures():
    assert ARCHS == ["bert", "gpt2", "llama", "mistral", "mixtral", "t5"]


@pytest.mark.parametrize("path", CORPUS, ids=ARCHS)
def test_every_line_parses_strictly_and_counts_match(path):
    parsed = read_file(path)
    keys = [f"{e.op_signature},{e.params_signature}" for e in parsed.entries]
    calls = json.loads((FIXTURES / "hf_calls" / path.name.replace("untuned0.csv", "calls.json")).read_text())
    assert set(calls["calls"]) == set(keys) and calls["total"] == sum(calls["calls"].values())
    result = gather([str(path)])
    apply_weights(result, calls, None)
    assert sum(r.calls for r in result.shapes) == calls["total"]


def test_lds_under_the_row_count_are_what_torch_records():
    """Rotary outer products (float32 bmm with ld 1) and Mixtral's expert GEMMs (ldc 1 for 7168 rows)."""
    odd = {
        f"{e.op_signature},{e.params_signature}": e.problem
        for path in CORPUS
        for e in read_file(path).entries
        if e.problem.ld_notes()
    }
    assert "GemmStridedBatchedTunableOp_float_TN,tn_32_1_1_B_2_ld_1_1_1" in odd
    assert "GemmStridedBatchedTunableOp_BFloat16_TT,tt_7168_1_1024_B_4_ld_1024_1_1" in odd
    for problem in odd.values():
        amd = to_amd(problem)
        rows = problem.stored_rows()
        assert (amd.lda, amd.ldb, amd.ldc) == tuple(
            max(ld, r) for ld, r in zip((problem.lda, problem.ldb, problem.ldc), rows, strict=True)
        )


def test_configs_of_the_whole_corpus(tmp_path):
    problems = [r.problem for r in gather([str(p) for p in CORPUS]).shapes]
    data = configs.write_configs(tmp_path / "configs", problems, configs.ConfigSettings())
    assert data["files"]
    text = "".join(p.read_text() for p in (tmp_path / "configs").rglob("*.yaml"))
    assert "7168, 1, 4, 1024, 7168, 7168, 1024" in text.replace("[", "").replace("]", ""), (
        "the Tensile exact size holds the normalised ldd/ldc (7168), not torch's 1"
    )

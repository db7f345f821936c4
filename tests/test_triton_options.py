"""``--triton`` without a GPU: the option it gives the cuBLASLt backend, what it refuses, and the stack
fingerprint that keys Triton candidates by Triton's version and the kernels' source."""

from __future__ import annotations

import importlib.util
import json

import pytest

from pipeline.backends.base import ToolMissing
from pipeline.kernels import triton_gemm as tg
from pipeline.kernels.triton_cache import source_hash
from pipeline.stages.bench import registry
from pipeline.stages.run import fingerprint as fp

FACTS = {"platform": "cuda", "arch": "sm90", "torch": "2.11.0", "triton": "3.5.0", "triton_kernels": "aaaa"}


def test_the_option_names_the_cache_in_the_workdir_and_a_missing_triton(tmp_path, monkeypatch):
    """On by default with cublaslt (``--triton`` not given: None), off with ``--triton false``; a missing
    Triton is named with the way to tune without it, never skipped in silence."""
    options = registry.entry("cublaslt").options
    assert options({"triton": False, "workdir": "w"}) == {}
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "triton" else real(name))
    cache = {"triton_cache": str(tmp_path / "w" / "triton-cache")}
    assert options({"triton": True, "workdir": "w"}) == cache
    assert options({"triton": None, "workdir": "w"}) == cache
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name))
    for given in (True, None):
        with pytest.raises(ToolMissing, match=r"needs triton .* or pass --triton false"):
            options({"triton": given, "workdir": "w"})
    assert options({"triton": False, "workdir": "w"}) == {}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_the_fingerprint_holds_triton_and_the_kernel_source_only_for_triton_runs():
    upgraded = {**FACTS, "triton": "3.6.0"}
    edited = {**FACTS, "triton_kernels": "bbbb"}
    with_triton, without = {"backend": "cublaslt", "triton": True}, {"backend": "cublaslt", "triton": False}
    assert fp.fingerprint(FACTS, with_triton) != fp.fingerprint(upgraded, with_triton)
    assert fp.fingerprint(FACTS, with_triton) != fp.fingerprint(edited, with_triton)
    assert fp.fingerprint(FACTS, without) == fp.fingerprint(upgraded, without) == fp.fingerprint(edited, without)
    assert fp.fingerprint(FACTS, with_triton) != fp.fingerprint(FACTS, without)


def test_the_probe_signature_follows_the_kernel_source(monkeypatch):
    before = fp.signature()
    assert fp.signature() == before
    monkeypatch.setattr(fp, "source_hash", lambda: source_hash() + "0")
    assert fp.signature() != before, "a cached probe would keep the old kernels' digest"


def test_what_triton_served_and_won_is_summarised_and_reported():
    from pipeline.backends.base import CandidateResult, ProblemResult
    from pipeline.formats.tunableop import format_key
    from pipeline.problem import GemmProblem
    from pipeline.stages.bench import own_kernels

    won, config = _triton_winner()
    won.candidates = [CandidateResult(config.name, screen_us=18.0, config=config.to_json())]
    library = ProblemResult(GemmProblem("gemm", "T", "N", 4096, 8, 4096, 4096, 4096, 4096, batch=1))
    library.candidates = [CandidateResult("triton_r16c32k128_s1_g8_w4_st3", screen_us=21.0)]
    unserved = ProblemResult(GemmProblem("gemm", "N", "N", 1024, 8, 1024, 1024, 1024, 1024))
    why = tg.serves(unserved.problem)
    unserved.candidates = [CandidateResult("triton", error=f"not served: {why}")]
    facts = own_kernels.summary([won, library, unserved], "cublaslt", amd=False)
    key = ",".join(format_key(won.problem))
    assert facts == {
        "offered": True,
        "problems": 3,
        "served": 2,
        "not_served": {why: 1},
        "winners": [{"key": key, "solution": config.name, "speedup": 20.0 / 18.0, "numerics": FIGURES}],
    }
    text = own_kernels.lines(facts, kept=[key])
    assert text[0] == "Triton kernels: served 2 of 3 GEMMs, won 1 at Bench, 1 kept by the gate"
    assert text[1] == f"Triton kernels do not serve 1: {why}"
    assert text[2].startswith(f"Triton winner {config.name} for {key}: x1.111 at Bench, kept; largest element")
    assert own_kernels.lines(facts, kept=[])[0].endswith("won 1 at Bench, 0 kept by the gate")
    assert own_kernels.lines(None, kept=[]) == []


def test_no_triton_row_is_offered_on_rocm_or_by_another_tuner_and_the_report_says_why():
    from pipeline.stages.bench import own_kernels

    rocm = own_kernels.summary([], "hipblaslt", amd=True)
    assert rocm == {"offered": False, "why": own_kernels.ROCM}
    assert own_kernels.lines(rocm, []) == [f"Triton kernels: {own_kernels.ROCM}"]
    assert "ROCm keeps the vendor path" in own_kernels.ROCM
    other = own_kernels.summary([], "tunableop", amd=False)
    assert other["why"] == "--backend tunableop has no Triton candidates (the cublaslt search does)"


FIGURES = {"relative_error": 1e-3, "max_element_error": 4e-3, "beyond_fraction": 0.0, "tolerance": 1e-2}


def _triton_winner():
    """A Bench result whose winner is a Triton config (x1.111), with its numerics figures in the record."""
    from pipeline.backends.base import ProblemResult, WinnerRecord
    from pipeline.problem import GemmProblem

    config = tg.TritonConfig(16, 64, 256, 2)
    result = ProblemResult(GemmProblem("gemm", "T", "N", 4096, 8, 4096, 4096, 4096, 4096), default_us=20.0)
    result.crown(config.name, 18.0, WinnerRecord({**config.to_json(), "numerics": FIGURES}))
    return result, config


def test_bench_outputs_carry_a_triton_winner_with_its_figures_through_the_logic_merge(tmp_path):
    from pipeline.formats.logic import load_logic
    from pipeline.formats.tunableop import read_file
    from pipeline.stages.bench.tune import RUNTIME, result_path, write_outputs
    from pipeline.stages.merge.logic_merge import MergeOptions, merge_dirs

    result, config = _triton_winner()
    problem, figures = result.problem, FIGURES
    bench = tmp_path / "bench"
    result_path(bench, problem).parent.mkdir(parents=True)
    result_path(bench, problem).write_text(json.dumps(result.to_json()))
    (bench / RUNTIME).write_text(json.dumps({"pt_version": "2.11.0", "name": "H100", "capability": "9.0"}))
    summary = write_outputs([problem], bench)
    assert summary["improved"] == 1
    assert [e.solution for e in read_file(bench / "tunableop_results.csv").entries] == [config.name]
    (logic,) = bench.glob("logic/*.yaml")
    (solution,) = load_logic(logic).solutions
    assert solution["source"] == "triton" and solution["numerics"] == figures and solution["name"] == config.name
    (tmp_path / "base").mkdir()
    merge_dirs(tmp_path / "base", bench / "logic", tmp_path / "merged", MergeOptions())
    assert load_logic(tmp_path / "merged-records" / logic.name).solutions[0]["name"] == config.name


def test_the_bundle_manifest_lists_each_triton_row_with_its_config_and_figures(tmp_path):
    from pipeline.formats.tunableop import TunableOpEntry, format_key
    from pipeline.stages.run.layout import RunLayout
    from pipeline.stages.validate.bundle import own_kernel_rows

    result, config = _triton_winner()
    problem, figures = result.problem, FIGURES
    bench = RunLayout.of(tmp_path).bench
    bench.mkdir(parents=True)
    (bench / "results.json").write_text(json.dumps([result.to_json()]))
    kept = [TunableOpEntry.from_problem(problem, config.name, 0.018)]
    (row,) = own_kernel_rows(tmp_path, kept)
    assert row == {
        "key": ",".join(format_key(problem)),
        "solution": config.name,
        "config": config.to_json(),
        "numerics": figures,
    }
    cublaslt = [TunableOpEntry.from_problem(problem, "Gemm_Cublaslt_id_21_tile_18_stages_21", 0.018)]
    assert own_kernel_rows(tmp_path, cublaslt) == []


def test_the_triton_flag_enters_the_fingerprint_only_when_on():
    base = {"margin": 0.02, "time_budget": 20.0, "workdir": "w"}
    entry = registry.entry("cublaslt")
    assert entry.fingerprint_settings({**base, "triton": False}) == {
        "backend": "cublaslt",
        "margin": 0.02,
        "time_budget": 20.0,
    }, "a run without --triton keeps the fingerprint it had before the flag existed"
    assert entry.fingerprint_settings({**base, "triton": True})["triton"] is True
    assert entry.fingerprint_settings({**base, "triton": None})["triton"] is True, "on by default with cublaslt"
    tunableop = registry.entry("tunableop").fingerprint_settings(
        {**base, "triton": None, **{name: 1 for name in registry.TUNABLEOP_SETTINGS.values()}}
    )
    assert "triton" not in tunableop, "a backend without Triton candidates has no such default"


def test_the_cublaslt_search_asks_for_triton_unless_turned_off_and_other_tuners_only_when_asked():
    """``luigi ... TuneWorkload`` with cublaslt times the Triton kernels too; ``--triton false`` turns them off;
    with another backend only an explicit ``--triton`` asks (and the report then says why none is offered)."""
    import luigi.cmdline_parser

    from pipeline.tasks import Bench

    def request(*argv: str) -> dict | None:
        with luigi.cmdline_parser.CmdlineParser.global_instance(["Bench", "--untuned", "x.csv", *argv]) as parser:
            return parser.get_task_obj().triton_request()

    assert request() == {"backend": "cublaslt", "amd": False}
    assert request("--triton") == {"backend": "cublaslt", "amd": False}
    assert request("--triton", "false") is None
    assert request("--backend", "hipblaslt") is None
    assert request("--backend", "hipblaslt", "--triton") == {"backend": "hipblaslt", "amd": True}
    assert Bench(untuned="x.csv", triton=False).triton_request() is None

"""Bench's predicted speedup beside Validate's: which rows are compared, when they agree, the worst one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline.backends.base import DEFAULT, ProblemResult, WinnerRecord
from pipeline.formats.tunableop import parse_key
from pipeline.stages.validate import agreement
from pipeline.stages.validate.measured import MeasuredRow, Pair
from pipeline.stats import Stats

from .helpers import O_PROJ, QKV

OTHER = "GemmTunableOp_BFloat16_TN,tn_4096_1_4096_ld_4096_4096_4096"


def _pair(baseline_us: float, tuned_us: float) -> Pair:
    return Pair(Stats.of([baseline_us] * 3), Stats.of([tuned_us] * 3))


def _row(key: str, solution: str, baseline_us: float, tuned_us: float, confirm_us: float | None = None) -> MeasuredRow:
    problem = parse_key(*key.split(",", 1))
    confirm = _pair(baseline_us, confirm_us) if confirm_us else None
    return MeasuredRow.of(problem, key, solution, 1, None, 1.0, _pair(baseline_us, tuned_us), confirm)


def _result(key: str, winner: str, default_us: float, winner_us: float) -> ProblemResult:
    result = ProblemResult(parse_key(*key.split(",", 1)), default_us=default_us, winner_us=default_us)
    result.crown(winner, winner_us, WinnerRecord({"SolutionIndex": 1}))
    return result


def test_rows_are_compared_with_what_bench_predicted_for_that_problem_and_solution():
    results = [_result(QKV, "Gemm_A", 10.0, 9.0), _result(O_PROJ, "Gemm_B", 10.0, 8.0), _result(OTHER, "Gemm_C", 5, 4)]
    rows = [
        _row(QKV, "Gemm_A", 10.0, 9.05, 9.1),  # x1.105 for x1.111: agrees; its confirmation x1.099 agrees too
        _row(O_PROJ, "Gemm_B", 10.0, 9.6, 9.0),  # x1.042 for x1.25: does not; nor its confirmation, x1.111
        _row(OTHER, "Gemm_Other", 5.0, 5.2),  # another solution than Bench's (e.g. a --results file): no prediction
        _row(OTHER.replace("_1_", "_2_").replace("tn_4096_1", "tn_4096_2"), DEFAULT, 5.0, 5.0),
    ]
    summary = agreement.agreement(rows, agreement.predictions(results))
    assert [r["key"] for r in summary["rows"]] == [QKV, O_PROJ]
    assert [r["agrees"] for r in summary["rows"]] == [True, False]
    assert summary["agreeing_fraction"] == 0.5 and summary["predicted_rows"] == 2
    pooled = math.sqrt(10 / 9.6 * 10 / 9.0)  # Validate's two pairs of the row, x1.042 and x1.111
    assert summary["worst_key"] == O_PROJ and abs(summary["worst_validated"] - pooled) < 1e-12
    assert summary["rows"][1]["first"] == 10 / 9.6 and summary["rows"][1]["confirmed"] == 10 / 9.0
    assert summary["self_agreeing"] == [1, 2], "Validate's own repeat agreed on one of the two"
    assert [r["default_us"] for r in summary["rows"]] == [{"bench": 10.0, "validate": 10.0}] * 2
    said = agreement.line(summary)
    assert "2 winners, 50% within 2%" in said and "x1.076" in said and "first pair on 1 of 2" in said
    json.dumps(summary)  # it goes into summary.json as it is


def test_a_default_result_and_a_failed_one_predict_nothing():
    failed = _result(QKV, "Gemm_A", 10.0, 9.0)
    failed.errors.append("boom")
    assert agreement.predictions([_result(QKV, "Gemm_A", 10.0, 8.0)]) == {
        (parse_key(*QKV.split(",", 1)), "Gemm_A"): agreement.Prediction(1.25, 10.0)
    }
    default = ProblemResult(parse_key(*O_PROJ.split(",", 1)), default_us=10.0, winner_us=10.0)
    assert agreement.predictions([failed, default]) == {}
    summary = agreement.agreement([_row(QKV, "Gemm_A", 10.0, 9.0)], {})
    assert summary["predicted_rows"] == 0 and summary["agreeing_fraction"] is None
    assert "predicted no row" in agreement.line(summary)


def test_validate_s_figure_pools_its_pairs_and_a_summary_written_before_is_recomputed_from_its_figures():
    """The first pair strays 3% where the confirmation agrees with Bench (as on the H100): the pooled figure
    agrees; a row without a confirmation is its first pair; an older summary (validated = first pair, no
    ``first``) is recomputed from what it recorded, and a current one is left as it is."""
    results = [_result(QKV, "Gemm_A", 10.0, 9.434), _result(O_PROJ, "Gemm_B", 10.0, 9.0)]  # x1.060, x1.111
    rows = [_row(QKV, "Gemm_A", 10.0, 9.681, 9.452), _row(O_PROJ, "Gemm_B", 10.0, 9.3)]  # x1.033 / x1.058; x1.075
    summary = agreement.agreement(rows, agreement.predictions(results))
    strayed, alone = summary["rows"]
    assert abs(strayed["first"] / strayed["predicted"] - 1) > 0.02, "the first pair alone would disagree"
    assert strayed["agrees"] and strayed["validated"] == math.sqrt(strayed["first"] * strayed["confirmed"])
    assert alone["confirmed"] is None and alone["validated"] == alone["first"] == 10 / 9.3 and not alone["agrees"]
    assert summary["self_agreeing"] == [0, 1] and summary["agreeing_fraction"] == 0.5
    old = {**summary, "rows": [{k: v for k, v in r.items() if k not in ("first", "default_us")}
                               | {"validated": r["first"]} for r in summary["rows"]]}  # fmt: skip
    old["agreeing_fraction"] = 0.0
    without_defaults = [{k: v for k, v in r.items() if k != "default_us"} for r in summary["rows"]]
    assert agreement.upgraded(old) == {**summary, "rows": without_defaults}, "the times it never kept stay unknown"
    assert agreement.upgraded(summary) == summary


def test_bench_agreement_combines_its_own_outputs_of_one_device_and_refuses_two(tmp_path):
    """Runs measured in separate device calls combine from the files the script wrote for each."""
    from .helpers import bench_module

    script = bench_module("bench_agreement")

    def output(name: str, device: str, agrees: list[bool], validated: list[float]) -> Path:
        rows = [
            {"key": f"k{i}", "solution": "s", "predicted": 1.05, "validated": v, "agrees": a}
            for i, (a, v) in enumerate(zip(agrees, validated, strict=True))
        ]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"device": device, "runs": [{"run": f"workdir/{name}", "rows": rows}]}))
        return path

    first = output("readme", "H100", [True, True, False], [1.04, 1.05, 1.0])
    second = output("fp8", "H100", [True], [0.995])
    combined = script.collect([first, second])
    assert combined["predicted_rows"] == 4 and combined["agreeing_fraction"] == 0.75
    assert combined["worst_validated"] == 0.995 and combined["worst"]["run"] == "fp8"
    library = combined["by_source"]["library"]
    assert library["rows"] == 4 and library["agreeing_fraction"] == 0.75 and set(combined["by_source"]) == {"library"}
    offsets = [100 * math.log(1.05 / v) for v in (1.04, 1.05, 1.0, 0.995)]
    assert library["mean_offset_pct"] == pytest.approx(sum(offsets) / 4) and library["sd_offset_pct"] > 0
    triton = script.by_source([{"solution": "triton_r1c1k512_s1_g1_w2_st2", "predicted": 1.0, "validated": 1.02,
                                "agrees": True}])["triton"]  # fmt: skip
    assert triton["rows"] == 1 and triton["mean_offset_pct"] == pytest.approx(-100 * math.log(1.02))
    assert triton["sd_offset_pct"] is None
    again = tmp_path / "all.json"
    again.write_text(json.dumps(combined))
    assert script.collect([again])["predicted_rows"] == 4, "a combined file combines again"
    with pytest.raises(SystemExit, match="not H100"):
        script.collect([first, output("other", "H200", [True], [1.02])])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"bad\.json: not a file bench_agreement\.py wrote"):
        script.collect([tmp_path / "bad.json"])


@pytest.mark.parametrize("name", ["bench_agreement_h100_2026-11-27_final.json"])
def test_a_committed_agreement_record_holds_the_figures_of_its_rows(name):
    record = json.loads((Path(__file__).parents[1] / "bench" / "results" / name).read_text())
    rows = [row for run in record["runs"] for row in run["rows"]]
    assert record["predicted_rows"] == len(rows) == sum(run["predicted_rows"] for run in record["runs"])
    for row in rows:  # a row agrees where its prediction is within the band of its validation
        assert row["agrees"] == (abs(math.log(row["predicted"] / row["validated"])) <= math.log1p(0.02) + 1e-12)
    assert record["agreeing_fraction"] == pytest.approx(sum(r["agrees"] for r in rows) / len(rows))
    assert record["worst_validated"] == min(r["validated"] for r in rows) >= record["targets"]["worst_validated"]


@pytest.mark.parametrize("name", ["decode_hbm_h100_2026-11-27_swap_literal.json"])
def test_a_combined_decode_hbm_record_holds_the_summary_of_its_rows(name):
    """bench/results/decode_hbm_*: its geomeans (over all rows and per token count), its list of rows more than
    1% below the better rival and its counts of literal and swapped winners are those of its rows."""
    from pipeline.stats import geomean

    record = json.loads((Path(__file__).parents[1] / "bench" / "results" / name).read_text())
    rows = record["rows"]
    assert len(rows) == 45 and sum(p["rows"] for p in record["parts"]) == 45
    groups = {"all": rows, "T=1": [r for r in rows if r["tokens"] == 1], "T=4,8": [r for r in rows if r["tokens"] > 1]}
    for group, members in groups.items():
        for method, value in record["geomean_hbm_fraction"][group].items():
            assert value == pytest.approx(geomean(r["hbm"][method] for r in members), abs=1e-4), (group, method)
    below = [r for r in rows if r["hbm"]["product"] < 0.99 * max(r["hbm"]["cublaslt"], r["hbm"]["max_autotune"])]
    assert record["product_below_best_rival_by_1pct"] == [f"{r['model']} {r['gemm']} T={r['tokens']}" for r in below]
    assert record["literal_wins"] == sum(r["winners"]["product"].endswith("_lit") for r in groups["T=1"]) == 14
    assert record["swapped_wins"] == sum(r["winners"]["product"].endswith("_swap") for r in groups["T=4,8"])

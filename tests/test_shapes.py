from __future__ import annotations

import json

import pytest

from pipeline.formats.tunableop import TunableOpFormatError
from pipeline.stages.gather.shapes import (
    ShapeInputError,
    apply_weights,
    expand_inputs,
    gather,
    read_shapes_json,
    summary_table,
    write_shapes_json,
)

from .helpers import FIXTURES

LINES = [
    "GemmTunableOp_BFloat16_TN,tn_6144_128_4096_ld_4096_4096_6144",
    "GemmTunableOp_BFloat16_TN,tn_4096_128_4096_ld_4096_4096_4096",
]


def _per_gpu_files(directory, gpus=4):
    directory.mkdir(parents=True, exist_ok=True)
    for gpu in range(gpus):
        lines = LINES if gpu % 2 == 0 else LINES[:1]
        (directory / f"untuned{gpu}.csv").write_text("".join(line + "\n" for line in lines))
    return directory


def test_dedupe_counts_and_sources(tmp_path):
    run = _per_gpu_files(tmp_path / "run")
    result = gather([str(run / "untuned?.csv")])
    assert len(result.files) == 4 and result.lines == 6
    by_m = {r.problem.m: r for r in result.shapes}
    assert by_m[6144].count == 4 and by_m[4096].count == 2
    assert by_m[4096].sources == [str(run / "untuned0.csv"), str(run / "untuned2.csv")]
    assert by_m[6144].time_ms is None


def test_results_time_is_the_best_recorded(tmp_path):
    slow = tmp_path / "a.csv"
    slow.write_text(f"Validator,PT_VERSION,2.11.0\n{LINES[0]},Default,0.05\n")
    fast = tmp_path / "b.csv"
    fast.write_text(f"Validator,PT_VERSION,2.11.0\n{LINES[0]},Gemm_Cublaslt_id_1_tile_2_stages_3,0.03\n")
    result = gather([str(tmp_path)])
    (record,) = result.shapes
    assert (record.count, record.time_ms, record.solution) == (2, 0.03, "Gemm_Cublaslt_id_1_tile_2_stages_3")


def test_expand_inputs_files_dirs_globs_and_errors(tmp_path):
    run = _per_gpu_files(tmp_path / "run", gpus=2)
    (run / "notes.txt").write_text("not a csv")
    assert expand_inputs([str(run)]) == [run / "untuned0.csv", run / "untuned1.csv"]
    assert expand_inputs([str(run / "untuned1.csv"), str(run / "*.csv")]) == [
        run / "untuned1.csv",
        run / "untuned0.csv",
    ]
    with pytest.raises(ShapeInputError, match=r"missing\.csv: no such file"):
        expand_inputs([str(tmp_path / "missing.csv")])
    with pytest.raises(ShapeInputError, match="pattern matches no file"):
        expand_inputs([str(tmp_path / "none*.csv")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShapeInputError, match=r"directory holds no \.csv file"):
        expand_inputs([str(tmp_path / "empty")])


def test_every_fixture_gathers_and_the_json_round_trips(tmp_path):
    result = gather([str(FIXTURES / "tunableop")])
    out = tmp_path / "shapes.json"
    write_shapes_json(out, result)
    rows = json.loads(out.read_text())
    required = {"op", "dtype", "transa", "transb", "m", "n", "k", "lda", "ldb", "ldc", "batch", "count"}
    assert all(required <= set(row) for row in rows)
    assert {row["transa"] for row in rows} <= {"N", "T"}
    scaled = next(r for r in rows if r["op"] == "ScaledGemmTunableOp" and r["lda"] is not None)
    assert scaled["dtype"].count("_") >= 2  # AT_BT_CT, e.g. Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16
    wildcard = next(r for r in rows if r["n"] == "*")
    assert wildcard["op"] == "GemmTunableOp" and wildcard["dtype"] == "BFloat16"
    back = read_shapes_json(out)
    assert [r.problem for r in back] == [r.problem for r in result.shapes]
    assert sum(r.count for r in back) == result.lines


def test_summary_table_lists_every_shape_and_totals(tmp_path):
    result = gather([str(FIXTURES / "tunableop" / "torch2.11_cuda_results0.csv")])
    table = summary_table(result)
    assert table.splitlines()[0].split() == [
        "op",
        "dtype",
        "layout",
        "m",
        "n",
        "k",
        "batch",
        "serves",
        "count",
        "calls",
        "time%",
        "time_ms",
    ]
    rows = [line.split() for line in table.splitlines()[2:6]]
    assert ["GemmAndBias", "BFloat16", "TN", "11008", "64", "4096", "1", "1", "0.05234"] in rows  # weights unset
    assert [row[0] for row in rows] == ["Gemm", "Gemm", "GemmAndBias", "GemmStridedBatched"]
    assert table.rstrip().endswith("4 distinct GEMMs from 4 lines in 1 files")


def test_strict_and_lenient_gather(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{LINES[0]}\nGemmTunableOp_Half_TN,tn_8_8\n{LINES[1]}\n")
    with pytest.raises(TunableOpFormatError, match=r"bad.csv:2: "):
        gather([str(bad)])
    result = gather([str(bad)], lenient=True)
    assert len(result.shapes) == 2 and len(result.skipped) == 1
    assert "1 malformed lines skipped (--lenient):" in summary_table(result)
    assert f"{bad}:2: " in summary_table(result)


def test_bad_shapes_json_names_the_row(tmp_path):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"op_signature": "GemmTunableOp_Half_TN", "params_signature": "tn_1_1", "count": 1}]))
    with pytest.raises(ValueError, match=r"shapes.json: row 0: params 'tn_1_1'"):
        read_shapes_json(path)


def test_weights_from_the_lookup_log_and_baseline_times(tmp_path):
    """calls come from the collection's lookup-log counts, time shares from calls x baseline time per call."""
    path = tmp_path / "untuned0.csv"
    path.write_text(f"{LINES[0]}\n{LINES[1]}\n")
    result = gather([str(path)])
    key0, key1 = (r.key for r in result.shapes)
    apply_weights(result, {"calls": {key0: 30, key1: 10}}, {"per_call_us": {key0: 10.0, key1: 60.0}})
    by_key = {r.key: r for r in result.shapes}
    assert (by_key[key0].calls, by_key[key1].calls) == (30, 10)
    assert by_key[key0].time_share == pytest.approx(300 / 900) and by_key[key1].time_share == pytest.approx(600 / 900)
    assert by_key[key1].per_call_us == 60.0 and result.weight_notes == []
    rows = {row["params_signature"]: row for row in (r.to_json() for r in result.shapes)}
    assert rows[key1.split(",")[1]]["calls"] == 10 and rows[key1.split(",")[1]]["time_share"] == pytest.approx(2 / 3)
    table = summary_table(result)
    assert "66.7" in table and "33.3" in table


def test_weights_without_counts_say_why(tmp_path):
    path = tmp_path / "untuned0.csv"
    path.write_text(f"{LINES[0]}\n{LINES[0]}\n{LINES[1]}\n")
    given = gather([str(path)])
    apply_weights(given, None, None)
    assert {r.key: r.calls for r in given.shapes} == {r.key: r.count for r in given.shapes}
    assert all(r.time_share is None for r in given.shapes)
    assert "each recorded line counts as one call" in given.weight_notes[0]
    swallowed = gather([str(path)])
    apply_weights(swallowed, {"calls": {}, "note": "the workload's stderr held no TunableOp lookup line"}, None)
    assert "no TunableOp lookup line" in summary_table(swallowed)
    partial = gather([str(path)])
    apply_weights(
        partial,
        {"calls": {partial.shapes[0].key: 5, "GemmTunableOp_Half_TN,tn_8": 1}},
        {"per_call_us": {partial.shapes[0].key: 1.0}},
    )
    assert [r.calls for r in partial.shapes] == [5, 1]
    assert all(r.time_share is None for r in partial.shapes), "no share without a time for every GEMM"
    assert any("ignored" in n for n in partial.weight_notes)
    assert any("have no lookup-log count" in n for n in partial.weight_notes)

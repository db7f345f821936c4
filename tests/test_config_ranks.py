"""bench/config_ranks.py on CPU: the loss each pruning rule would have caused, from Bench's results."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import ROOT, bench_module


def _result(m: int, n: int, k: int, times: dict[str, float], library: float) -> dict:
    candidates = [{"name": name, "screen_us": us} for name, us in times.items()]
    candidates += [{"name": "Default", "screen_us": library}, {"name": "triton_r16c64k128_s1_g1_w4_st4", "error": "x"}]
    return {"problem": {"op": "gemm", "m": m, "n": n, "k": k, "a_type": "bfloat16"}, "candidates": candidates}


def test_a_rule_s_loss_is_its_best_kept_config_over_the_best_of_all():
    ranks = bench_module("config_ranks")
    results = [
        _result(4096, 1, 4096, {"triton_r1c1k2048_s1_g1_w8_st2": 10.0, "triton_r16c64k128_s1_g8_w4_st4": 12.0}, 11),
        _result(4096, 1, 4096, {"triton_r1c4k512_s1_g1_w4_st1": 9.0, "triton_r16c32k128_s1_g8_w4_st3": 8.0}, 9),
        _result(4096, 512, 4096, {"triton_r128c128k64_s1_g8_w8_st3": 20.0, "triton_r64c64k32_s1_g8_w4_st4": 25.0}, 15),
        _result(4096, 512, 4096, {"triton_r64c64k32_s1_g8_w4_st4": 30.0}, 15),  # no K tile of 64 to keep
    ]
    rows = ranks.gemms(results)
    assert [r["tokens"] for r in rows] == [1, 1, 512, 512] and rows[0]["library_us"] == 11
    report = ranks.ranks(rows)
    gemv = report["rules"]["one token, gemv alone"]
    assert gemv == {"gemms": 2, "worst_loss": 1.125, "configs_kept": 2, "configs": 4}  # 9 us kept, 8 us dropped
    tiles = report["rules"]["more tokens, K tiles of 64"]
    assert tiles["gemms"] == 2 and tiles["worst_loss"] == float("inf") and tiles["configs_kept"] == 1
    assert [g["best_family"] for g in report["gemms"]] == ["gemv", "skinny", "tiled", "tiled"]
    assert report["gemms"][2]["triton_over_library"] == round(20 / 15, 4)


def test_the_ranks_with_the_kernels_compiled_per_shape_name_the_next_prunings():
    """Over the evening's four jobs: no one-token GEMM's best config was an eight-column literal one, and the
    literal configs alone came within 0.1% of the best everywhere (docs/triton.md, "What Bench compiles")."""
    record = json.loads((ROOT / "bench" / "results" / "config_ranks_h100_2026-11-27_literal.json").read_text())
    rules = record["rules"]
    one_token = [g for g in record["gemms"] if g["gemm"].split()[1].split("x")[1] == "1"]  # "op MxNxK dtype"
    assert rules["one token, no eight-column literal"]["worst_loss"] == 1.0
    assert rules["one token, no eight-column literal"]["gemms"] == len(one_token) == 10
    assert 1.0 < rules["one token, literal alone"]["worst_loss"] < 1.001
    assert {g["best_family"] for g in one_token} == {"literal", "gemv"}
    assert all("_lit" not in g["best"] or "c1k" in g["best"] for g in one_token)


def test_a_run_without_results_or_with_bad_ones_is_named(tmp_path):
    from pipeline.errors import BadInput

    ranks = bench_module("config_ranks")
    with pytest.raises(BadInput, match=r"nowhere/bench/results\.json: no such file"):
        ranks.read_runs([tmp_path / "nowhere"])
    bench = tmp_path / "cut" / "bench"
    bench.mkdir(parents=True)
    (bench / "results.json").write_text('[\n {"problem": {"n": 1},\n')
    with pytest.raises(BadInput, match=r"cut/bench/results\.json:3:1: not Bench results JSON"):
        ranks.read_runs([tmp_path / "cut"])
    (bench / "results.json").write_text('[{"problem": {"n": 1}}]')
    with pytest.raises(BadInput, match=r"cut/bench/results\.json: not Bench's results \(KeyError: 'candidates'\)"):
        ranks.read_runs([tmp_path / "cut"])
    good = _result(4096, 1, 4096, {"triton_r1c1k2048_s1_g1_w8_st2": 10.0}, 11)
    (bench / "results.json").write_text(json.dumps([good]))
    assert [r["tokens"] for r in ranks.read_runs([tmp_path / "cut"])] == [1]


@pytest.mark.parametrize("out", ["input", "run", "cwd"])
def test_the_report_is_never_written_over_an_input_or_a_directory(tmp_path, monkeypatch, out):
    bench = tmp_path / "run" / "bench"
    bench.mkdir(parents=True)
    results = bench / "results.json"
    results.write_text(json.dumps([_result(4096, 1, 4096, {"triton_r1c1k2048_s1_g1_w8_st2": 10.0}, 11)]))
    before = results.read_bytes()
    monkeypatch.chdir(tmp_path)
    target = {"input": "run/bench/results.json", "run": "run", "cwd": "."}[out]
    script = str(ROOT / "bench" / "config_ranks.py")
    done = subprocess.run([sys.executable, script, "run", "--out", target], capture_output=True, text=True)
    assert done.returncode == 12, done.stderr
    assert ("is a directory" if out != "input" else "is one of the inputs") in done.stderr
    assert results.read_bytes() == before and sorted(p.name for p in tmp_path.rglob("*")) == [
        "bench",
        "results.json",
        "run",
    ]

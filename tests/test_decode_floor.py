"""The read floors measured on the H100 (bench/results/decode_floor_*.json) and their analysis against the
decode GEMMs of bench/results/decode_hbm_*.json, on CPU, as ``bench/decode_floor.py analyse`` runs it."""

from __future__ import annotations

import json

import pytest

from .helpers import ROOT, bench_module

FLOORS = ROOT / "bench" / "results" / "decode_floor_h100_2026-11-26.json"
DECODE = ROOT / "bench" / "results" / "decode_hbm_h100_2026-11-25.json"


@pytest.fixture(scope="module")
def floor():
    return bench_module("decode_floor")


@pytest.fixture(scope="module")
def runs():
    return json.loads(FLOORS.read_text())["runs"]


def test_each_floor_is_its_bytes_over_the_runs_bandwidth_and_time(runs):
    for run in runs:
        limit = run["copy_bandwidth_bytes_per_s"]
        for f in run["floors"]:
            assert f["read_frac"] == pytest.approx(f["bytes"] / limit / f["read_us"] * 1e6)
            assert f["copy_frac"] == pytest.approx(2 * f["bytes"] / limit / f["copy_us"] * 1e6)
            assert f["read_config"].startswith("read_b")


def test_the_floor_is_interpolated_between_sizes_and_flat_beyond(floor):
    points = [{"bytes": 1_000, "read_frac": 0.5}, {"bytes": 100_000, "read_frac": 0.9}]
    assert floor.floor_at(points, 10) == 0.5
    assert floor.floor_at(points, 1_000) == 0.5
    assert floor.floor_at(points, 10_000) == pytest.approx(0.7)  # halfway on a log scale
    assert floor.floor_at(points, 100_000) == pytest.approx(0.9)
    assert floor.floor_at(points, 10**9) == 0.9


def test_smaller_launches_reach_less_of_the_limit(runs):
    last = sorted(runs[-1]["floors"], key=lambda f: f["bytes"])
    fractions = [f["read_frac"] for f in last]
    assert fractions == sorted(fractions)
    assert fractions[0] < 0.85 < fractions[-1]  # 17 MB against 117 MB


def test_the_analysis_divides_each_method_by_the_floor_at_its_bytes(floor, runs):
    decode = json.loads(DECODE.read_text())["rows"]
    report = floor.analyse(runs[-1]["floors"], decode)
    assert report["geomean"]["all"]["gemms"] == len(decode) == len(report["rows"])
    for row, measured in zip(report["rows"], decode, strict=True):
        expected = floor.floor_at(runs[-1]["floors"], measured["bytes"])
        assert row["read_floor"] == pytest.approx(expected, abs=1e-4)
        for method, fraction in measured["hbm"].items():
            assert row["of_floor"][method] == pytest.approx(fraction / expected, abs=2e-4)
    models = {r["model"] for r in decode}
    assert set(report["geomean"]) == {"all", *models}

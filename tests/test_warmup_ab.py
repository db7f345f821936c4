"""bench/warmup_ab.py's summary and its committed record, on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import bench_module

RECORD = Path(__file__).parents[1] / "bench" / "results" / "warmup_ab_h100_2026-11-27.json"


def _rep(a: float, b: float, wall: tuple[float, float] = (1.4, 0.6)) -> dict:
    return {"old": {"speedup": a, "wall_s": wall[0]}, "new": {"speedup": b, "wall_s": wall[1]}}


def test_the_summary_pairs_each_repeat_s_two_settings():
    summary = bench_module("warmup_ab").summary
    rows = [{"repeats": [_rep(1.10, 1.10), _rep(1.12, 1.12)]}, {"repeats": [_rep(1.00, 1.02), _rep(1.00, 1.02)]}]
    found = summary(rows, ["old", "new"])
    assert found["winners"] == 2 and found["difference_mean"] == pytest.approx(0.01)
    assert found["worst_difference"] == pytest.approx(0.02) and found["difference_sd"] == pytest.approx(0.02 / 2**0.5)
    assert found["repeat_sd"]["old"] == pytest.approx(0.02 / 2**0.5 / 1.11 / 2)  # the median of that and 0
    assert found["wall_s"] == {"old": pytest.approx(1.4), "new": pytest.approx(0.6)}


def test_the_committed_record_is_its_rows_summary_and_the_short_warm_up_moved_no_verdict():
    """34 winners of the README's job and its FP8 variant, three repeats each way (H100, 2026-11-27): the paired
    difference is within the repeats' own noise, and a verdict takes under half the time."""
    record = json.loads(RECORD.read_text())
    names = list(record["settings"])
    assert record["settings"][names[1]] == [50.0, 1000.0] and record["device"]["name"].startswith("NVIDIA H100")
    summary = bench_module("warmup_ab").summary(record["rows"], names)
    for key in ("winners", "difference_mean", "difference_sd", "worst_difference", "repeat_sd", "wall_s"):
        assert summary[key] == pytest.approx(record["summary"][key]), key
    assert len(record["rows"]) == 34 and all(len(r["repeats"]) == 3 for r in record["rows"])
    assert abs(summary["difference_mean"]) < 0.001 and summary["difference_sd"] < 0.005
    assert summary["wall_s"][names[1]] < 0.5 * summary["wall_s"][names[0]]

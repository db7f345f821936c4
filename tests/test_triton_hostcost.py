"""The committed record of bench/triton_hostcost.py --compiled: its figures are its samples', on CPU."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

RECORD = Path(__file__).parents[1] / "bench" / "results" / "triton_hostcost_h100_2026-11-27.json"


def test_the_record_s_medians_and_differences_are_its_samples_and_every_call_was_routed():
    record = json.loads(RECORD.read_text())
    samples, medians = record["samples_us"], record["median_us_per_call"]
    arms = [f"{s} {form}" for form in ("eager", "compiled") for s in ("torch", "no row", "cublaslt row", "triton row")]
    assert sorted(samples) == sorted(medians) == sorted(arms)
    for arm in arms:
        assert len(samples[arm]) == record["rounds"] and medians[arm] == statistics.median(samples[arm])
        if not arm.startswith("torch"):
            torch_arm = "torch " + arm.rsplit(" ", 1)[1]
            assert record["over_torch_us"][arm] == pytest.approx(medians[arm] - medians[torch_arm])
            calls = record["calls"][arm]  # the last round's: every call tuned, or fallen back for want of a row
            if arm.startswith("no row"):
                assert calls["tuned"] == {} and calls["fallbacks"] == {"no tuned row": record["calls_per_round"]}
            else:
                assert sum(calls["tuned"].values()) == record["calls_per_round"] and calls["fallbacks"] == {}
    for setting in ("no row", "cublaslt row", "triton row"):  # what docs/triton.md states: compiled costs more
        assert record["over_torch_us"][f"{setting} compiled"] > 1.5 * record["over_torch_us"][f"{setting} eager"] > 0


AB_RECORD = Path(__file__).parents[1] / "bench" / "results" / "runtime_hostcost_ab_h100_2026-11-27.json"


def test_the_dispatch_ab_record_is_its_samples_and_the_new_runtime_leaves_an_op_without_rows_alone():
    from .helpers import bench_module

    record = json.loads(AB_RECORD.read_text())
    summary = bench_module("hostcost_ab").summary(record["samples_us"])
    for field in ("median_us_per_call", "over_torch_us", "paired_new_minus_old_us"):
        assert summary[field] == record[field]
    arms = {f"{case} {form}" for case in ("tuned", "no row", "bmm") for form in ("eager", "compiled")}
    assert set(record["over_torch_us"]) == arms
    for arm in arms:
        assert len(record["samples_us"][f"new {arm}"]) == len(record["samples_us"][f"old {arm}"]) == record["rounds"]
        assert len(record["samples_us"][f"torch {arm}"]) == 2 * record["rounds"]  # one before each runtime
    old, new = record["last_round_status"]["old"], record["last_round_status"]["new"]
    calls = record["calls_per_sample"]
    assert new["routed_ops"] == ["mm", "addmm"] and old["routed_ops"] is None  # the old tree reported none
    assert sum(old["tuned_calls"].values()) == sum(new["tuned_calls"].values()) == 2 * calls  # eager + compiled
    assert old["fallbacks"] == {"no tuned row": 4 * calls}  # the linear without a row and the bmm, both forms
    assert new["fallbacks"] == {"no tuned row": 2 * calls}  # the bmm never reached the runtime
    bmm = record["paired_new_minus_old_us"]["bmm eager"]["rounds"]  # what docs/triton.md states
    assert sum(d < 0 for d in bmm) >= 0.8 * len(bmm)


def test_the_paired_summary_pairs_rounds_and_skips_arms_not_measured():
    from .helpers import bench_module

    samples = {
        "torch tuned eager": [10.0, 12.0],
        "old tuned eager": [15.0, 20.0],
        "new tuned eager": [14.0, 17.0],
    }
    out = bench_module("hostcost_ab").summary(samples)
    assert out["paired_new_minus_old_us"] == {"tuned eager": {"rounds": [-1.0, -3.0], "median": -2.0}}
    assert out["over_torch_us"]["tuned eager"] == {"old": 6.5, "new": 4.5}

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

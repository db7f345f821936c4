"""The committed records of bench/triton_bench_cost.py: their figures are their rows', on CPU."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

RESULTS = Path(__file__).parents[1] / "bench" / "results"


@pytest.mark.parametrize("name", ["triton_bench_cost_h100_2026-11-27_pruned.json"])
def test_a_record_s_medians_and_wins_are_its_rows(name):
    record = json.loads((RESULTS / name).read_text())
    rows = record["rows"]
    assert len(rows) == 15 and len({r["gemm"] for r in rows}) == 15
    for r in rows:
        for cache in ("cold", "warm"):
            added = r[f"triton_{cache}"]["wall_s"] - r["library"]["wall_s"]
            assert r[f"added_s_{cache}"] == pytest.approx(added, abs=0.011)
        winner = r["triton_warm"]["winner"]
        if winner.startswith("triton_"):  # a kernel of ours ships with its figures against the fp32 reference
            figures = r["triton_warm"]["numerics"]
            assert figures["beyond_fraction"] == 0 and figures["relative_error"] < figures["tolerance"]
    for cache in ("cold", "warm"):
        assert record["median_added_s"][cache] == statistics.median(r[f"added_s_{cache}"] for r in rows)
    assert record["triton_wins"] == sum(r["triton_warm"]["winner"].startswith("triton_") for r in rows)

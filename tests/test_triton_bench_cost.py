"""The committed records of bench/triton_bench_cost.py: their figures are their rows', on CPU."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

RESULTS = Path(__file__).parents[1] / "bench" / "results"


@pytest.mark.parametrize(
    "name",
    [
        "triton_bench_cost_h100_2026-11-27.json",
        "triton_bench_cost_h100_2026-11-27_8threads.json",
        "triton_bench_cost_h100_2026-11-27_literal.json",
        "triton_bench_cost_h100_2026-11-27_pruned.json",
    ],
)
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


def test_sixteen_compile_threads_compiled_the_same_configs_faster_over_the_run():
    eight, sixteen = (
        json.loads((RESULTS / name).read_text())["rows"]
        for name in ("triton_bench_cost_h100_2026-11-27_8threads.json", "triton_bench_cost_h100_2026-11-27.json")
    )
    assert [r["gemm"] for r in eight] == [r["gemm"] for r in sixteen]
    total = [sum(r["triton_cold"]["phases"]["triton_compile_s"] for r in rows) for rows in (eight, sixteen)]
    assert total[1] < 0.8 * total[0]


def test_kernels_compiled_for_their_shape_compile_on_every_shape_cold():
    """With the literal one-token kernel and the swapped tile compiled per shape, a GEMM whose dtype and alignment
    an earlier GEMM had compiled for still compiles its own kernels cold (it found them all compiled before)."""
    shared, per_shape = (
        {
            r["gemm"]: r["triton_cold"]["phases"]["triton_compile_s"]
            for r in json.loads((RESULTS / name).read_text())["rows"]
        }
        for name in ("triton_bench_cost_h100_2026-11-27.json", "triton_bench_cost_h100_2026-11-27_literal.json")
    )
    later = [g for g in shared if shared[g] < 0.1]  # the GEMMs that found every kernel compiled before
    assert later and all(per_shape[g] > 3 * shared[g] for g in later)
    assert all(per_shape[g] > 0.2 for g in later)


def test_the_literal_kernel_alone_and_shorter_later_warm_ups_cut_bench_s_added_time():
    """One token compiles the literal configs alone, and a verdict's windows after the first warm up for 50 ms
    (``measure.TimingSettings.rewarm_ms``): each verdict and its report take about 0.75 s less, so a GEMM that a
    Triton kernel wins pays about 1.5 s less in its final phase, and one-token GEMMs compile fewer configs."""
    before, after = (
        {r["gemm"]: r for r in json.loads((RESULTS / name).read_text())["rows"]}
        for name in ("triton_bench_cost_h100_2026-11-27_literal.json", "triton_bench_cost_h100_2026-11-27_pruned.json")
    )
    assert before.keys() == after.keys()
    for gemm, row in after.items():
        if row["triton_warm"]["winner"].startswith("triton_") and before[gemm]["triton_warm"]["winner"] != "Default":
            final = [r["triton_warm"]["phases"]["final_s"] for r in (before[gemm], row)]
            assert final[1] < final[0] - 1.0, (gemm, final)
    one_token = [g for g in after if g.endswith("T=1")]
    compiled = [
        sum(rows[g]["triton_cold"]["phases"]["triton_compile_s"] for g in one_token) for rows in (before, after)
    ]
    assert compiled[1] < 0.5 * compiled[0], compiled
    assert after["qkv T=1"]["triton_warm"]["winner"].endswith("_lit")

"""The M grid (``--m-grid``, ``--m-max``): the token counts each weight is tuned at, the bucket each grid point
serves, the rows a bundle ships for them, and the refusal of values the pipeline cannot use."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.formats.tunableop import TunableOpEntry, format_key, parse_key
from pipeline.problem import GemmProblem
from pipeline.stages.gather import grid_budget, mgrid
from pipeline.stages.gather.shapes import (
    GatherResult,
    ShapeRecord,
    apply_grid,
    budget_shares,
    gather,
    read_shapes_json,
    write_shapes_json,
)

from .helpers import UNTUNED

QKV = GemmProblem("gemm", "T", "N", 6144, 7, 4096, 4096, 4096, 6144)
GRID_KEY = "GemmTunableOp_BFloat16_TN,tn_6144_16_4096_ld_4096_4096_6144"  # a grid row whose bucket is held out


def test_serving_grid_holds_the_capture_sizes_then_the_ladder():
    points = mgrid.serving_points(4096)
    assert points[:4] == [1, 2, 4, 8]
    assert [p for p in points if p <= 512] == list(mgrid.CAPTURE_SIZES)
    assert [p for p in points if p > 512] == [768, 1024, 1536, 2048, 3072, 4096]
    assert mgrid.serving_points(300)[-1] == 304  # rounded up to the grid
    assert mgrid.serving_points(5000)[-1] == 6144
    assert mgrid.serving_points(1) == [1]


@given(st.integers(1, 1 << 20))
def test_the_serving_grid_ends_at_the_first_point_at_or_above_its_top(top):
    points = mgrid.serving_points(top)
    assert points == sorted(set(points))
    assert points[-1] >= top and (len(points) == 1 or points[-2] < top)


def test_grid_points_by_spec():
    seen = [4, 128, 1000]
    assert mgrid.grid_points(mgrid.EXACT, seen) == seen
    serving = mgrid.grid_points(mgrid.SERVING, seen)
    assert set(seen) <= set(serving) and serving[-1] == 1024 and 8 in serving and 1536 not in serving
    assert mgrid.grid_points(mgrid.SERVING, seen, m_max=2000)[-1] == 2048
    assert mgrid.grid_points((1, 16, 5000), seen, m_max=2000) == [1, 16, 1000]  # the largest ran closes it
    assert mgrid.grid_points((1, 16, 2048), seen) == [1, 16, 2048]


def test_buckets_round_up_to_the_next_grid_point():
    assert mgrid.buckets([1, 2, 4, 8]) == {1: (1, 1), 2: (2, 2), 4: (3, 4), 8: (5, 8)}
    assert mgrid.buckets([3, 9], mgrid.EXACT) == {3: (3, 3), 9: (9, 9)}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("0", "'0' is not a positive integer"),
        ("1,1", "1 is repeated"),
        ("4,2", "2 comes after 4"),
        ("1.5", "'1.5' is not a positive integer"),
        ("1,,2", "'' is not a positive integer"),
        ("grid", "'grid' is not a positive integer"),
    ],
)
def test_bad_grids_are_refused_naming_the_value(text, said):
    with pytest.raises(mgrid.GridError, match=f"--m-grid {text!r}: {said}") as caught:
        mgrid.parse_grid(text)
    assert caught.value.exit_code == 12


def test_a_grid_list_and_m_max():
    assert mgrid.parse_grid(" 1, 2,16 ") == (1, 2, 16)
    assert mgrid.parse_grid("serving") == mgrid.SERVING
    assert mgrid.parse_m_max(None) is None and mgrid.parse_m_max("0") is None and mgrid.parse_m_max("64") == 64
    with pytest.raises(mgrid.GridError, match="--m-max 'x'"):
        mgrid.parse_m_max("x")
    with pytest.raises(mgrid.GridError, match="--m-max 64 is below M = 128, which the workload ran"):
        mgrid.grid_points(mgrid.SERVING, [1, 128], m_max=64)


def test_a_family_is_the_gemm_at_every_token_count():
    other = QKV.with_tokens(300)
    assert other.n == 300 and other.token_family() == QKV.token_family()
    assert GemmProblem("gemm", "T", "N", 6144, 7, 4096, 4096, 4104, 6144).token_family() != QKV.token_family()
    packed = GemmProblem("gemm", "N", "T", 64, 32, 16, 64, 32, 64)  # ldb follows n
    assert packed.with_tokens(100).ldb == 100 and packed.with_tokens(100).token_family() == packed.token_family()
    strided = GemmProblem("gemm", "N", "T", 64, 32, 16, 64, 48, 64)  # a fixed stride of a larger buffer
    assert strided.with_tokens(40).ldb == 48 and strided.with_tokens(49) is None
    assert GemmProblem("gemm", "T", "N", 64, "*", 16).token_family() is None


def test_expand_keeps_what_ran_and_adds_the_grid():
    ran = [QKV, QKV.with_tokens(512)]
    points, _ = mgrid.expand(ran, mgrid.SERVING)
    by_n = {p.problem.n: p for p in points}
    assert by_n[7].seen and by_n[7].problem is QKV and by_n[7].bucket == (5, 7)
    assert by_n[8].bucket == (8, 8) and not by_n[8].seen
    assert by_n[512].seen and by_n[512].bucket == (497, 512)
    assert sorted(by_n) == sorted({*mgrid.serving_points(512), 7})
    rotary = GemmProblem("gemm", "N", "N", 94, 1, 1, 94, 1, 94, a_type="float32", b_type="float32", c_type="float32")
    assert mgrid.expand([rotary], mgrid.SERVING) == ([mgrid.GridPoint(rotary, None, True)], "")  # tokens are its m
    line = mgrid.cost_line(mgrid.SERVING, [(p.bucket, p.seeded) for p in points], 2, gpus=4)
    assert f"{len(points)} GEMMs to tune (2 the workload ran" in line and "on 4 GPUs" in line
    narrow = [((n, n), False) for n in range(1, 151)]  # each serves its own count alone: 4 s a GEMM
    assert "about 7 min of Bench on 1 GPU" in mgrid.cost_line(mgrid.SERVING, narrow[:100], 2)
    assert "about 3 min of Bench on 4 GPUs" in mgrid.cost_line(mgrid.SERVING, narrow, 2, gpus=4), "not 2.5: 80% each"
    assert "about 12 min of Bench on 1 GPU" in mgrid.cost_line(mgrid.SERVING, [((5, 8), False)] * 100, 2)


def test_a_power_of_two_that_serves_counts_below_it_is_estimated_at_its_bucket_scoring():
    """Measured on two vLLM-sized grids (docs/serving.md): a power of two searched with a bucket below it is
    crowned three times in four and then scored over its bucket; a count alone, or not a power of two, is not."""
    assert grid_budget.gemm_seconds((5, 8)) == grid_budget.SECONDS_PER_WIDE_ANCHOR > grid_budget.SECONDS_PER_PROBLEM
    assert grid_budget.gemm_seconds((8, 8)) == grid_budget.gemm_seconds((17, 24)) == grid_budget.SECONDS_PER_PROBLEM
    assert grid_budget.gemm_seconds(None) == grid_budget.SECONDS_PER_PROBLEM, "outside any family"
    assert grid_budget.gemm_seconds((5, 8), seeded=True) == grid_budget.SECONDS_PER_SEEDED
    ran = [QKV.with_tokens(n) for n in (3, 4, 64)]  # 4 s, 4 s (4 serves itself alone) and 7 s: 15 searched
    seeded, _ = mgrid.expand(ran, mgrid.SERVING, budget_s=14.4)
    assert [(p.problem.n, p.seeded) for p in seeded] == [(3, True), (4, False), (64, False)], "14.4 s seeded"
    dropped, note = mgrid.expand(ran, mgrid.SERVING, budget_s=14.2)
    assert [p.bucket for p in dropped] == [(1, 4), (5, 64)] and "still" not in note, "14 s: 4 now serves 3 too"
    over, note = mgrid.expand(ran, mgrid.SERVING, budget_s=13.9)
    assert len(over) == 2 and "still over the budget" in note, "dropping 3 saved 0.4 s, not its 3.4"


def test_a_grid_budget_drops_the_finest_points_the_workload_did_not_run_before_anything_it_ran():
    ran = [QKV.with_tokens(n) for n in (3, 7, 300)]  # one family; the serving grid to 304 has 41 points
    full, note = mgrid.expand(ran, mgrid.SERVING)
    assert note == "" and len(full) == 41
    cost = grid_budget.SECONDS_PER_PROBLEM
    fitted, note = mgrid.expand(ran, mgrid.SERVING, budget_s=20 * cost)
    kept = sorted(p.problem.n for p in fitted)
    assert len(kept) <= 20 and {3, 7, 300} <= set(kept)
    assert all(n in (3, 7, 300) or grid_budget.coarseness(n) <= 1 for n in kept)
    assert kept == [1, 2, 3, 4, 7, 8, 16, 32, 64, 128, 192, 256, 300]  # powers of two, multiples of 64
    assert f"{41 - 13} of 41 grid points dropped to fit" in note and "multiples of 64" in note
    by_n = {p.problem.n: p.bucket for p in fitted}
    assert by_n[192] == (129, 192) and by_n[300] == (257, 300)  # buckets widen to the next point kept
    seeded = grid_budget.SECONDS_PER_SEEDED
    alone, note = mgrid.expand(ran, mgrid.SERVING, budget_s=cost + 2 * seeded)
    assert sorted(p.problem.n for p in alone) == [3, 7, 300]  # what ran stays while seeding fits the budget
    assert "the 3 GEMMs the workload ran cost about" in note and "no other grid point is tuned" in note
    assert "not tuned" not in note
    less, note = mgrid.expand(ran, mgrid.SERVING, budget_s=cost + seeded)
    assert {p.problem.n: p.bucket for p in less} == {7: (1, 7), 300: (8, 300)}, "3 served by 7, its next count up"
    assert "to fit, 1 count of its weights, finest first, each served by its weight's next count up" in note
    just, note = mgrid.expand(ran, mgrid.SERVING, budget_s=3 * cost)
    assert len(just) == 3 and "38 of 41 grid points dropped" in note and "and no other point" in note
    assert [grid_budget.coarseness(m) for m in (64, 96, 128, 768, 48, 40, 1)] == [0, 2, 0, 1, 2, 3, 0]


def test_where_what_ran_overruns_the_budget_its_finest_counts_are_seeded_then_dropped():
    """A server's workload runs every capture size: the budget first seeds the finest (their search starts from a
    neighbour's winner), keeping the powers of two and each weight's largest count searched; only where that
    overruns it does it drop counts, finest first, and never those."""
    ran = [QKV.with_tokens(n) for n in mgrid.CAPTURE_SIZES if n <= 72]  # 1, 2, 4, 8, 16, ..., 72: 12 counts
    searched, seeded = grid_budget.SECONDS_PER_PROBLEM, grid_budget.SECONDS_PER_SEEDED
    anchors = 5 * grid_budget.SECONDS_PER_WIDE_ANCHOR  # 4, 8, 16, 32, 64 each serve counts below them
    steps = mgrid.expand(ran, mgrid.SERVING, budget_s=anchors + 4 * searched + 3 * seeded)  # the steps of 8 seeded
    assert sorted(p.problem.n for p in steps[0]) == [n.n for n in ran], "what ran stays, nothing else is added"
    assert sorted(p.problem.n for p in steps[0] if p.seeded) == [24, 40, 56]  # not 72: the weight's largest
    assert "3 of them (the steps of 8 between multiples of 16" in steps[1] and "about 1 min" in steps[1]
    sixteens = mgrid.expand(ran, mgrid.SERVING, budget_s=anchors + 3 * searched + 4 * seeded)
    assert sorted(p.problem.n for p in sixteens[0] if p.seeded) == [24, 40, 48, 56] and "still" not in sixteens[1]
    deep = mgrid.expand(ran, mgrid.SERVING, budget_s=anchors + 3 * searched + 3.5 * seeded)  # under 4 seeded
    assert sorted(p.problem.n for p in deep[0] if not p.seeded) == [1, 2, 4, 8, 16, 32, 64, 72]
    assert sorted(p.problem.n for p in deep[0] if p.seeded) == [40, 48, 56], "24 dropped: finest, then lowest"
    assert "to fit, 1 count of its weights" in deep[1] and "all but the powers of two" in deep[1]
    assert "still" not in deep[1]
    floor = mgrid.expand(ran, mgrid.SERVING, budget_s=anchors + 3 * searched - 1)  # under what no budget drops
    assert sorted(p.problem.n for p in floor[0]) == [1, 2, 4, 8, 16, 32, 64, 72] and "4 counts" in floor[1]
    assert "none is seeded" in floor[1] and "still over the budget" in floor[1]
    assert "on 2 GPUs: --gpus 2)" in floor[1], "8 searched overrun it on one GPU, not on two"
    assert "(12 the workload ran, 3 of them seeded, 0 grid points), about 1 min" in mgrid.cost_line(
        mgrid.SERVING, [(p.bucket, p.seeded) for p in steps[0]], 12
    )


def rotary(m: int) -> GemmProblem:
    """The rotary embedding's position x frequency outer product at ``m`` tokens (its token count is ``m``)."""
    return GemmProblem("gemm", "N", "N", m, 64, 1, m, 1, m, a_type="float32", b_type="float32", c_type="float32")


def test_a_budget_drops_negligible_outer_products_first_then_counts_finest_and_lightest_first():
    """What the vLLM-sized grid asks of a 10-minute budget: the rotary outer products (a few hundredths of a
    percent of the GEMM time, each a search) go first, lightest first; then counts of the weights, the finest
    coarseness first and the lightest within it; a heavy GEMM outside any family, a power of two and a weight's
    largest count stay."""
    counts = (1, 2, 4, 8, 16, 24, 32, 40, 48)
    family = {n: QKV.with_tokens(n) for n in counts}
    light = [rotary(m) for m in (94, 95, 96)]
    heavy = rotary(97)
    shares = {p: 0.1 for p in family.values()} | {family[40]: 0.02, family[24]: 0.03, heavy: 0.05}
    shares |= {light[0]: 0.0003, light[1]: 0.0001, light[2]: 0.0002}
    problems = [*family.values(), *light, heavy]
    searched, seeded = grid_budget.SECONDS_PER_PROBLEM, grid_budget.SECONDS_PER_SEEDED
    wide = grid_budget.SECONDS_PER_WIDE_ANCHOR  # 4, 8, 16 and 32 each serve counts below them
    assert (
        mgrid.expand(problems, mgrid.SERVING, budget_s=4 * wide + 7 * searched + 2 * seeded + 0.1, shares=shares)[
            1
        ].count("not tuned")
        == 0
    ), "seeding 24 and 40 fits: nothing dropped"
    two, note = mgrid.expand(problems, mgrid.SERVING, budget_s=56, shares=shares)  # 62.8 s seeded: two go
    assert {p.problem for p in two} == set(problems) - {light[1], light[2]}, "the two lightest outer products"
    assert "to fit, 2 GEMMs outside any weight family, 0.03% of its GEMM time, run by torch's default" in note
    deeper, note = mgrid.expand(problems, mgrid.SERVING, budget_s=49, shares=shares)  # 50.8 s less 40's 3.4
    assert {p.problem for p in deeper} == {*family.values(), heavy} - {family[40]}, "then 40: finest, lightest"
    assert {p.problem.n: p.bucket for p in deeper if p.bucket}[48] == (33, 48), "48 serves what 40 did"
    assert "3 GEMMs outside any weight family" in note and "1 count of its weights, 2.00% of its GEMM time" in note
    assert [p.problem.n for p in deeper if p.seeded] == [24] and "still" not in note
    floor, note = mgrid.expand(problems, mgrid.SERVING, budget_s=10, shares=shares)
    assert {p.problem for p in floor} == {family[n] for n in (1, 2, 4, 8, 16, 32, 48)} | {heavy}
    assert "still over the budget" in note


def test_apply_grid_drops_the_records_of_counts_the_budget_gives_up_and_says_what_share_they_held():
    counts = (1, 8, 16, 24, 32)
    records = [ShapeRecord(QKV.with_tokens(n), *format_key(QKV.with_tokens(n)), count=1, calls=10) for n in counts]
    for record, share in zip(records, (0.2, 0.2, 0.2, 0.1, 0.3), strict=True):
        record.time_share = share
    result = GatherResult(records, [], 5, [])
    apply_grid(result, mgrid.SERVING, budget_s=4 * grid_budget.SECONDS_PER_PROBLEM)  # 24 seeded is still over
    assert [r.problem.n for r in result.shapes] == [1, 8, 16, 32]
    assert {r.problem.n: r.bucket for r in result.shapes}[32] == (17, 32)
    assert any("1 count of its weights, 10.00% of its GEMM time" in n for n in result.weight_notes)
    calls_only = [
        ShapeRecord(r.problem, r.op_signature, r.params_signature, count=1, calls=c)
        for r, c in zip(records, (1, 1, 1, 3, 5), strict=True)
    ]
    shares, basis = budget_shares(calls_only)
    assert shares[QKV.with_tokens(24)] == pytest.approx(3 / 11) and basis == "calls", "by calls, times unknown"
    again = GatherResult(calls_only, [], 5, [])
    apply_grid(again, mgrid.SERVING, budget_s=4 * grid_budget.SECONDS_PER_PROBLEM)
    assert any("1 count of its weights, 27.27% of its calls" in n for n in again.weight_notes), again.weight_notes


def test_an_overrun_budget_names_the_fewest_gpus_that_would_fit_it():
    """The vLLM-sized Qwen2-7B FP8 grid seeded: about 25 minutes on one GPU against a 10-minute budget."""
    assert grid_budget.gpus_to_fit(25 * 60, 10 * 60) == " (about 8 min of wall time on 4 GPUs: --gpus 4)"  # 3 give 10.4
    assert grid_budget.gpus_to_fit(100 * 60, 10 * 60) == "", "no count up to 8 fits: nothing to suggest"
    assert grid_budget.gpus_to_fit(60 * 60, 10 * 60, most=16) == " (about 9 min of wall time on 8 GPUs: --gpus 8)"


@given(st.sets(st.integers(1, 600), min_size=1, max_size=40), st.floats(1, 2000))
def test_a_budget_drops_no_count_it_must_keep_and_seeds_none_it_must_search(ran, budget_s):
    points, note = mgrid.expand([QKV.with_tokens(n) for n in ran], mgrid.SERVING, budget_s=budget_s)
    kept = {p.problem.n for p in points}
    dropped = ran - kept
    assert not any(n & (n - 1) == 0 for n in dropped) and max(ran) in kept, "powers of two and the largest stay"
    assert not dropped or f"to fit, {len(dropped)} count" in note, note
    assert not dropped or kept <= ran, "counts the workload ran go only after every other grid point"
    assert all(
        lo <= n <= hi
        for n in ran
        for p in points
        for lo, hi in [p.bucket]
        if p.problem.n == min((m for m in kept if m >= n), default=None)
    ), "every count that ran lies in the bucket of the next count kept"
    seeded = {p.problem.n for p in points if p.seeded}
    assert seeded <= ran and max(ran) not in seeded and not any(n & (n - 1) == 0 for n in seeded)
    seconds = grid_budget.bench_seconds((p.bucket, p.seeded) for p in points)
    assert seconds <= budget_s or "still over the budget" in note or "by themselves" in note, note
    gpus = re.search(r"--gpus (\d+)\)", note)
    if gpus:  # the fewest that fit: one fewer would not
        g = int(gpus.group(1))
        assert seconds > budget_s and seconds / (g * grid_budget.GPU_EFFICIENCY) <= budget_s, note
        assert g == 2 or seconds / ((g - 1) * grid_budget.GPU_EFFICIENCY) > budget_s, note


def test_a_seeded_count_goes_through_shapes_json_to_benchs_second_pass(tmp_path):
    ran = {QKV.with_tokens(n) for n in (1, 8, 16, 24, 32)}
    records = [ShapeRecord(p, *format_key(p), count=1) for p in sorted(ran, key=GemmProblem.sort_key)]
    result = GatherResult(records, [], 5, [])
    # 24 seeded, the rest searched: 1 serves itself alone, 8, 16 and 32 each serve counts below them
    budget_s = (
        grid_budget.SECONDS_PER_PROBLEM + 3 * grid_budget.SECONDS_PER_WIDE_ANCHOR + grid_budget.SECONDS_PER_SEEDED
    )
    apply_grid(result, mgrid.SERVING, budget_s=budget_s)
    seeded = [r for r in result.shapes if r.seeded]
    assert seeded and all(r.seen and r.problem in ran and r.problem.n & (r.problem.n - 1) for r in seeded)
    assert any("start from the winner of their weight's nearest searched count above" in n for n in result.weight_notes)
    write_shapes_json(tmp_path / "shapes.json", result)
    again = read_shapes_json(tmp_path / "shapes.json")
    assert [r.seeded for r in again] == [r.seeded for r in result.shapes]
    rows = json.loads((tmp_path / "shapes.json").read_text())
    rows[0]["seeded"] = "yes"
    (tmp_path / "shapes.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="row 0: seeded 'yes' is not true or false"):
        read_shapes_json(tmp_path / "shapes.json")


def test_auto_is_serving_where_a_weight_ran_at_several_counts_within_a_budget_and_exact_otherwise():
    several = [QKV.with_tokens(n) for n in (1, 8)] + [rotary(5), rotary(9)]
    assert mgrid.parse_grid("auto") == mgrid.AUTO and mgrid.resolve(mgrid.SERVING, several) == (mgrid.SERVING, None, "")
    spec, budget_s, note = mgrid.resolve(mgrid.AUTO, several)
    assert (spec, budget_s) == (mgrid.SERVING, 60 * mgrid.AUTO_MINUTES)
    assert note.startswith("m-grid auto: serving, 1 of 1 weights ran at more than one token count, within 10 min")
    assert mgrid.resolve(mgrid.AUTO, several, budget_s=120.0)[1] == 120.0, "a budget given stands"
    once = [QKV.with_tokens(8), QKV.with_tokens(8).with_tokens(8), rotary(5), rotary(9)]  # outer products aside
    assert mgrid.resolve(mgrid.AUTO, once)[:2] == (mgrid.EXACT, None)
    assert mgrid.resolve(mgrid.AUTO, several, embedded=True)[:2] == (mgrid.EXACT, None), "the README's first run"
    with pytest.raises(mgrid.GridError, match="or say auto, exact or serving"):
        mgrid.parse_grid("autom")


def test_auto_by_default_tunes_the_serving_grid_of_a_workload_that_ran_a_weight_at_several_counts(tmp_path):
    from .helpers import run_amd_dag

    untuned = tmp_path / "untuned.csv"
    untuned.write_text("".join(f"GemmTunableOp_BFloat16_TN,tn_256_{n}_2048_ld_2048_2048_256\n" for n in (2, 8)))
    run_amd_dag(tmp_path, "auto", "", "Bench", "--m-grid", "auto", untuned=untuned, target=None, rounds=None)
    run = tmp_path / "w" / "auto"
    assert {r.problem.n: r.bucket for r in read_shapes_json(run / "shapes" / "shapes.json")} == {
        1: (1, 1),
        2: (2, 2),
        4: (3, 4),
        8: (5, 8),
    }
    assert "m-grid auto: serving, 1 of 1 weights" in (run / "shapes" / "summary.txt").read_text()
    from pipeline.dag.parameters import GatherParameters

    assert GatherParameters.m_grid._default == mgrid.AUTO, "the job's default"


def test_a_budget_on_the_exact_grid_is_not_applied_and_the_notes_say_so():
    records = [ShapeRecord(QKV.with_tokens(n), *format_key(QKV.with_tokens(n)), count=1) for n in (1, 3, 5)]
    result = GatherResult(records, [], 3, [])
    apply_grid(result, mgrid.EXACT, budget_s=1.0)
    assert [r.problem.n for r in result.shapes] == [1, 3, 5] and not any(r.seeded for r in result.shapes)
    assert any(n.startswith("--grid-budget is not applied: --m-grid exact") for n in result.weight_notes)
    apply_grid(unbounded := GatherResult(list(records), [], 3, []), mgrid.EXACT)
    assert unbounded.weight_notes == []


def test_apply_grid_gives_grid_points_no_weight(tmp_path):
    result = gather([str(UNTUNED)])
    ran = {r.problem for r in result.shapes}
    apply_grid(result, mgrid.SERVING)
    assert ran <= {r.problem for r in result.shapes}
    added = [r for r in result.shapes if r.problem not in ran]
    assert added and all(r.count == 0 and r.calls == 0 and not r.seen for r in added)
    assert all(r.bucket[1] == r.problem.n for r in result.shapes if r.bucket)
    assert any("m-grid serving:" in note for note in result.weight_notes)
    write_shapes_json(tmp_path / "shapes.json", result)
    again = read_shapes_json(tmp_path / "shapes.json")
    assert [(r.problem, r.bucket) for r in again] == [(r.problem, r.bucket) for r in result.shapes]


def test_a_bucket_that_does_not_end_at_its_row_is_refused(tmp_path):
    result = gather([str(UNTUNED)])
    apply_grid(result, mgrid.SERVING)
    write_shapes_json(tmp_path / "shapes.json", result)
    rows = json.loads((tmp_path / "shapes.json").read_text())
    index = next(i for i, row in enumerate(rows) if row["bucket"])
    rows[index]["bucket"] = [1, rows[index]["n"] + 1]
    (tmp_path / "shapes.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match=f"row {index}: bucket .* does not end at the row's n"):
        read_shapes_json(tmp_path / "shapes.json")


def test_spread_repeats_a_winner_over_its_bucket_and_narrows_a_triton_one_compiled_for_its_sizes():
    lib = TunableOpEntry.from_problem(QKV.with_tokens(8), "Gemm_Cublaslt_id_7_tile_20", 0.01)
    own = TunableOpEntry.from_problem(QKV.with_tokens(16), "triton_r16c64k128_s1_g8_w4_st3_swap", 0.02)
    alone = TunableOpEntry.from_problem(QKV.with_tokens(1), "Gemm_Cublaslt_id_1_tile_20", 0.01)
    tiled = TunableOpEntry.from_problem(QKV.with_tokens(24), "triton_r32c64k64_s1_g8_w4_st3", 0.03)
    buckets = {",".join(format_key(e.problem)): b for e, b in ((lib, (5, 8)), (own, (9, 16)), (tiled, (17, 24)))}
    rows, ranges = mgrid.spread([lib, own, alone, tiled], buckets)
    assert [r.problem.n for r in rows] == [8, 5, 6, 7, 16, 1, 24, *range(17, 24)]
    assert all(r.solution == lib.solution for r in rows[:4]) and all(r.solution == tiled.solution for r in rows[6:])
    assert parse_key(rows[1].op_signature, rows[1].params_signature) == QKV.with_tokens(5)
    # the swapped kernel's sizes are literals: its bucket narrows; the tiled one takes them as arguments
    assert [(r["lo"], r["hi"]) for r in ranges] == [(5, 8), (16, 16), (17, 24)]
    assert "serves its M alone (bucket 9-16)" in ranges[1]["note"] and not ranges[2].get("note")
    assert ranges[1]["bucket_lo"] == 9 and "bucket_lo" not in ranges[0], "the counts below it, for the runtime"


@pytest.mark.parametrize(
    "name, bucket, serves",
    [
        ("Gemm_Cublaslt_id_7_tile_20", (9, 16), True),  # a library's (Bench checks it at each count)
        ("triton_r32c64k64_s1_g8_w4_st3", (17, 24), True),  # tiled: sizes as arguments, edges masked
        ("triton_r16c64k128_s1_g8_w4_st3", (1, 16), True),  # skinny: the same kernel
        ("triton_r16c64k128_s1_g8_w4_st3_swap", (9, 16), False),  # swapped: compiled for one frame
        ("triton_r1c1k2048_s1_g1_w8_st1_lit", (1, 1), False),  # literal: the same
        ("triton_r1c8k512_s1_g1_w4_st1", (1, 1), True),  # gemv: one token, sizes as arguments
        ("triton_r1c8k512_s1_g1_w4_st1", (1, 2), False),  # but one row alone
        ("triton_nonsense", (9, 16), False),
    ],
)
def test_a_winner_serves_a_bucket_where_its_kernel_computes_every_count_of_it(name, bucket, serves):
    from pipeline.kernels.triton_gemm import serves_range

    assert serves_range(name, *bucket) is serves


def test_default_ranges_are_the_buckets_dropped_and_the_counts_below_a_split_but_not_a_triton_narrowing():
    key = {m: ",".join(format_key(QKV.with_tokens(m))) for m in (8, 16, 32, 64, 128)}
    buckets = {key[8]: (5, 8), key[16]: (9, 16), key[32]: (17, 32), key[64]: (33, 64), key[128]: (65, 128)}
    served = [
        {
            "key": key[128],
            "solution": "triton_r64c128k64_s1_g8_w4_st3",
            "lo": 97,
            "hi": 128,
            "note": "split: serves 97-128 (x0.97 at M = 96)",
        },
        {"key": key[8], "solution": "Gemm_Cublaslt_id_7_tile_20", "lo": 5, "hi": 8},
        {
            "key": key[16],
            "solution": "triton_r16c64k128_s1_g8_w4_st3_swap",
            "lo": 16,
            "hi": 16,
            "note": f"{mgrid.TRITON_NARROWED} (bucket 9-16)",
        },
        {
            "key": key[64],
            "solution": "Gemm_Cublaslt_id_9_tile_20",
            "lo": 41,
            "hi": 64,
            "note": "split: serves 41-64 (x0.95 at M = 40)",
        },
    ]
    found = mgrid.default_ranges(buckets, served, {key[32]: "the default already is the best: nothing to ship"})
    assert found == [  # by key
        {"key": key[128], "lo": 65, "hi": 96, "why": "split: serves 97-128 (x0.97 at M = 96)"},  # sizes as arguments
        {"key": key[32], "lo": 17, "hi": 32, "why": "the default already is the best: nothing to ship"},
        {"key": key[64], "lo": 33, "hi": 40, "why": "split: serves 41-64 (x0.95 at M = 40)"},
    ]
    assert mgrid.default_ranges({key[32]: (17, 32)}, [], {}) == []  # never measured (Bench failed): not a choice
    from pipeline.formats.m_ranges import DEFAULT_RANGES, read_ranges

    read = read_ranges(found, "bundle/manifest.json", DEFAULT_RANGES)
    assert [(r.solution, r.lo, r.hi, r.note) for r in read][2] == ("Default", 33, 40, found[2]["why"])


def test_gemm_tune_shapes_takes_the_grid_and_refuses_bad_values(tmp_path):
    out = tmp_path / "shapes.json"
    run = [sys.executable, "-m", "pipeline", "shapes", str(UNTUNED)]
    done = subprocess.run([*run, "--m-grid", "1,2,4", "--json", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "serves" in done.stdout and "m-grid 1,2,4:" in done.stdout
    assert any(row["bucket"] == [3, 4] for row in json.loads(out.read_text()))
    budget = subprocess.run([*run, "--m-grid", "serving", "--grid-budget", "0.5"], capture_output=True, text=True)
    assert budget.returncode == 0 and "--grid-budget 0.5 min:" in budget.stdout, budget.stderr
    refused = subprocess.run([*run, "--grid-budget", "-1"], capture_output=True, text=True)
    assert refused.returncode != 0 and "'-1': must be a finite number >= 0" in refused.stderr
    for bad, said in ((["--m-grid", "2,1"], "1 comes after 2"), (["--m-max", "8"], "--m-max 8 is below M = 128")):
        refused = subprocess.run([*run, "--m-grid", "serving", *bad], capture_output=True, text=True)
        assert refused.returncode == 12 and said in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1


# -- held-out token counts (Validate) and the bundle ------------------------------------------------------
def _measured(key: str, n: int, baseline: float, tuned: float, held_out_of: str | None = None):
    from pipeline.stages.validate.measured import MeasuredRow, Pair
    from pipeline.stats import Stats

    pair = Pair(Stats.of([baseline] * 5), Stats.of([tuned] * 5))
    return MeasuredRow.of(QKV.with_tokens(n), key, "Gemm_x", 0, 0.0, 1.0, pair, held_out_of=held_out_of)


def test_held_out_counts_are_the_lower_edge_the_middle_and_two_seeded_draws():
    from pipeline.stages.validate.held_out import held_out_counts

    counts = held_out_counts((17, 24), "k")
    assert counts[0] == 17 and 20 in counts and 3 <= len(counts) <= 4 and all(17 <= m < 24 for m in counts)
    assert counts == held_out_counts((17, 24), "k")  # the same seed and key draw the same
    assert {tuple(held_out_counts((17, 64), "k", seed)) for seed in range(5)} != {tuple(counts)}
    assert held_out_counts((3, 4), "k") == [3] and held_out_counts((4, 4), "k") == []
    assert held_out_counts((129, 256), "k")[:1] == [129] and 192 in held_out_counts((129, 256), "k")


def test_the_counts_the_workload_ran_untuned_in_a_bucket_are_held_out_before_any_draw():
    from pipeline.stages.validate.held_out import held_out_counts

    drawn = held_out_counts((257, 512), "k")
    assert held_out_counts((257, 512), "k", ran=()) == drawn, "no count ran there: the same draws as before"
    ran = held_out_counts((257, 512), "k", ran=(400, 384, 300))
    assert ran == [257, 300, 384, 400], "the lower edge, the middle, then the two heaviest that ran (384 is the middle)"
    assert held_out_counts((257, 512), "k", ran=(384, 700, 512, 5)) == drawn, "none of them another count inside"
    one = held_out_counts((257, 512), "k", ran=(300,))
    assert 300 in one and len(one) == 4 and one == held_out_counts((257, 512), "k", ran=(300,))


def test_apply_grid_gives_each_bucket_the_counts_that_ran_there_untuned_and_validate_holds_them_out(tmp_path):
    from pipeline.stages.validate.held_out import held_out_rows
    from pipeline.stages.validate.validate import MergedRow

    counts = (1, 8, 16, 24, 32, 40, 48, 64)
    records = [ShapeRecord(QKV.with_tokens(n), *format_key(QKV.with_tokens(n)), count=1, calls=1) for n in counts]
    for record, share in zip(records, (0.1, 0.1, 0.1, 0.05, 0.1, 0.15, 0.2, 0.2), strict=True):
        record.time_share = share
    result = GatherResult(records, [], 8, [])
    apply_grid(result, (1, 16, 64))  # a listed grid: what ran between its points is served by the next one up
    inside = {r.problem.n: r.ran_inside for r in result.shapes}
    assert inside == {1: (), 16: (8,), 64: (48, 40, 32, 24)}, "heaviest first, in the bucket that serves them"
    write_shapes_json(tmp_path / "shapes.json", result)
    assert [r.ran_inside for r in read_shapes_json(tmp_path / "shapes.json")] == [(), (8,), (48, 40, 32, 24)]
    rows = json.loads((tmp_path / "shapes.json").read_text())
    rows[1]["ran_inside"] = [16]
    (tmp_path / "shapes.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="row 1: ran_inside 16 is not inside the bucket"):
        read_shapes_json(tmp_path / "shapes.json")
    grid = {r.key: r for r in result.shapes}
    row = next(r for r in result.shapes if r.problem.n == 64)
    merged = MergedRow(row.key, row.problem, "Gemm_x", 1, 0.2, None, None)
    held = held_out_rows([merged], {k: r.bucket for k, r in grid.items()}, ran_inside={row.key: row.ran_inside})
    assert sorted(r.problem.n for r in held) == [17, 32, 40, 48], "the edge, the middle (40), then 48 and 32"
    assert all(r.calls == 0 and r.time_share == 0.0 for r in held), "held out: no weight in the figures"


def test_held_out_rows_skip_default_exact_and_fixed_size_triton_rows():
    from pipeline.stages.validate.held_out import held_out_rows
    from pipeline.stages.validate.validate import MergedRow

    def row(n: int, solution: str) -> MergedRow:
        problem = QKV.with_tokens(n)
        return MergedRow(",".join(format_key(problem)), problem, solution, 10, 0.5)

    rows = [
        row(16, "Gemm_Cublaslt_id_1"),
        row(8, "Default"),
        row(24, "triton_r16c64k128_s1_g8_w4_st3_swap"),  # compiled for its own sizes
        row(4, "G"),
        row(32, "triton_r32c64k64_s1_g8_w4_st3"),  # sizes as arguments: serves its bucket, so it is held out
    ]
    buckets = {rows[0].key: (9, 16), rows[1].key: (5, 8), rows[2].key: (17, 24), rows[4].key: (25, 32)}
    held = held_out_rows(rows, buckets)
    assert {r.held_out_of for r in held} == {rows[0].key, rows[4].key}
    ours = [r for r in held if r.held_out_of == rows[4].key]
    assert ours and all(25 <= r.problem.n < 32 and r.solution == rows[4].solution for r in ours)
    held = [r for r in held if r.held_out_of == rows[0].key]
    assert all(9 <= r.problem.n < 16 and r.key == ",".join(format_key(r.problem)) for r in held)
    assert all(r.time_share == 0.0 and r.calls == 0 and r.solution == rows[0].solution for r in held)


def test_a_bucket_below_the_floor_beyond_noise_is_split_at_the_first_count_held_above_its_highest_loss():
    from pipeline.formats.tunableop import parse_key
    from pipeline.stages.validate.held_out import FLOOR, lines, verdict

    grid = GRID_KEY
    rows = [
        _measured("b", 12, 10.0, 9.0, grid),
        _measured("a", 9, 10.0, 10.3, grid),
        _measured("d", 10, 10.0, 10.4, grid),
        _measured("c", 9, 10.0, 10.05),
    ]
    result = verdict(rows[:3])
    assert result["split"] == {  # 11 was not timed: it runs torch's default
        grid: {"lo": 12, "why": f"M = 10 held out at x{10 / 10.4:.3f}, below x{FLOOR} beyond noise"}
    }
    top = parse_key(*grid.split(",", 1)).n
    assert verdict(rows[1:3])["split"][grid]["lo"] == top  # nothing held above the loss: its grid point alone
    assert verdict([*rows[:3], _measured("e", 13, 10.0, 10.6, grid)])["split"][grid]["lo"] == top  # a later loss
    assert result["worst"] == {"key": "d", "m": 10, "speedup": round(10 / 10.4, 4)}
    assert result["worst_shipped"] == {"key": "b", "m": 12, "speedup": round(10 / 9.0, 4)}  # above the split
    assert "after the splits: the worst x1.111" in lines(result)[-2]
    assert [r["m"] for r in result["by_grid_row"][grid]] == [9, 10, 12]
    assert verdict([rows[3]])["split"] == {}  # x0.995: within the floor
    assert result["within_noise"] is None and verdict([rows[3]])["within_noise"] is None


def test_a_held_out_count_below_the_floor_within_its_noise_ships_and_the_report_says_so():
    from pipeline.stages.validate.held_out import lines, verdict
    from pipeline.stages.validate.measured import MeasuredRow, Pair
    from pipeline.stats import Stats

    grid = GRID_KEY
    noisy = Pair(Stats.of([9.0, 10.0, 11.0, 10.0, 10.0]), Stats.of([9.2, 10.2, 11.5, 10.2, 10.2]))
    row = MeasuredRow.of(QKV.with_tokens(11), "n", "Gemm_x", 0, 0.0, 1.0, noisy, held_out_of=grid)
    assert row.speedup < 0.99 and row.noise > 0.1
    result = verdict([row, _measured("a", 9, 10.0, 10.0, grid)])
    assert result["split"] == {} and result["within_noise"]["count"] == 1
    assert result["within_noise"]["lowest"]["m"] == 11
    said = lines(result)[-1]
    assert said.startswith("1 shipped held-out count(s) read below x0.99 within their noise") and "M = 11" in said
    assert said.endswith("more --validate-rounds would tell")


def test_the_held_out_verdict_says_how_the_counts_the_workload_ran_untuned_fared():
    from pipeline.stages.validate.held_out import lines, verdict

    grid = GRID_KEY
    rows = [_measured(key, n, 10.0, tuned, grid) for key, n, tuned in (("a", 9, 9.0), ("b", 11, 9.8), ("c", 13, 9.5))]
    assert verdict(rows)["ran"] is None and "of them counts the workload ran" not in lines(verdict(rows))[0]
    result = verdict(rows, ran_inside={grid: (13, 11), "another": (9,)})
    assert result["ran"] == {"count": 2, "worst": {"key": "b", "m": 11, "speedup": round(10.0 / 9.8, 4)}}
    assert "(seed 0, 2 of them counts the workload ran (the worst x1.020 at M = 11)); the worst" in lines(result)[0]


@pytest.mark.long
def test_a_count_the_budget_seeds_is_retimed_from_its_neighbours_winner_on_the_bench_double(tmp_path):
    """Bench alone on the double: the workload ran 2, 3 and 128 tokens of one weight, and a budget under what
    their searches cost seeds 3, which starts from the winner at 128 (its weight's nearest searched count)."""
    from .helpers import run_amd_dag

    untuned = tmp_path / "untuned.csv"
    untuned.write_text("".join(f"GemmTunableOp_BFloat16_TN,tn_256_{n}_2048_ld_2048_2048_256\n" for n in (2, 3, 128)))
    # 17.7 s: 18 searched (2 and 128 each serve a count below them), 17.4 with 3 seeded
    budget = ("--m-grid", "serving", "--grid-budget", "0.295")
    done = run_amd_dag(tmp_path, "seeded", "", "Bench", *budget, untuned=untuned, target=None, rounds=None)
    run = tmp_path / "w" / "seeded"
    assert [(r.problem.n, r.seeded) for r in read_shapes_json(run / "shapes" / "shapes.json")] == [
        (2, False),
        (3, True),
        (128, False),
    ]
    results = {r["problem"]["n"]: r for r in json.loads((run / "bench" / "results.json").read_text())}
    assert sorted(results) == [2, 3, 128]
    assert "grid point M = 128" in results[3]["origin"], results[3]["origin"]  # retimed or, losing, retuned
    assert "(3 the workload ran, 1 of them seeded, 0 grid points)" in done.stdout + done.stderr
    counts = [tuple(map(int, m)) for m in re.findall(r"Bench \[[#.]+\] (\d+)/(\d+)", done.stderr)]
    assert counts and {total for _, total in counts} == {3}, counts  # the two passes count as one, not 2 then 1
    assert [d for d, _ in counts] == sorted(d for d, _ in counts), counts


def test_the_grid_runs_through_the_job_on_the_bench_double(tmp_path):
    """The AMD DAG on the hipblaslt-bench double with a grid: GatherShapes writes the buckets, Validate times
    held-out counts, and the bundle holds a row at every count of every kept range (a split one from the first
    count held out above its highest loss), with the ranges and the collected keys in its manifest."""
    from .helpers import run_amd_dag

    untuned = tmp_path / "untuned.csv"  # two weights of the HF Llama: one at 2 and 128 tokens, one at 2
    untuned.write_text(
        "GemmTunableOp_BFloat16_TN,tn_256_128_2048_ld_2048_2048_256\n"
        "GemmTunableOp_BFloat16_TN,tn_256_2_2048_ld_2048_2048_256\n"
        "GemmTunableOp_BFloat16_TN,tn_2048_2_5632_ld_5632_5632_2048\n"
    )
    run_amd_dag(
        tmp_path, "grid", "", "TuneWorkload", "--m-grid", "1,4,16", untuned=untuned, rounds=1
    )  # not the subject
    run = tmp_path / "w" / "grid"
    shapes = read_shapes_json(run / "shapes" / "shapes.json")
    assert any(not r.seen and r.bucket == (5, 16) for r in shapes)
    assert {r.problem.m: r.ran_inside for r in shapes if r.problem.n == 4} == {256: (2,), 2048: (2,)}, "ran at 2"
    results = json.loads((run / "bench" / "results.json").read_text())
    scored = [r for r in results if r["bucket"].get("speedups")]  # Bench timed the winners inside their buckets
    assert scored and all(r["bucket"]["hi"] == r["problem"]["n"] for r in scored)
    assert all(str(r["bucket"]["lo"]) in r["bucket"]["speedups"] for r in scored)
    held = json.loads((run / "validate" / "held_out.json").read_text())
    measured = json.loads((run / "validate" / "measurements.json").read_text())
    assert held["rows"] == len(measured["held_out"]) > 0 and all(r["held_out_of"] for r in measured["held_out"])
    assert not any(r.get("held_out_of") for r in measured["rows"])  # the gate, the report and the drift read these
    gate = json.loads((run / "validate" / "gate.json").read_text())
    assert not {r["key"] for r in measured["held_out"]} & set(gate["kept"])
    report = (run / "report" / "report.md").read_text()
    assert "## Token counts: the grid, and the counts held out" in report and f"{held['rows']} timed" in report
    assert "- m-grid 1,4,16: " in report and "GEMMs to tune" in report, "what GatherShapes said of the grid"
    assert held["ran"]["count"] >= 1 and held["ran"]["worst"]["m"] == 2, held["ran"]  # 2 ran, and is held out
    assert f"{held['ran']['count']} of them counts the workload ran" in report
    assert f"Bench timed {len(scored)} grid winners inside their buckets" in report
    manifest = json.loads((run / "bundle" / "manifest.json").read_text())
    bundle_keys = (run / "bundle" / "tunableop_results.csv").read_text()
    assert manifest["collected"] == sorted(r.key for r in shapes if r.seen)
    assert manifest["m_ranges"]
    for record in manifest["m_ranges"]:
        problem = parse_key(*record["key"].split(",", 1))
        for m in range(record["lo"], record["hi"] + 1):
            assert ",".join(format_key(problem.with_tokens(m))) + "," + record["solution"] in bundle_keys
        if record["key"] in held["split"]:
            assert record["lo"] == held["split"][record["key"]]["lo"] and record["note"].startswith("split: serves")
            assert all(not r["below"] for r in held["by_grid_row"][record["key"]] if r["m"] >= record["lo"])
    rows = [line for line in bundle_keys.splitlines() if line and not line.startswith("Validator,")]
    assert manifest["rows"] == len(rows) == len(set(rows)) > len(gate["kept"])
    from pipeline.formats.hipblaslt_override import read_override

    override = read_override(run / "bundle" / "hipblaslt_override.txt")  # the reader matches exact sizes too
    sizes = {(dict(e.fields)["m"], dict(e.fields)["n"], dict(e.fields)["k"]) for e in override.entries}
    for record in manifest["m_ranges"]:
        grid = parse_key(*record["key"].split(",", 1))
        if (str(grid.m), str(grid.n), str(grid.k)) in sizes:
            assert all((str(grid.m), str(n), str(grid.k)) in sizes for n in range(record["lo"], record["hi"] + 1))
    assert manifest["hipblaslt_override"]["rows"] == len(override.entries) > len(gate["kept"])
    served = {r["key"]: r for r in manifest["m_ranges"]}
    for record in manifest["default_ranges"]:  # what runs torch's default by the tuner's choice
        assert record["key"] not in served or record["hi"] == served[record["key"]]["lo"] - 1
        assert all(
            ",".join(format_key(parse_key(*record["key"].split(",", 1)).with_tokens(m))) + "," not in bundle_keys
            for m in range(record["lo"], record["hi"] + 1)
        )
    grid_rows = {r.key: r.bucket for r in shapes if r.bucket is not None}
    dropped = {r["key"] for r in gate["dropped"]}
    not_kept = {k for k in grid_rows if k not in served and k in dropped}  # measured, and the default won
    assert not_kept and {r["key"] for r in manifest["default_ranges"] if r["key"] not in served} == not_kept
    assert any(r["key"] in served for r in manifest["default_ranges"])  # below a split range


def test_the_e2e_coverage_adds_every_tuned_process_and_says_it_in_the_report_line():
    from pipeline.runtime import coverage_line
    from pipeline.stages.validate import e2e_runtime

    def record(tuned_calls, calls, tuned_us, us):
        return {
            "coverage": {
                "unseen_calls": calls,
                "unseen_tuned_calls": tuned_calls,
                "unseen_us": us,
                "unseen_tuned_us": tuned_us,
            }
        }

    coverage = e2e_runtime.coverage([record(3, 4, 30.0, 40.0), {"coverage": None}, record(1, 6, 10.0, 60.0)])
    assert coverage["unseen_calls"] == 10 and coverage["tuned_share_of_calls"] == pytest.approx(0.4)
    assert coverage["tuned_share_of_time"] == pytest.approx(0.4)
    assert e2e_runtime.coverage([{"coverage": None}]) is None
    line = coverage_line(coverage)
    assert "40.0% of their GEMM time (100 us by the roofline estimate; 4 of 10 calls)" in line
    assert "graphs-only" not in line
    assert coverage_line(None) == ""
    captured = {**record(0, 0, 0.0, 0.0), "graphs_only": {"captures": 4}}  # every count captured was tuned
    only = e2e_runtime.coverage([captured, {**record(1, 2, 5.0, 10.0), "graphs_only": {"captures": 4}}])
    assert only["graphs_only"] and only["unseen_calls"] == 2
    assert "under --graphs-only coverage counts the calls captured into CUDA graphs alone" in coverage_line(only)
    nothing_unseen = coverage_line(e2e_runtime.coverage([captured]))
    assert nothing_unseen.startswith("; under --graphs-only") and "of their GEMM time" not in nothing_unseen
    assert "graphs_only" not in e2e_runtime.coverage([record(3, 4, 30.0, 40.0), {"graphs_only": None}])


def test_a_legacy_override_row_moves_to_another_token_count_and_a_current_one_does_not():
    from pipeline.formats.hipblaslt_override import parse_override

    text = (
        "Git Version: x\n"
        "transA,transB,m,n,k,batch_count,a_type,b_type,c_type,compute_type,solution_index,us\n"
        "T,N,4096,16,4096,1,bf16_r,bf16_r,bf16_r,f32_r,3150,11.5\n"
        "schema_version,transA,transB,m,n,k,batch_count,lda,ldb,ldc,solution_index\n"
        "2,T,N,4096,16,4096,1,4096,4096,4096,3150\n"
    )
    legacy, current = parse_override(text).entries
    moved = legacy.with_n(9)
    assert dict(moved.fields)["n"] == "9" and moved.values == "T,N,4096,9,4096,1,bf16_r,bf16_r,bf16_r,f32_r,3150,11.5"
    assert moved.key == (*legacy.key[:4], "9", *legacy.key[5:]) and moved.identity == legacy.identity
    assert parse_override("Git Version: x\n" + moved.header + "\n" + moved.values + "\n").entries == [moved]
    assert current.with_n(9) is None


def test_bench_searches_the_anchors_then_starts_every_other_grid_point_from_its_neighbours_winner(tmp_path):
    from pipeline.atomic import atomic_write_json
    from pipeline.backends.base import ProblemResult, WinnerRecord
    from pipeline.stages.bench import grid_seeds
    from pipeline.stages.bench.tune import problem_id, result_path

    problems = [QKV.with_tokens(n) for n in (3, 4, 6, 8, 12)]
    rotary = GemmProblem("gemm", "N", "N", 94, 5, 1, 94, 1, 94, a_type="float32", b_type="float32", c_type="float32")
    seen = {QKV.with_tokens(6), rotary}
    calls = []

    def tune(part, previous, sources):
        calls.append(([p.n for p in part], dict(sources)))
        for problem in part:
            result = ProblemResult(problem, default_us=10.0, winner_us=10.0)
            if problem.n in (4, 8):  # the anchors at 4 and 8 found a winner, the one at 6 kept the default
                result.crown(f"W{problem.n}", 8.0, WinnerRecord({"AlgoId": problem.n}))
            atomic_write_json(result_path(tmp_path, problem), result.to_json())

    twelve = problem_id(QKV.with_tokens(12))
    cached, cached_from = {twelve: {"winner": "from the cache"}}, {twelve: "cached"}
    grid_seeds.tune_in_two_passes([*problems, rotary], seen, tmp_path, tune, cached, cached_from)
    (anchors, _), (rest, sources) = calls
    assert anchors == [4, 6, 8, 5] and rest == [3, 12]  # powers of two, what ran, and what no family holds
    assert sources == {problem_id(QKV.with_tokens(3)): "grid point M = 4", twelve: "cached"}  # the cache first
    calls.clear()  # a count the workload ran that the budget seeds is not an anchor: it starts from M = 8's winner
    grid_seeds.tune_in_two_passes([*problems, rotary], {rotary}, tmp_path, tune, {}, {})
    assert calls[0][0] == [4, 8, 5] and calls[1][0] == [3, 6, 12]
    assert calls[1][1][problem_id(QKV.with_tokens(6))] == "grid point M = 8"
    previous, _ = grid_seeds.seeds([QKV.with_tokens(3), QKV.with_tokens(12)], problems[1:4], tmp_path)
    seeded = ProblemResult.from_json(previous[problem_id(QKV.with_tokens(3))])
    assert seeded.problem == QKV.with_tokens(3) and seeded.winner == "W4"  # the anchor above, at this size
    assert problem_id(QKV.with_tokens(12)) not in previous  # none crowned above: searched, not seeded from below
    previous, sources = grid_seeds.seeds([QKV.with_tokens(5)], [QKV.with_tokens(n) for n in (4, 6, 8)], tmp_path)
    assert sources == {problem_id(QKV.with_tokens(5)): "grid point M = 8"}  # 6 kept the default: the next crowned up


class ScriptedRetime:
    """A backend whose ``retime`` gives each (winner, token count) the speedup a table says (None: the library
    refuses it there), crowning it by a 2% margin as the real ones do."""

    name = "scripted"

    def __init__(self, table):
        self.table, self.asked, self.reports = table, [], []

    def retime(self, previous, settings, report=True):
        from pipeline.backends.base import CandidateResult, ProblemResult

        name, n = previous.winner, previous.problem.n
        self.asked.append((name, n))
        self.reports.append(report)
        speedup = self.table.get(name, {}).get(n)  # a name it does not know: refused everywhere
        if speedup is None:
            raise ValueError(f"CUBLAS_STATUS_NOT_SUPPORTED: {name} at n = {n}")
        result = ProblemResult(previous.problem, default_us=10.0, winner_us=10.0)
        result.candidates = [CandidateResult(name, final_us=10.0 / speedup, verdict_speedup=speedup)]
        if speedup >= 1.02:
            result.crown(name, 10.0 / speedup, previous.record)
        return result


def grid_result(problem, speedup=1.2):
    from pipeline.backends.base import DEFAULT, CandidateResult, ProblemResult, WinnerRecord

    result = ProblemResult(problem, default_us=10.0)
    result.crown("A", 10.0 / speedup, WinnerRecord({"AlgoId": 1}))
    result.candidates = [
        CandidateResult(DEFAULT, final_us=10.0),
        CandidateResult("A", final_us=10.0 / speedup, config={"AlgoId": 1}),
        CandidateResult("B", final_us=10.0 / 1.1, config={"AlgoId": 2}),
        CandidateResult("C", final_us=10.0 / 1.05, config={"AlgoId": 3}),
    ]
    return result


def test_bench_scores_a_grid_winner_over_its_bucket_and_keeps_it_where_it_holds():
    from pipeline.backends.base import TuneSettings
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(16)
    backend = ScriptedRetime({"A": {9: 1.05, 12: 1.1, 15: 1.08}})
    result = bucket_score.score(backend, grid_result(top), (9, 16), TuneSettings())
    assert backend.asked == [("A", 9), ("A", 12), ("A", 15)]  # lower edge, middle, one below; each at its size
    assert backend.reports == [False] * 3  # nothing is crowned at an edge: the verdict alone, no second reading
    assert result.winner == "A" and result.bucket["worst"] == 1.05 and result.bucket["serves_from"] == 9
    assert result.bucket["speedups"] == {"9": 1.05, "12": 1.1, "15": 1.08, "16": 1.2}
    assert bucket_score.score(backend, grid_result(top), (16, 16), TuneSettings()).bucket == {}  # one count


def test_a_winner_that_loses_inside_its_bucket_gives_way_to_a_finalist_that_serves_all_of_it():
    from pipeline.backends.base import TuneSettings
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(16)
    table = {
        "A": {9: 0.6, 12: 1.1, 15: 1.1},
        "B": {16: 1.1, 9: 1.0, 12: 1.08, 15: 1.05},
        "C": {16: 1.05, 9: 1.01, 12: 1.0, 15: 1.0},
    }
    backend = ScriptedRetime(table)
    result = bucket_score.score(backend, grid_result(top), (9, 16), TuneSettings())
    assert result.winner == "B" and result.record.solution == {"AlgoId": 2} and result.winner_us == 10.0 / 1.1
    crowning = [asked for asked, report in zip(backend.asked, backend.reports, strict=True) if report]
    assert crowning == [("B", 16), ("C", 16)]  # a finalist crowned at the grid point reports a second reading
    assert result.bucket["worst"] == 1.0 and result.bucket["serves_from"] == 9  # B's worst beats C's
    assert [t["name"] for t in result.bucket["tried"]] == ["A", "B", "C"]
    assert "B serves it better" in result.origin


def test_where_no_finalist_serves_the_bucket_the_winner_serves_above_its_highest_loss():
    from pipeline.backends.base import TuneSettings
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(16)
    table = {"A": {9: 0.6, 10: 1.0, 12: 1.1, 15: 1.1}, "B": {16: 1.01}, "C": {16: 1.1, 9: None, 12: 1.2, 15: 1.2}}
    backend = ScriptedRetime(table)
    result = bucket_score.score(backend, grid_result(top), (9, 16), TuneSettings())
    # B is not crowned at the grid point; C is refused by the library at M = 9; A, kept, is timed at 10 too
    assert result.winner == "A" and result.bucket["serves_from"] == 10 and result.bucket["worst"] == 0.6
    assert backend.asked[-1] == ("A", 10) and result.bucket["speedups"]["10"] == 1.0
    assert [t["name"] for t in result.bucket["tried"]] == ["A", "C"] and result.bucket["tried"][1]["worst"] == 0.0
    key = ",".join(format_key(top))
    data = result.to_json()
    assert bucket_score.served([data], {key: (9, 16)}) == {
        key: {"lo": 10, "why": "Bench: x0.600 at worst over its bucket"}
    }
    assert bucket_score.served([data], {key: (5, 16)}) == {}  # a score of another grid's bucket does not count


def test_a_winner_kept_below_the_floor_serves_from_where_halving_the_gap_above_its_loss_finds_it_holding():
    """The budgeted vLLM-sized grid's 3584x3584 FP8 winner at M = 128: lost at 65 and 96, held at 127, and
    Validate's held-out counts lost at 97 and 104; serving from 97 shipped those losses."""
    from pipeline.backends.base import TuneSettings
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(128)
    speedups = {65: 0.72, 96: 0.83, 127: 1.02, 111: 0.985, 119: 1.05, 115: 1.0, 113: 1.0}
    backend = ScriptedRetime({"A": speedups})  # no finalist is crowned at 128: A stays
    result = bucket_score.score(backend, grid_result(top), (65, 128), TuneSettings())
    probes = [m for name, m in backend.asked if name == "A"][3:]
    assert probes == [111, 119, 115] and len(probes) == bucket_score.NARROWING_PROBES  # 113 is left untimed
    assert result.winner == "A" and result.bucket["serves_from"] == 115  # the lowest count it was timed holding
    assert result.bucket["worst"] == 0.72 and set(result.bucket["speedups"]) == {
        "65",
        "96",
        "111",
        "115",
        "119",
        "127",
        "128",
    }
    refused = ScriptedRetime({"A": {65: 0.72, 96: 0.83, 127: 1.02}})  # every probe refused: a loss each
    assert bucket_score.score(refused, grid_result(top), (65, 128), TuneSettings()).bucket["serves_from"] == 127
    holding = ScriptedRetime({"A": {65: 1.02, 96: 1.03, 127: 1.02}})  # no loss: nothing probed
    assert bucket_score.score(holding, grid_result(top), (65, 128), TuneSettings()).bucket["serves_from"] == 65
    assert len(holding.asked) == 3


def test_a_winner_read_below_the_floor_at_its_own_grid_point_still_serves_it():
    """A winner crowned without a verdict there (a GPU test forces one) read x0.95 at its grid point and lost at
    9 too: the grid point stays its to serve, Validate judges it; the bucket is narrowed to above the loss below
    it, never past the grid point."""
    from pipeline.backends.base import TuneSettings
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(16)
    backend = ScriptedRetime({"A": {9: 0.6, 12: 0.9, 15: 0.9, 13: 0.9, 14: 0.9}})
    result = bucket_score.score(backend, grid_result(top, speedup=0.95), (9, 16), TuneSettings())
    assert result.winner == "A" and result.bucket["serves_from"] == 16 and result.bucket["worst"] == 0.6
    assert [m for name, m in backend.asked if name == "A"] == [9, 12, 15]  # 15 lost, 16 is the grid point
    lost_at_top_alone = ScriptedRetime({"A": {9: 1.05, 12: 1.1, 15: 1.08}})
    result = bucket_score.score(lost_at_top_alone, grid_result(top, speedup=0.95), (9, 16), TuneSettings())
    assert result.bucket["serves_from"] == 9 and [m for name, m in lost_at_top_alone.asked if name == "A"] == [
        9,
        12,
        15,
    ]  # nothing to narrow below it


SWAP = "triton_r16c64k128_s1_g8_w4_st3_swap"  # compiled for its own sizes: it serves its grid point alone
SWR = "triton_r16c64k128_s1_g8_w4_st3_swr"  # its twin, the token count an argument: tried over its bucket first


def test_a_fixed_size_winner_or_a_backend_that_cannot_retime_leaves_the_bucket_as_it_was():
    from pipeline.backends.base import BackendBase, TuneSettings, WinnerRecord
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(16)
    # A, the fastest finalist that serves the bucket, is more than TIE behind at the grid point; or within it but
    # below the floor inside the bucket; or the winner's name is unreadable and nothing can be timed
    tables = [
        {SWAP: {16: 1.2}, "A": {16: 1.2 / (1 + bucket_score.TIE) - 0.001}},
        {SWAP: {16: 1.2}, "A": {16: 1.2, 9: 0.9, 12: 1.1, 15: 1.1}},
        {},
    ]
    for name, table in zip((SWAP, SWAP, "triton_x"), tables, strict=True):
        triton = grid_result(top)
        triton.crown(name, 5.0, WinnerRecord({"Tuner": "triton"}))
        backend = ScriptedRetime(table)
        scored = bucket_score.score(backend, triton, (9, 16), TuneSettings())
        assert scored.winner == name and scored.bucket == {} and {n for n, _ in backend.asked} <= {name, SWR, "A"}
    result = bucket_score.score(BackendBase(), grid_result(top), (9, 16), TuneSettings())
    assert result.winner == "A" and result.bucket["note"].startswith("not scored")


def test_a_manifests_ranges_read_alike_everywhere_and_a_bad_one_is_named():
    """``formats.m_ranges`` is the one reader of ``m_ranges``: what ``spread`` writes reads back, grouped by the
    weight, and a record that is not a range is refused naming the file and the record."""
    from pipeline.errors import BadInput
    from pipeline.formats.m_ranges import by_family, m_range, read_ranges

    key = "GemmTunableOp_BFloat16_TN,tn_4096_16_4096_ld_4096_4096_4096"
    written = [m_range(key, "Default", 9, 16).to_json(), m_range(key.replace("_16_", "_8_"), "x", 5, 8).to_json()]
    ranges = read_ranges(written)
    assert [r.to_json() for r in ranges] == written and list(ranges[0].copies()) == list(range(9, 16))
    (family,) = by_family(ranges)
    assert [r.hi for r in by_family(ranges)[family]] == [8, 16]
    assert read_ranges(None) == [] and read_ranges([]) == []
    for bad, why in (({"key": key, "solution": "x", "lo": 9}, "KeyError"), ({**written[0], "lo": 20}, "lo 20, hi 16")):
        with pytest.raises(BadInput, match=rf"bundle/manifest.json: m_ranges\[0\] is not a range record .*{why}"):
            read_ranges([bad], "bundle/manifest.json")
    with pytest.raises(BadInput, match=r"m_ranges\[0\] is not a range record .*bucket_lo 17, lo 9"):
        read_ranges([{**written[0], "bucket_lo": 17}], "bundle/manifest.json")
    narrowed = {**written[0], "lo": 16, "bucket_lo": 9}
    assert read_ranges([narrowed])[0].bucket_lo == 9 and read_ranges([narrowed])[0].to_json() == narrowed
    with pytest.raises(BadInput, match=r"manifest.json: default_ranges\[0\] is not a range record .*KeyError"):
        read_ranges([{"key": key, "lo": 1}], "manifest.json", "default_ranges")


def test_a_triton_winner_whose_kernel_takes_its_sizes_is_scored_and_a_fixed_size_finalist_is_not_tried():
    from pipeline.backends.base import DEFAULT, CandidateResult, ProblemResult, TuneSettings, WinnerRecord
    from pipeline.stages.bench import bucket_score

    top, tiled, swapped = QKV.with_tokens(16), "triton_r16c64k128_s2_g8_w4_st4", "triton_r16c64k128_s1_g8_w4_st4_swap"
    result = ProblemResult(top, default_us=10.0)
    result.crown(tiled, 10.0 / 1.2, WinnerRecord({"source": "triton"}))
    result.candidates = [
        CandidateResult(DEFAULT, final_us=10.0),
        CandidateResult(tiled, final_us=10.0 / 1.2, config={"source": "triton"}),
        CandidateResult(swapped, final_us=10.0 / 1.15, config={"source": "triton"}),
        CandidateResult("B", final_us=10.0 / 1.1, config={"AlgoId": 2}),
    ]
    backend = ScriptedRetime({tiled: {9: 0.9, 12: 1.1, 15: 1.1}, "B": {16: 1.1, 9: 1.05, 12: 1.05, 15: 1.05}})
    scored = bucket_score.score(backend, result, (9, 16), TuneSettings())
    assert backend.asked[:3] == [(tiled, 9), (tiled, 12), (tiled, 15)]  # scored at its bucket's counts
    assert swapped not in {name for name, _ in backend.asked}  # it would serve M = 16 alone
    assert scored.winner == "B" and [t["name"] for t in scored.bucket["tried"]] == [tiled, "B"]


def test_a_finalist_that_serves_the_bucket_takes_a_fixed_size_winners_place_within_the_tie():
    from pipeline.backends.base import TuneSettings, WinnerRecord
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(16)
    result = grid_result(top)
    result.crown(SWAP, 10.0 / 1.2, WinnerRecord({"Tuner": "triton"}))
    backend = ScriptedRetime({SWAP: {16: 1.2}, "A": {16: 1.197, 9: 1.05, 12: 1.1, 15: 1.1}})
    scored = bucket_score.score(backend, result, (9, 16), TuneSettings())
    assert backend.asked == [(SWAP, 16), (SWR, 16), ("A", 16), ("A", 9), ("A", 12), ("A", 15)]  # SWR refused
    assert scored.winner == "A" and scored.record.solution == {"AlgoId": 1} and f"in place of {SWAP}" in scored.origin
    assert scored.bucket["serves_from"] == 9 and scored.bucket["worst"] == 1.05
    assert bucket_score.summary([scored]) == {"scored": 1, "replaced": 1, "narrowed": 0, "worst": 1.05, "below": 0}


def test_a_fixed_size_winner_keeps_its_grid_point_and_a_finalist_crowned_below_it_serves_the_rest():
    """The finalist that serves ranges, too far behind at the grid point to take the fixed-size winner's place,
    is crowned at ``hi - 1`` and scored over the rest of the bucket; holding the floor there, it is a row of its
    own whose bucket is that rest. Losing at any count of it, nothing is added."""
    from pipeline.backends.base import CandidateResult, ProblemResult, TuneSettings, WinnerRecord
    from pipeline.stages.bench import bucket_score

    top = QKV.with_tokens(16)
    fixed = grid_result(top)
    fixed.crown(SWAP, 10.0 / 1.3, WinnerRecord({"Tuner": "triton"}))
    backend = ScriptedRetime({SWAP: {16: 1.3}, "A": {16: 1.1, 15: 1.08, 9: 1.04, 12: 1.06, 14: 1.07}})
    scored = bucket_score.score(backend, fixed, (9, 16), TuneSettings())
    assert scored.winner == SWAP and scored.bucket["note"] == f"{SWAP} serves M = 16 alone"
    assert backend.asked == [(SWAP, 16), (SWR, 16), ("A", 16), (SWR, 15), ("A", 15), ("A", 9), ("A", 12), ("A", 14)]
    assert backend.reports == [False, True, True, True, True, False, False, False]  # crowned at 16 and 15 alone
    (below,) = bucket_score.rows_below([scored])
    assert below.problem == QKV.with_tokens(15) and below.winner == "A" and below.record.solution == {"AlgoId": 1}
    assert below.bucket["lo"] == 9 and below.bucket["hi"] == 15 and below.bucket["worst"] == 1.04
    assert below.origin == "bucket 9-16: A serves 9-15, below the fixed-size winner of M = 16"
    data = scored.to_json()
    key, key_below = (",".join(format_key(p)) for p in (top, QKV.with_tokens(15)))
    assert bucket_score.below_buckets([data], {key: (9, 16)}) == {key_below: (9, 15)}
    assert bucket_score.below_buckets([data], {key: (5, 16)}) == {}, "another grid's bucket: not this one's rest"
    assert bucket_score.served([data], {key: (9, 16)}) == {}, "the winner's own range is not narrowed by it"
    narrow = grid_result(QKV.with_tokens(4))
    narrow.crown(SWAP, 10.0 / 1.3, WinnerRecord({"Tuner": "triton"}))
    two = ScriptedRetime({SWAP: {4: 1.3}, "A": {4: 1.1, 3: 1.05}})
    (alone,) = bucket_score.rows_below([bucket_score.score(two, narrow, (3, 4), TuneSettings())])
    assert two.asked == [(SWAP, 4), (SWR, 4), ("A", 4), (SWR, 3), ("A", 3)]
    assert alone.bucket["speedups"] == {"3": 1.05}  # no M = 2
    assert bucket_score.edge_counts((3, 3)) == [] and bucket_score.edge_counts((3, 4)) == [3]
    retimed = ProblemResult(top, default_us=10.0)  # a cached winner re-timed: no finalist of its own
    retimed.crown(SWAP, 10.0 / 1.3, WinnerRecord({"Tuner": "triton"}))
    retimed.candidates = [CandidateResult(SWAP, final_us=10.0 / 1.3, config={"Tuner": "triton"})]
    again = ScriptedRetime(backend.table)  # its twin alone is tried, and refused
    assert bucket_score.score(again, retimed, (9, 16), TuneSettings()).bucket == {}
    assert {name for name, _ in again.asked} == {SWAP, SWR}
    again.asked.clear()
    from_prior = bucket_score.score(again, retimed, (9, 16), TuneSettings(), prior=fixed)  # the cached search's
    assert [r.winner for r in bucket_score.rows_below([from_prior])] == ["A"]
    losing = ScriptedRetime({SWAP: {16: 1.3}, "A": {16: 1.1, 15: 1.08, 9: 0.97, 12: 1.06, 14: 1.07}})
    fixed.bucket = {}
    assert bucket_score.rows_below([bucket_score.score(losing, fixed, (9, 16), TuneSettings())]) == []


def test_a_swapped_winners_twin_that_takes_the_token_count_serves_its_bucket_before_any_finalist():
    """The winner's own config on the kernel whose token count is an argument is tried first: within the tie at
    the grid point and holding the floor over the bucket it takes the winner's place; too far behind there, it
    is the row below while it holds the floor over the rest, and a finalist is the row below where it does not."""
    from pipeline.backends.base import TuneSettings, WinnerRecord
    from pipeline.kernels.triton_gemm import config_from_name
    from pipeline.stages.bench import bucket_score

    def fixed():
        result = grid_result(QKV.with_tokens(8))
        result.crown(SWAP, 10.0 / 1.2, WinnerRecord(config_from_name(SWAP).to_json()))
        return result

    near = ScriptedRetime({SWAP: {8: 1.2}, SWR: {8: 1.198, 5: 1.1, 6: 1.12, 7: 1.15}, "A": {8: 1.1}})
    whole = bucket_score.score(near, fixed(), (5, 8), TuneSettings())
    assert near.asked == [(SWAP, 8), (SWR, 8), (SWR, 5), (SWR, 6), (SWR, 7)]  # A is not needed
    assert whole.winner == SWR and whole.record.solution["family"] == "swapped_range" and whole.bucket["worst"] == 1.1
    assert f"in place of {SWAP}" in whole.origin and bucket_score.rows_below([whole]) == []

    behind = ScriptedRetime({SWAP: {8: 1.2}, SWR: {8: 1.17, 7: 1.16, 5: 1.1, 6: 1.12}, "A": {8: 1.19}})
    scored = bucket_score.score(behind, fixed(), (5, 8), TuneSettings())
    assert scored.winner == SWAP and scored.bucket["note"] == f"{SWAP} serves M = 8 alone"
    (below,) = bucket_score.rows_below([scored])
    assert below.problem == QKV.with_tokens(7) and below.winner == SWR and below.bucket["worst"] == 1.1
    assert below.record.solution["family"] == "swapped_range" and below.bucket["tried"] == [{"name": SWR, "worst": 1.1}]

    losing = {SWAP: {8: 1.2}, SWR: {8: 1.17, 7: 1.16, 5: 0.95, 6: 1.12}, "A": {8: 1.1, 7: 1.05, 5: 1.02, 6: 1.03}}
    (finalist,) = bucket_score.rows_below([bucket_score.score(ScriptedRetime(losing), fixed(), (5, 8), TuneSettings())])
    assert finalist.winner == "A" and [t["name"] for t in finalist.bucket["tried"]] == [SWR, "A"]
    assert finalist.bucket["worst"] == 1.02

    beyond = ScriptedRetime({SWAP: {16: 1.2}, SWR: {16: 1.2}})  # a bucket past the twin's 16 rows: not tried
    assert bucket_score.score(beyond, fixed(), (9, 24), TuneSettings()).bucket == {}
    assert SWR not in {name for name, _ in beyond.asked}


def test_bench_writes_the_row_below_a_fixed_size_winner_beside_the_grid_and_validate_weighs_it_nothing(tmp_path):
    """Bench's outputs carry the row below as a result and a results row of its own; Validate takes its bucket
    from Bench's record (the shapes do not know it), times its held-out counts and gives it no weight; the
    bundle's ranges then cover the fixed-size winner's whole bucket between the two rows."""
    from pipeline.backends.base import TuneSettings, WinnerRecord
    from pipeline.formats.tunableop import read_file
    from pipeline.stages.bench import bucket_score
    from pipeline.stages.bench.tune import result_path, write_outputs
    from pipeline.stages.run.layout import RunLayout
    from pipeline.stages.validate import bundle
    from pipeline.stages.validate.validate import rows_to_measure

    top = QKV.with_tokens(16)
    fixed = grid_result(top)
    fixed.crown(SWAP, 10.0 / 1.3, WinnerRecord({"Tuner": "triton"}))
    backend = ScriptedRetime({SWAP: {16: 1.3}, "A": {16: 1.1, 15: 1.08, 9: 1.04, 12: 1.06, 14: 1.07}})
    scored = bucket_score.score(backend, fixed, (9, 16), TuneSettings())
    run = tmp_path / "run"
    layout = RunLayout.of(run)
    path = result_path(layout.bench, top)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(scored.to_json()))
    summary = write_outputs([top], layout.bench)
    assert summary["buckets"]["below"] == 1 and summary["problems"] == 1
    assert bucket_score.line(summary["buckets"]).startswith("1 fixed-size winners serve their grid point alone")
    assert [r["problem"]["n"] for r in json.loads(layout.bench_results.read_text())] == [16, 15]
    written = read_file(layout.bench / "tunableop_results.csv").entries
    assert [(e.problem.n, e.solution) for e in written] == [(16, SWAP), (15, "A")]
    record = ShapeRecord(top, *format_key(top), count=0)
    record.bucket = (9, 16)
    (layout.shapes.parent).mkdir(parents=True, exist_ok=True)
    write_shapes_json(layout.shapes, GatherResult([record], [], 0, []))
    layout.merged_csv.parent.mkdir(parents=True, exist_ok=True)
    layout.merged_csv.write_text((layout.bench / "tunableop_results.csv").read_text())
    buckets, _ = bundle.grid_buckets(layout, read_shapes_json(layout.shapes))
    key, key_below = (",".join(format_key(p)) for p in (top, QKV.with_tokens(15)))
    assert buckets == {key: (9, 16), key_below: (9, 15)}
    rows = rows_to_measure(run)
    own = {r.key: r for r in rows if r.held_out_of is None}
    assert own[key_below].calls == 0 and own[key_below].time_share == 0.0
    held = [r for r in rows if r.held_out_of]
    assert held and {r.held_out_of for r in held} == {key_below}, "the fixed-size row has nothing held out"
    assert all(9 <= r.problem.n <= 15 for r in held)
    entries, ranges = mgrid.spread(written, buckets)
    assert [(r["solution"], r["lo"], r["hi"]) for r in ranges] == [(SWAP, 16, 16), ("A", 9, 15)]
    assert sorted(e.problem.n for e in entries if e.solution == "A") == list(range(9, 16))

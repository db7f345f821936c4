"""The ceiling dataset measured on the H100 (bench/results/cublaslt_ceiling_*.json.gz), replayed on CPU: the
search the pipeline runs is judged against it offline, as bench/ceiling_replay.py does."""

from __future__ import annotations

import pytest

from pipeline.backends.selection import finalists, tier_sizes

from .helpers import ROOT, bench_module

DATASET = ROOT / "bench" / "results" / "cublaslt_ceiling_h100_2026-11-22.json.gz"


@pytest.fixture(scope="module")
def replay():
    return bench_module("ceiling_replay")


@pytest.fixture(scope="module")
def data(replay):
    return replay.load(DATASET)


def test_the_dataset_covers_the_53_problems_with_thousands_of_configs(data):
    rows = data["problems"]
    assert len(rows) == 53
    assert all(len(r["screened_us"]) == len(r["configs"]) == r["pool"] for r in rows)
    assert sum(r["pool"] for r in rows) > 50_000
    assert all(r["below_floor"] == 0 for r in rows)  # with >= 2 operand copies nothing beats the memory


def test_recorded_screens_keep_every_tier_finalist_in_the_larger_pool(data):
    for row in data["problems"]:
        screened = [None, *(t if t is not None and t > 0 else None for t in row["screened_us"][1:])]
        whole = set(finalists(screened, 4))
        for size in tier_sizes(len(screened))[:-1]:
            assert set(finalists(screened[:size], 4)) <= whole, (row["label"], size)


def test_the_heuristic_list_alone_reaches_99_percent_of_the_ceiling(data, replay):
    results = replay.replay(data)
    cheap = results["heuristic list only"]
    ceiling = results["everything screened (the ceiling's pool)"]
    assert cheap["geomean"] >= 0.99 * ceiling["geomean"]
    assert cheap["screened"] <= 0.2 * ceiling["screened"]
    assert min(cheap["per_problem"]) >= 1.0  # never slower than torch's default
    summary = data["summary"]  # and measured so on the H100, in one run against the exhaustive search
    assert summary["cheap_geomean"] >= 0.99 * summary["ceiling_geomean"]
    assert summary["cheap_s"] <= 0.2 * summary["exhaustive_s"]


def test_no_winners_curse_left_between_screen_and_fresh_buffers(data, replay):
    bias = replay.screen_bias(data)
    assert abs(bias["finalists_median"] - 1) < 0.01
    assert bias["winners_median"] > 0.98  # the chosen ones confirm at their screened time, not 1-3% slower


NEIGHBOURS = ROOT / "bench" / "results" / "cublaslt_ceiling_neighbours_h100_2026-11-23.json.gz"
MIXED = ROOT / "bench" / "results" / "cublaslt_ceiling_mixed_h100_2026-11-23.json.gz"


def test_random_draws_add_nothing_to_the_heuristic_neighbourhood(replay):
    """Run with both (37 problems: neighbours, then 1,500 draws each): the draws never win."""
    results = replay.replay(replay.load(MIXED))
    near, everything = results["heuristic + its neighbours"], results["everything screened (the ceiling's pool)"]
    assert everything["screened"] > 5 * near["screened"]
    assert near["geomean"] >= 0.999 * everything["geomean"]


def test_the_products_local_search_reaches_99_percent_of_the_neighbourhood_ceiling(replay):
    """The pool CublasLtBackend screens (the heuristic's list and the nearest valid neighbours of each of
    its results), replayed on the run that screened up to 200 neighbours of each; and the product's search as
    measured in that run."""
    from pipeline.backends.base import TuneSettings

    data = replay.load(NEIGHBOURS)
    keep = TuneSettings().neighbours
    results = replay.replay(data, keeps=(keep,))
    ours = results[f"heuristic + its {keep} nearest valid neighbours each"]
    ceiling, heuristic = results["everything screened (the ceiling's pool)"], results["heuristic list only"]
    assert ours["geomean"] >= 0.99 * ceiling["geomean"] and ours["geomean"] > heuristic["geomean"] + 0.005
    assert ours["screened"] <= 0.3 * ceiling["screened"]  # 16 each: 26% (8: 16%, but it missed FP8 winners)
    assert min(ours["per_problem"]) >= 1.0
    summary = data["summary"]
    assert summary["product_geomean"] >= 0.99 * summary["ceiling_geomean"]
    assert summary["ceiling_geomean"] > 1.045 and summary["problems"] >= 40


FULL = ROOT / "bench" / "results" / "cublaslt_ceiling_full_h100_2026-11-23.json.gz"
FULL_RUN1 = ROOT / "bench" / "results" / "cublaslt_ceiling_full_h100_2026-11-23_run1.json.gz"


@pytest.mark.parametrize("path", [FULL, FULL_RUN1], ids=["run2", "run1"])
def test_one_run_judges_ours_the_ceiling_and_nvmath_on_all_53_problems(replay, path):
    """The neighbourhood ceiling of every problem, with the product's search and nvmath's autotune measured in
    the same process (nvmath's pick in the ceiling's own final rounds): ours reaches 99% of the ceiling's
    geomean in under 20% of its time."""
    data = replay.load(path)
    rows, s = data["problems"], data["summary"]
    assert len(rows) == 53 and data["settings"]["nvmath"] and data["settings"]["neighbours"] == 200
    assert all("speedup" in r["nvmath"] for r in rows)
    assert all(r["below_floor"] == 0 for r in rows) and s["ceiling_min"] >= 1.0
    assert s["product_geomean"] >= 0.99 * s["ceiling_geomean"]
    assert s["product_s"] <= 0.2 * s["exhaustive_s"]
    assert s["product_geomean"] > s["cheap_geomean"] > s["nvmath_geomean"]


def test_the_products_pool_never_loses_to_the_heuristic_list_it_contains(replay):
    """With the heuristic's list as a finalist tier (a run that confirmed it), every pool that starts with it
    keeps its finalists: on the recorded screens, problem by problem, no neighbour budget does worse."""
    data = replay.load(FULL)
    assert all(r["tiers"][0] == 1 + r["heuristic"] for r in data["problems"])
    results = replay.replay(data, keeps=(1, 2, 4, 8, 16))
    heuristic = results["heuristic list only"]["per_problem"]
    for keep in (1, 2, 4, 8, 16):
        ours = results[f"heuristic + its {keep} nearest valid neighbours each"]["per_problem"]
        assert all(o >= h for o, h in zip(ours, heuristic, strict=True))
    everything = results["everything screened (the ceiling's pool)"]
    assert all(e >= h for e, h in zip(everything["per_problem"], heuristic, strict=True))
    assert everything["geomean"] > results["heuristic list only"]["geomean"] + 0.01


def test_sixteen_neighbours_each_put_the_fp8_ceilings_winner_in_the_products_pool(replay):
    """The A/B behind ``TuneSettings.neighbours``: with 8 neighbours of each heuristic result the product never
    screened the ceiling's winner on 7 of 16 FP8 problems, and its misses under 99% were among them; with 16
    it screened every one, and 15 of 16 are at >= 99% of the ceiling judged apart."""
    from pipeline.backends.base import TuneSettings

    runs = {
        n: replay.load(ROOT / "bench" / "results" / f"cublaslt_ceiling_fp8_neighbours{n}_h100_2026-11-23.json.gz")
        for n in (8, 16)
    }
    assert TuneSettings().neighbours == 16 == runs[16]["settings"]["product_neighbours"]
    outside = {
        n: [p["label"] for p in d["problems"] if p["product"]["ceiling_winner_screen_rank"] is None]
        for n, d in runs.items()
    }
    assert len(outside[8]) == 7 and outside[16] == []
    misses = [p["label"] for p in runs[8]["problems"] if p["judged"]["ours_of_ceiling"] < 0.99]
    assert misses and set(misses) <= set(outside[8])
    judged = [p["judged"]["ours_of_ceiling"] for p in runs[16]["problems"]]
    assert sum(j >= 0.99 for j in judged) == 15 and min(judged) > 0.985

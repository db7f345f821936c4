"""``pipeline.stats``: the median's distribution-free interval, the paired ratio's interval at few pairs, and the
verdict that names a Bench winner."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.stats import Verdict, median_bounds, pairs_to_resolve, ratio_bounds


@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=200))
def test_the_median_lies_within_its_bounds(values):
    low, high = median_bounds(values)
    ordered = sorted(values)
    assert ordered[0] <= low <= ordered[(len(values) - 1) // 2] and ordered[len(values) // 2] <= high <= ordered[-1]


def test_the_bounds_cover_the_true_median_about_95_percent_of_the_time():
    draws = random.Random(7)
    trials = 2000
    bounds = [median_bounds([draws.gauss(0, 1) for _ in range(42)]) for _ in range(trials)]
    covered = sum(low <= 0.0 <= high for low, high in bounds)
    assert 0.93 <= covered / trials <= 0.99
    assert median_bounds([3.0]) == (3.0, 3.0)
    with pytest.raises(ValueError):
        median_bounds([])


@pytest.mark.parametrize("pairs", [2, 3, 6, 40])
def test_the_ratio_bounds_hold_95_percent_at_few_pairs_where_the_range_would_not(pairs):
    draws = random.Random(pairs)
    trials, covered, range_covered = 3000, 0, 0
    for _ in range(trials):
        ratios = [1.04 * math.exp(draws.gauss(0, 0.02)) for _ in range(pairs)]
        low, high = ratio_bounds(ratios)
        covered += low <= 1.04 <= high
        range_covered += min(ratios) <= 1.04 <= max(ratios)
        assert low <= statistics.geometric_mean(ratios) <= high
    assert 0.93 <= covered / trials <= 0.97
    if pairs <= 3:  # the range of two or three pairs, reported before as a ~95% interval, covers 50% or 75%
        assert range_covered / trials < 0.8


def test_the_ratio_bounds_of_steady_pairs_are_tight_and_need_two():
    assert ratio_bounds([1.05, 1.05, 1.05]) == pytest.approx((1.05, 1.05))
    low, high = ratio_bounds([1.020, 1.031])  # two pairs 1% apart: the interval is ~14% wide, not 1%
    assert high - low > 0.1
    with pytest.raises(ValueError, match="two ratios"):
        ratio_bounds([1.1])


def test_the_pairs_to_resolve_a_width_are_where_the_interval_of_that_spread_closes_to_it():
    draws = random.Random(3)
    ratios = [1.03 * math.exp(draws.gauss(0, 0.05)) for _ in range(6)]
    needed = pairs_to_resolve(ratios, 0.03)
    assert needed is not None and needed > 6
    logs = [math.log(r) for r in ratios]
    spread, centre = statistics.stdev(logs), statistics.fmean(logs)

    def alike(n: int) -> list[float]:  # n ratios of exactly that centre and spread
        xs = [draws.gauss(0, 1) for _ in range(n)]
        mean, sd = statistics.fmean(xs), statistics.stdev(xs)
        return [math.exp(centre + spread * (x - mean) / sd) for x in xs]

    low, high = ratio_bounds(alike(needed))
    assert high - low <= 0.03
    low, high = ratio_bounds(alike(needed - 1))
    assert high - low > 0.03, "one pair fewer: still too wide"
    assert pairs_to_resolve([1.02, 1.03, 1.025], 0.03) == 3, "already narrow enough: the pairs it has"
    assert pairs_to_resolve([0.7, 1.4], 0.03, most=50) is None, "too wide to close within reach"
    with pytest.raises(ValueError, match="two ratios"):
        pairs_to_resolve([1.1], 0.03)


def _samples(speedup: float, spread: float, rounds: int = 42, seed: int = 1) -> dict[str, list[float]]:
    """Per-round times of a default at 100 us and a candidate ``speedup`` faster, both moved by a shared clock
    drift, the candidate by its own noise of ``spread`` too."""
    draws = random.Random(seed)
    drift = [1 + 0.1 * draws.random() for _ in range(rounds)]
    return {
        "default": [100.0 * d for d in drift],
        "tuned": [100.0 / speedup * d * (1 + draws.uniform(-spread, spread)) for d in drift],
    }


def test_a_winner_must_clear_the_margin_and_its_own_noise():
    clear = Verdict.of(_samples(1.05, 0.01), "default", "tuned")
    assert clear.default_us / clear.winner_us == pytest.approx(1.05, rel=0.01) and clear.low > 1.03
    assert clear.wins(0.02)
    assert not clear.wins(0.10), "short of the margin"
    noisy = Verdict.of(_samples(1.025, 0.30), "default", "tuned")
    assert noisy.low < 1.0 and not noisy.wins(0.02), "within its spread of the default: no winner"
    drifting = Verdict.of(_samples(1.03, 0.0), "default", "tuned")
    assert drifting.low == pytest.approx(1.03), "a clock drift both candidates share cancels in each round"
    with pytest.raises(ValueError):
        Verdict.of({"default": [1.0, 2.0], "tuned": [1.0]}, "default", "tuned")


def test_the_verdict_pairs_rounds_so_a_window_that_moves_both_cancels():
    """Six windows at levels 0.97-1.12 (where each window's operand copies landed moves both candidates) with 1%
    noise each: the median per-round speedup stays within 0.5% of the true x1.05 on 50 draws, where the default's
    median over the candidate's strays further (``Verdict``'s docstring has the H100's figures)."""
    paired, unpaired = [], []
    for seed in range(50):
        draws = random.Random(seed)
        default, tuned = [], []
        for level in (1.0, 1.06, 1.12, 0.97, 1.03, 1.09):
            for _ in range(7):
                time = 100.0 * level * (1 + draws.uniform(-0.01, 0.01))
                default.append(time)
                tuned.append(time / 1.05 * (1 + draws.uniform(-0.01, 0.01)))
        verdict = Verdict.of({"default": default, "tuned": tuned}, "default", "tuned")
        paired.append(abs(verdict.speedup / 1.05 - 1))
        unpaired.append(abs(statistics.median(default) / statistics.median(tuned) / 1.05 - 1))
        assert verdict.default_us == statistics.median(default)
    assert max(paired) < 0.005 < max(unpaired)
    assert statistics.fmean(paired) < statistics.fmean(unpaired)


def test_a_verdict_keeps_each_windows_medians_and_a_ragged_split_is_refused():
    """Three windows of four rounds each, the second 20% slow for both: the per-window medians say so."""
    from pipeline.stats import window_medians

    levels = [1.0] * 4 + [1.2] * 4 + [1.0] * 4
    samples = {"default": [100.0 * x for x in levels], "tuned": [90.0 * x for x in levels]}
    verdict = Verdict.of(samples, "default", "tuned", windows=3)
    assert verdict.windows == ((100.0, 90.0), (120.0, 108.0), (100.0, 90.0))
    assert verdict.speedup == pytest.approx(100 / 90)
    assert window_medians([1.0, 3.0, 2.0, 4.0], 2) == [2.0, 3.0]
    for values, windows in (([1.0, 2.0, 3.0], 2), ([], 1), ([1.0], 0)):
        with pytest.raises(ValueError, match="do not split"):
            window_medians(values, windows)


def test_a_winner_is_crowned_on_its_verdict_only_with_a_report_that_is_a_reading():
    """The verdict decides; a report under the device's floor (infinite there) is a harness error, not a
    winner; a lost verdict crowns nothing whatever the report reads."""
    from pipeline.stats import crowned

    wins = Verdict.of(_samples(1.05, 0.01), "default", "tuned")
    loses = Verdict.of(_samples(1.01, 0.01), "default", "tuned")
    report = Verdict.of(_samples(1.04, 0.01, seed=2), "default", "tuned")
    under_floor = Verdict(report.default_us, float("inf"), 0.0)
    assert crowned(wins, report, 0.02) and crowned(wins, loses, 0.02), "the report may read under the margin"
    assert not crowned(wins, under_floor, 0.02)
    assert not crowned(loses, report, 0.02)

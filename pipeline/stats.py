"""Small statistics shared by stages and benchmarks."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive ``values``; None when there are none."""
    logs = [math.log(v) for v in values]
    return math.exp(statistics.fmean(logs)) if logs else None


@dataclass(frozen=True)
class Stats:
    """Per-call microseconds over samples."""

    median: float
    p25: float
    p75: float
    minimum: float
    samples: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        ordered = sorted(values)
        q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
        return cls(statistics.median(ordered), q[0], q[2], ordered[0], len(ordered))

    def to_json(self) -> dict:
        return {
            "median_us": self.median,
            "p25_us": self.p25,
            "p75_us": self.p75,
            "min_us": self.minimum,
            "samples": self.samples,
        }

    @classmethod
    def from_json(cls, data: dict) -> Stats:
        """The JSON of ``to_json`` (the minimum and sample count may be absent: the median stands in, 0 samples)."""
        return cls(
            data["median_us"],
            data["p25_us"],
            data["p75_us"],
            data.get("min_us", data["median_us"]),
            data.get("samples", 0),
        )


def median_bounds(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """A distribution-free confidence interval of the median of ``values`` (about 95% at ``z`` = 1.96): the
    order statistics n/2 -/+ z*sqrt(n)/2 places from the middle, the binomial's normal approximation; no
    assumption on the samples' shape, only that they are independent draws. The whole range for small n."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median_bounds of no values")
    half = z * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half) - 1)
    return ordered[low], ordered[max(low, high)]


# Student's t at 97.5% for 1..30 degrees of freedom; beyond, the normal quantile with a first-order correction.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def _t975(n: int) -> float:
    """Student's t at 97.5% for the mean of ``n`` >= 2 values."""
    return _T975[n - 2] if n - 1 <= len(_T975) else 1.96 + 2.37 / (n - 1)


def pairs_to_resolve(ratios: Sequence[float], width: float, most: int = 10_000) -> int | None:
    """About how many paired ratios ``ratio_bounds`` needs for an interval no wider than ``width``, were the
    ratios to keep the spread and centre of these (at least two); None beyond ``most``."""
    n = len(ratios)
    if n < 2:
        raise ValueError(f"pairs_to_resolve needs two ratios or more, not {n}")
    logs = [math.log(r) for r in ratios]
    spread, centre = statistics.stdev(logs), statistics.fmean(logs)
    for pairs in range(n, most + 1):
        half = _t975(pairs) * spread / math.sqrt(pairs)
        if math.exp(centre + half) - math.exp(centre - half) <= width:
            return pairs
    return None


def ratio_bounds(ratios: Sequence[float]) -> tuple[float, float]:
    """A 95% confidence interval of the typical ratio of paired runs (tuned over baseline): Student's t on the
    logs, the geometric mean times/over exp(t * s / sqrt(n)). Unlike order statistics, whose widest interval,
    the range, covers only 1 - 2 / 2**n of the time (50% of two pairs, 75% of three), it holds its level at
    any n >= 2 where the log ratios are roughly normal, widening with the spread and with few pairs."""
    n = len(ratios)
    if n < 2:
        raise ValueError(f"ratio_bounds needs two ratios or more, not {n}")
    logs = [math.log(r) for r in ratios]
    half = _t975(n) * statistics.stdev(logs) / math.sqrt(n)
    centre = statistics.fmean(logs)
    return math.exp(centre - half), math.exp(centre + half)


def round_order(names: Sequence[str], r: int) -> list[str]:
    """The order of round ``r``: rows of a Williams Latin square, so that over a cycle (n rounds, 2n for an
    odd n) each candidate runs in each position, and right after each other candidate, equally often. Two
    candidates alternate: a b, b a, a b, ... (a clock that drifts within a round favours neither)."""
    n = len(names)
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]
    cycle = n if n % 2 == 0 else 2 * n
    row = r % cycle
    order = [names[(i + row) % n] for i in first]
    return order if row < n else order[::-1]


def round_speedups(samples: dict[str, list[float]], default: str, name: str) -> list[float]:
    """``default``'s time over ``name``'s within each round of interleaved ``samples`` (a clock that drifts
    between rounds moves both)."""
    return [d / w for d, w in zip(samples[default], samples[name], strict=True)]


def window_medians(values: Sequence[float], windows: int) -> list[float]:
    """The median of each of ``windows`` equal consecutive runs of ``values``: a window's rounds, where
    ``measure.windowed_samples`` pooled its windows in order."""
    if windows < 1 or not values or len(values) % windows:
        raise ValueError(f"{len(values)} samples do not split into {windows} windows")
    size = len(values) // windows
    return [statistics.median(values[i * size : (i + 1) * size]) for i in range(windows)]


def window_pairs(
    samples: dict[str, list[float]], first: str, second: str, windows: int
) -> tuple[tuple[float, float], ...]:
    """Per window of interleaved ``samples`` pooled over ``windows`` windows in order, ``first``'s median and
    ``second``'s (``window_medians``)."""
    return tuple(zip(window_medians(samples[first], windows), window_medians(samples[second], windows), strict=True))


@dataclass(frozen=True)
class Verdict:
    """A candidate against the default from the same interleaved rounds: the default's median, the median
    per-round speedup (default / candidate within one round, where a clock that drifts, or the operand copies a
    window landed on, move both) and its lower bound (``stats.median_bounds``, about 95%). ``winner_us`` is the
    candidate's time as that speedup puts it against the default's median. On the H100 the median per-round
    speedup of six windows varied by 0.48% (sd) from one reading to the next where the default's median over the
    winner's varied by 0.61% (``bench/README.md``, "Does Bench predict what ships?")."""

    default_us: float
    winner_us: float
    low: float
    windows: tuple[tuple[float, float], ...] = ()  # per window: the default's median and the candidate's (us)

    @classmethod
    def of(cls, samples: dict[str, list[float]], default: str, name: str, windows: int = 1) -> Verdict:
        """From interleaved ``samples`` pooled over ``windows`` windows in order (``measure.windowed_samples``)."""
        speedups = round_speedups(samples, default, name)
        default_us = statistics.median(samples[default])
        per_window = window_pairs(samples, default, name, windows)
        return cls(default_us, default_us / statistics.median(speedups), median_bounds(speedups)[0], per_window)

    @property
    def speedup(self) -> float:
        return self.default_us / self.winner_us

    def wins(self, margin: float) -> bool:
        """Faster than the default by ``margin``, and faster at all beyond the rounds' noise: on the H100 a
        winner that cleared the margin by less than its spread (4096x4096x4096, x1.020 at 7.8%) validated at
        x0.981 (docs/cublaslt.md, section 3)."""
        return self.speedup >= 1 + margin and self.low >= 1.0


def crowned(verdict: Verdict, report: Verdict, margin: float) -> bool:
    """Whether a candidate is crowned: its ``verdict`` wins by ``margin`` and the ``report`` Bench gives for it
    is a reading at all (a time under the device's floor is infinite there: a harness error, never a winner)."""
    return verdict.wins(margin) and math.isfinite(report.winner_us) and report.winner_us > 0

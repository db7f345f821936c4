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

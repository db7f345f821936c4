"""Small statistics shared by stages and benchmarks."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive ``values``; None when there are none."""
    logs = [math.log(v) for v in values]
    return math.exp(statistics.fmean(logs)) if logs else None

"""The cuBLASLt config space of one algorithm as axes, and ways through it (pure: no GPU, no nvmath).

A config is a combo ``(tile, stages, (split_k, reduction), swizzle, custom_option, cluster_shape)`` over
``axes``, the value lists an algorithm's caps allow in that order. Random draws over the whole product
reach the families whose combos mostly pass ``cublasLtMatmulAlgoCheck``; for a constrained family (on the
H100, 10,000 random draws of algorithm 66, the heuristic's own nvjet family, found no valid combo) the
valid configs are reached from a known-valid one, one axis at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

Combo = tuple


def decode(index: int, axes: Sequence[Sequence]) -> Combo:
    """The ``index``-th combo of the product of ``axes`` (mixed radix, last axis fastest)."""
    combo = []
    for axis in reversed(axes):
        index, pick = divmod(index, len(axis))
        combo.append(axis[pick])
    return tuple(reversed(combo))


def size(axes: Sequence[Sequence]) -> int:
    total = 1
    for axis in axes:
        total *= len(axis)
    return total


def neighbours(combo: Combo, axes: Sequence[Sequence]) -> Iterator[Combo]:
    """Every combo that differs from ``combo`` on exactly one axis, nearest first across all axes: the values
    one step away on each axis, then two steps, ... (so a budget of a few dozen tries spreads over every axis
    instead of spending itself on the first one's values)."""
    centres = []
    for position, axis in enumerate(axes):
        values = list(axis)
        centres.append(values.index(combo[position]) if combo[position] in values else 0)
    reach = max((len(axis) for axis in axes), default=0)
    for step in range(1, reach):
        for position, axis in enumerate(axes):
            for index in (centres[position] - step, centres[position] + step):
                if 0 <= index < len(axis) and axis[index] != combo[position]:
                    yield (*combo[:position], axis[index], *combo[position + 1 :])

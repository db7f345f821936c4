"""Choosing finalists from one noisy screen so that a larger pool never does worse than a pool it contains.

Candidates come in a fixed order (torch's default, the heuristic's list, its neighbours, then any random draws
in their seeded order), so every smaller pool the search could have used is a prefix of a larger one. Picking
the best ``k`` of the whole screen lets lucky outliers of a large pool crowd out the true best of a small one
(the measured case: 1,500 configs confirmed *worse* than 104 of them). Taking the best ``k`` of every prefix
tier instead makes the finalists of a pool contain the finalists of each tier inside it, so the final
comparison (the full harness, interleaved with the default) always sees what the smaller pool would have sent
it. A search adds its own natural prefixes as tiers (the default and the heuristic's list: the cheap search),
so its larger pool cannot lose to them either. Pure functions: ``bench`` replays recorded screens through
them, and a test does too.
"""

from __future__ import annotations

from collections.abc import Sequence

TIERS = (32, 128, 512)  # prefix sizes of the candidate order, then the whole pool


def tier_sizes(pool: int, tiers: Sequence[int] = TIERS) -> list[int]:
    """The prefix sizes that apply to a pool of ``pool`` candidates, ending with the pool itself."""
    return sorted({t for t in tiers if t < pool} | {pool})


def finalists(screened: Sequence[float | None], per_tier: int, tiers: Sequence[int] = TIERS) -> list[int]:
    """Indices (into the candidate order) of the best ``per_tier`` screened candidates of every prefix tier,
    best first by screen time. ``None`` marks a candidate that was not screened or failed."""
    chosen: set[int] = set()
    for size in tier_sizes(len(screened), tiers):
        ranked = sorted((i for i in range(size) if screened[i] is not None), key=lambda i: screened[i])
        chosen.update(ranked[:per_tier])
    return sorted(chosen, key=lambda i: screened[i])

"""Held-out token counts: every grid row's bucket (``--m-grid``, ``gather/mgrid.py``) timed at token counts
nobody tuned, before its winner ships over the whole bucket.

A grid row serves the token counts from the previous grid point + 1 to its own. Validate times its winner at
the bucket's lower edge, its middle and two more counts inside it, each against torch's default, interleaved as
the grid rows are: the heaviest counts the workload ran there that nobody tuned (``ShapeRecord.ran_inside``: a
listed grid's gaps, or counts ``--grid-budget`` dropped), else counts drawn (``random.Random`` seeded by the
run's seed and the row's key, so a rerun draws the same).
A bucket with a held-out count below x0.99 beyond the pair's noise is split there: it keeps the counts from the
lowest held out above the highest such count (else its grid point), where every count held out passed, and the
bundle ships the winner over that part alone (a row the gate dropped ships nowhere); the untimed counts between
run torch's default, as Bench's narrowing leaves them (``bench/bucket_score.py``: a loss did not mean a win
just above it). A winner tuned at the bucket's top loses most near its bottom, where
its tiles are emptiest (on the H200, x0.48-0.62 one count above the grid point below, docs/serving.md), so the
split keeps most of a bucket. A winner that cannot compute the bucket's other counts (a Triton kernel compiled
for its own sizes, ``triton_gemm.serves_range``) serves its grid point alone anyway: it has nothing held out.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence

from ...backends.base import DEFAULT
from ...formats.tunableop import format_key, parse_key
from ...kernels.triton_gemm import serves_range
from .measured import MeasuredRow

FLOOR = 0.99  # a held-out count below this speedup, beyond noise, splits its bucket
DRAWS = 2  # counts drawn inside each bucket, besides its lower edge and its middle
SEED = 0
RECORD = "held_out.json"  # Validate's verdict, beside gate.json


def held_out_counts(bucket: tuple[int, int], key: str, seed: int = SEED, ran: Sequence[int] = ()) -> list[int]:
    """The token counts a bucket is validated at besides its grid point: the lower edge, the middle and
    ``DRAWS`` more inside (fewer where the bucket is narrower): the first of ``ran`` (counts the workload ran
    there untuned, heaviest first) that lie inside, the rest drawn."""
    lo, hi = bucket
    fixed = {lo, (lo + hi) // 2}
    chosen = [m for m in ran if lo < m < hi and m not in fixed][:DRAWS]
    inside = [m for m in range(lo + 1, hi) if m not in chosen]
    drawn = random.Random(f"{seed}:{key}").sample(inside, min(DRAWS - len(chosen), len(inside)))
    return sorted({*fixed, *chosen, *drawn} - {hi})


def held_out_rows(
    rows: Sequence,
    bucket_of: Mapping[str, tuple[int, int]],
    seed: int = SEED,
    ran_inside: Mapping[str, Sequence[int]] | None = None,
) -> list:
    """The rows to time at held-out counts: each grid row (``validate.MergedRow``) with a wider bucket whose
    winner could ship over it, at each of its ``held_out_counts`` (``ran_inside``: grid key -> the counts the
    workload ran there untuned), weighing nothing in the workload's figures."""
    found = []
    for row in rows:
        bucket = bucket_of.get(row.key)
        if bucket is None or row.solution == DEFAULT or not serves_range(row.solution, *bucket):
            continue
        for m in held_out_counts(bucket, row.key, seed, (ran_inside or {}).get(row.key, ())):
            problem = row.problem.with_tokens(m)
            if problem is not None:
                key = ",".join(format_key(problem))
                found.append(
                    dataclasses.replace(
                        row, key=key, problem=problem, calls=0, time_share=0.0, padded_key=None, held_out_of=row.key
                    )
                )
    return found


def below(row: MeasuredRow) -> bool:
    """Whether a held-out row is below ``FLOOR`` beyond noise: its first pair, and its confirming one if it
    was measured again, each slower than ``FLOOR`` times the baseline by more than that pair's spread."""
    pairs = [row.measured, *([row.confirm] if row.confirm else [])]
    return all(p.speedup < FLOOR and p.tuned.median * FLOOR > p.baseline.median * (1 + p.noise) for p in pairs)


def verdict(
    rows: Sequence[MeasuredRow], seed: int = SEED, ran_inside: Mapping[str, Sequence[int]] | None = None
) -> dict:
    """The held-out figures: every held-out row's speedup by its grid row, the worst, the buckets split
    (grid key -> ``{"lo": the lowest count it keeps, "why": ...}``), and how many of the counts held out the
    workload ran untuned (``ran_inside``: grid key -> those counts) with their worst."""
    by_grid: dict[str, list[dict]] = {}
    split: dict[str, dict] = {}
    for row in sorted(rows, key=lambda r: r.n):
        low = below(row)
        by_grid.setdefault(row.held_out_of, []).append(
            {"m": row.n, "speedup": round(row.speedup, 4), "noise": round(row.noise, 4), "below": low}
        )
        if low:  # in ascending order: the last one below sets the split
            split[row.held_out_of] = {
                "lo": _grid_point(row.held_out_of),
                "why": f"M = {row.n} held out at x{row.speedup:.3f}, below x{FLOOR} beyond noise",
            }
        elif row.held_out_of in split and split[row.held_out_of]["lo"] > row.n:  # the first held above the loss
            split[row.held_out_of]["lo"] = row.n
    worst = min(rows, key=lambda r: r.speedup, default=None)
    shipped = [r for r in rows if r.n >= split.get(r.held_out_of, {}).get("lo", 0)]  # inside what the bundle serves
    worst_shipped = min(shipped, key=lambda r: r.speedup, default=None)
    unsure = [r for r in shipped if r.speedup < FLOOR]  # below the floor, but not beyond its noise: shipped
    lowest = worst_shipped if unsure else None  # the lowest of them
    ran = [r for r in rows if r.n in (ran_inside or {}).get(r.held_out_of or "", ())]
    return {
        "seed": seed,
        "rows": len(rows),
        "ran": {"count": len(ran), "worst": _figure(min(ran, key=lambda r: r.speedup))} if ran else None,
        "worst": _figure(worst),
        "worst_shipped": _figure(worst_shipped),
        "by_grid_row": by_grid,
        "split": split,
        "within_noise": {"count": len(unsure), "lowest": {**_figure(lowest), "noise": round(lowest.noise, 4)}}
        if lowest
        else None,
    }


def _grid_point(key: str) -> int:
    """The token count of the grid row ``key`` (the top of its bucket)."""
    return parse_key(*key.split(",", 1)).n  # type: ignore[return-value]


def _figure(row: MeasuredRow | None) -> dict | None:
    return None if row is None else {"key": row.key, "m": row.n, "speedup": round(row.speedup, 4)}


def lines(result: dict | None) -> list[str]:
    """The report's lines on the held-out counts (none where no bucket had any)."""
    if not result or not result["rows"]:
        return []
    worst = result["worst"]
    ran = result.get("ran")
    ran_said = (
        f", {ran['count']} of them counts the workload ran (the worst x{ran['worst']['speedup']:.3f} at M = "
        f"{ran['worst']['m']})"
        if ran
        else ""
    )
    out = [
        f"{result['rows']} timed at token counts inside the grid rows' buckets that nobody tuned (seed "
        f"{result['seed']}{ran_said}); the worst x{worst['speedup']:.3f} at M = {worst['m']} (`{worst['key']}`)"
    ]
    shipped = result.get("worst_shipped")
    if result["split"] and shipped:
        out.append(f"inside the ranges the bundle serves after the splits: the worst x{shipped['speedup']:.3f}")
    out += [f"split `{key}`: serves from M = {s['lo']} up ({s['why']})" for key, s in sorted(result["split"].items())]
    unsure = result.get("within_noise")
    if unsure:
        low = unsure["lowest"]
        out.append(
            f"{unsure['count']} shipped held-out count(s) read below x{FLOOR} within their noise, so their buckets "
            f"ship whole (the lowest x{low['speedup']:.3f} at M = {low['m']}, noise {low['noise']:.1%}): more "
            "--validate-rounds would tell"
        )
    return out

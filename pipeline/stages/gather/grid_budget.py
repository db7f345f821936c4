"""``--grid-budget``: what the M grid keeps so that Bench's estimated time on one GPU fits a budget
(docs/serving.md, "What the pipeline does").

Bench's time is estimated per GEMM (``gemm_seconds``: searched, a power of two searched with a bucket below it,
or started from a neighbour's winner). Over the budget, the grid gives up, in this order, each step only as far
as it must:

1. the grid points the workload did not run, finest first (``coarseness``): their buckets' counts are served
   by the next point kept;
2. the search of the counts it ran: the finest are *seeded* (Bench starts them from the winner of their
   weight's nearest searched count above them that crowned one), down to the powers of two, each weight's
   largest count kept searched;
3. counts it ran: first the GEMMs outside any weight family whose share of its GEMM time is negligible
   (``NEGLIGIBLE_SHARE`` each: the rotary embedding's outer products), lightest first; then its weights'
   counts, finest first and lightest first within a coarseness, never a power of two nor a weight's largest
   count. A dropped count is served by its weight's next count up, as a count between grid points is; a
   dropped outer product runs torch's default.

Where even that overruns the budget the note says so and names the fewest GPUs that would fit it. No function
here reads a file or needs torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...problem import GemmProblem

SECONDS_PER_PROBLEM = 4.0  # Bench's wall time per GEMM on one GPU, cuBLASLt with Triton (docs/serving.md)
SECONDS_PER_WIDE_ANCHOR = 7.0  # a power of two searched whose bucket holds counts below it: crowned three times in
# four, and a crowned winner's bucket scoring adds 3.5 s; 6.6 and 7.9 s on two vLLM-sized grids (docs/serving.md)
SECONDS_PER_SEEDED = 3.4  # one started from a neighbour's winner: two verdicts where it holds, one and a search where
# not; 3.4 s a problem over the 313 seeded of a vLLM-sized grid on one H200 (docs/serving.md)
GPU_EFFICIENCY = 0.8  # what each of several GPUs counts of one: workers' start-up and Triton's compiles share the host
NEGLIGIBLE_SHARE = 0.001  # a GEMM outside any family under this share of the GEMM time is the first a budget drops

# a GEMM as the estimate sees it: the bucket its winner serves (None outside any family), and whether it is seeded
EstimatedGemm = tuple[tuple[int, int] | None, bool]
# one family's grid: its points, and the counts the workload ran (count -> the GEMM it ran there)
Grids = Mapping[GemmProblem, tuple[Sequence[int], Mapping[int, GemmProblem]]]


def coarseness(m: int) -> int:
    """How coarse a token count is, 0 the coarsest: a power of two, then a multiple of 64 (every ladder point
    above the capture sizes is one), then of 16, then the rest (the capture sizes in steps of 8, and the odd
    counts a prefill chunk runs). A budget keeps the coarsest."""
    if m & (m - 1) == 0:
        return 0
    if m % 64 == 0:
        return 1
    return 2 if m % 16 == 0 else 3


@dataclass(frozen=True)
class BudgetFit:
    """What ``fit_budget`` keeps: the finest ``coarseness`` of the grid points the workload did not run that
    are tuned (-1: none), the finest of the counts it ran that are searched in full (the others, seeded, start
    from the winner of their weight's nearest searched count above; 3: all searched), the GEMMs it ran that are
    not tuned at all, and the note of what it gave up."""

    finest: int = 3
    searched: int = 3
    note: str = ""
    dropped: frozenset[GemmProblem] = frozenset()

    def keeps(self, m: int, ran: Mapping[int, GemmProblem]) -> bool:
        if m in ran:
            return ran[m] not in self.dropped
        return coarseness(m) <= self.finest

    def seeds(self, m: int, ran: Mapping[int, GemmProblem]) -> bool:
        """Whether ``m``, a count the workload ran and the grid keeps, starts from a neighbour's winner: finer
        than ``searched`` and not its weight's largest count (every weight keeps one count searched in full)."""
        return self.keeps(m, ran) and m in ran and coarseness(m) > self.searched and m != max(ran)


def serving_buckets(points: Iterable[int]) -> dict[int, tuple[int, int]]:
    """Each grid point's bucket ``(lo, hi)``: the counts it serves, from the previous point + 1 to itself."""
    ordered = sorted(points)
    return {m: (prev + 1, m) for prev, m in zip([0, *ordered], ordered, strict=False)}


SECONDS_BY_CLASS = {  # Bench's estimated seconds on one GPU for one GEMM of each of ``gemm_class``'s classes
    "alone": SECONDS_PER_PROBLEM,
    "wide power of two": SECONDS_PER_WIDE_ANCHOR,
    "wide other": SECONDS_PER_PROBLEM,
    "seeded": SECONDS_PER_SEEDED,
    "outside any family": SECONDS_PER_PROBLEM,
}


def gemm_class(bucket: tuple[int, int] | None, seeded: bool = False) -> str:
    """The estimate's class of one GEMM (a key of ``SECONDS_BY_CLASS``), from the counts its winner serves
    (``bucket``, None for one outside any family) and whether it starts from a neighbour's winner."""
    if seeded:
        return "seeded"
    if bucket is None:
        return "outside any family"
    lo, hi = bucket
    if lo >= hi:
        return "alone"
    return "wide power of two" if coarseness(hi) == 0 else "wide other"


def gemm_seconds(bucket: tuple[int, int] | None, seeded: bool = False) -> float:
    """Bench's estimated seconds on one GPU for one GEMM (``gemm_class``)."""
    return SECONDS_BY_CLASS[gemm_class(bucket, seeded)]


def bench_seconds(gemms: Iterable[EstimatedGemm]) -> float:
    """Bench's estimated seconds on one GPU for ``gemms``, each its bucket and whether it is seeded."""
    return sum(gemm_seconds(bucket, seeded) for bucket, seeded in gemms)


def wall_seconds(seconds: float, gpus: int) -> float:
    """``seconds`` of Bench on one GPU spread over ``gpus`` (at ``GPU_EFFICIENCY`` each where there are several)."""
    return seconds if gpus <= 1 else seconds / (gpus * GPU_EFFICIENCY)


def gpus_to_fit(seconds: float, budget_s: float, most: int = 8) -> str:
    """Where ``seconds`` of Bench on one GPU overrun ``budget_s``, the fewest GPUs (at ``GPU_EFFICIENCY`` each, up
    to ``most``) whose wall time fits it, as a note's clause; empty where none does."""
    fits = next((g for g in range(2, most + 1) if wall_seconds(seconds, g) <= budget_s), None)
    if fits is None:
        return ""
    return f" (about {wall_seconds(seconds, fits) / 60:.0f} min of wall time on {fits} GPUs: --gpus {fits})"


def _estimate(grids: Grids, others: Sequence[GemmProblem], fit: BudgetFit) -> tuple[float, int, int]:
    """Bench's estimated seconds on one GPU for ``fit``, with the GEMMs it tunes and how many of them are seeded
    (a count's bucket: from the previous count kept + 1 to itself, ``serving_buckets``)."""
    gemms: list[EstimatedGemm] = [(None, False) for p in others if p not in fit.dropped]
    for points, ran in grids.values():
        kept = serving_buckets(m for m in points if fit.keeps(m, ran))
        gemms += [(bucket, fit.seeds(m, ran)) for m, bucket in kept.items()]
    return bench_seconds(gemms), len(gemms), sum(seeded for _, seeded in gemms)


def droppable(grids: Grids, others: Sequence[GemmProblem], shares: Mapping[GemmProblem, float]) -> list[GemmProblem]:
    """The GEMMs the workload ran that step 3 may drop, in the order it drops them (the module's docstring);
    ``shares``: each one's share of the workload's GEMM time (0 where missing)."""
    light = sorted((p for p in others if shares.get(p, 0.0) < NEGLIGIBLE_SHARE), key=lambda p: shares.get(p, 0.0))
    counts = [
        (problem, m) for _, ran in grids.values() for m, problem in ran.items() if coarseness(m) > 0 and m != max(ran)
    ]
    counts.sort(key=lambda item: (-coarseness(item[1]), shares.get(item[0], 0.0), item[1]))
    return light + [problem for problem, _ in counts]


def fit_budget(
    grids: Grids,
    budget_s: float,
    others: Sequence[GemmProblem] = (),
    shares: Mapping[GemmProblem, float] | None = None,
    basis: str = "GEMM time",
) -> BudgetFit:
    """What keeps the grids and the GEMMs ``others`` outside any family within ``budget_s`` of Bench on one GPU
    (the module's docstring: three steps, each only as far as it must go). ``shares``: each GEMM's share of the
    workload's GEMM time (``basis``: of what, where not the time), which orders step 3 and its note."""
    shares = shares or {}
    total = len(others) + sum(len(points) for points, _ in grids.values())
    for finest in (3, 2, 1, 0, -1):
        seconds, kept, _ = _estimate(grids, others, BudgetFit(finest))
        if seconds <= budget_s:
            break
    minutes = f"{budget_s / 60:g} min"
    if seconds <= budget_s:
        if kept == total:
            return BudgetFit()
        kind = {2: "the multiples of 16", 1: "the multiples of 64 and the ladder", 0: "the powers of two"}.get(
            finest, "no other point"
        )
        return BudgetFit(finest, note=(
            f"--grid-budget {minutes}: {total - kept} of {total} grid points dropped to fit; the grid keeps what the "
            f"workload ran and {kind} (their buckets widen to the next point kept)"
        ))  # fmt: skip
    ran_gemms, alone = kept, seconds / 60
    for searched in (2, 1, 0):
        fit = BudgetFit(-1, searched)
        seconds, kept, seeded = _estimate(grids, others, fit)
        if seconds <= budget_s:
            break
    order = droppable(grids, others, shares) if seconds > budget_s else []
    if not seeded and not order:
        return BudgetFit(-1, 3, (
            f"--grid-budget {minutes}: the {kept} GEMMs the workload ran cost about {alone:.0f} min of Bench on one "
            f"GPU by themselves{gpus_to_fit(seconds, budget_s)}; no other grid point is tuned"
        ))  # fmt: skip
    dropped = _drop(grids, others, order, fit, seconds, budget_s)
    fit = BudgetFit(-1, fit.searched, dropped=dropped)
    seconds, kept, seeded = _estimate(grids, others, fit)
    which = {2: "the steps of 8 between multiples of 16", 1: "all but the multiples of 64 and the ladder"}.get(
        fit.searched, "all but the powers of two"
    )
    started = (
        f"{seeded} of them ({which}, each weight's largest count aside) start from the winner of their weight's "
        f"nearest searched count above instead, searched only where it no longer beats torch's default"
        if seeded
        else "none is seeded"
    )
    over = "" if seconds <= budget_s else f": still over the budget{gpus_to_fit(seconds, budget_s)}"
    return BudgetFit(-1, fit.searched, (
        f"--grid-budget {minutes}: the {ran_gemms} GEMMs the workload ran cost about {alone:.0f} min of Bench on one "
        f"GPU searched in full; {_dropped_clause(others, shares, dropped, basis)}{started}: about "
        f"{seconds / 60:.0f} min{over}; no other grid point is tuned"
    ), dropped)  # fmt: skip


def _drop(
    grids: Grids,
    others: Sequence[GemmProblem],
    order: Sequence[GemmProblem],
    fit: BudgetFit,
    seconds: float,
    budget_s: float,
) -> frozenset[GemmProblem]:
    """Step 3: the fewest of ``order`` (``droppable``'s) whose dropping brings ``fit``, estimated at ``seconds``,
    within ``budget_s``."""
    dropped: set[GemmProblem] = set()
    for problem in order:  # each drop re-estimated: the next count up may widen its bucket and cost more
        if seconds <= budget_s:
            break
        dropped.add(problem)
        seconds = _estimate(grids, others, BudgetFit(fit.finest, fit.searched, dropped=frozenset(dropped)))[0]
    return frozenset(dropped)


def _dropped_clause(
    others: Sequence[GemmProblem], shares: Mapping[GemmProblem, float], dropped: frozenset[GemmProblem], basis: str
) -> str:
    """What step 3 gave up, as the note says it (empty where it dropped nothing)."""
    if not dropped:
        return ""
    outside = {p for p in others if p in dropped}
    counts = dropped - outside

    def share(problems: set[GemmProblem]) -> str:
        return f", {sum(shares.get(p, 0.0) for p in problems):.2%} of its {basis}" if shares else ""

    parts = []
    if outside:
        gemms = _plural(len(outside), "GEMM")
        parts.append(f"{gemms} outside any weight family{share(outside)}, run by torch's default")
    if counts:
        parts.append(
            f"{_plural(len(counts), 'count')} of its weights{share(counts)}, finest first, each served by its "
            f"weight's next count up (its bucket widens)"
        )
    return f"to fit, {' and '.join(parts)} are not tuned; of the rest, "


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"

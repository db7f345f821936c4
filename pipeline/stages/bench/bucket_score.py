"""A grid point's winner scored over its bucket (``--m-grid``, docs/serving.md): the winner serves every token
count from the previous grid point + 1 to its own, so Bench times it at the bucket's lower edge, its middle and
one count below the grid point too, each against torch's default (the backend's ``retime``: the library's own
check at that size, then a verdict), and its score is its worst ratio over them. Where that is below ``FLOOR``,
the next finalists of the search (up to ``ALTERNATIVES``, each crowned again at the grid point) are scored the
same way and the best worst ratio wins; where none reaches ``FLOOR``, the best at the grid point stays and
serves only from the lowest count it held at above its highest loss (``serves_from``), found by halving the
gap between the two (up to ``NARROWING_PROBES`` more counts timed, ``_narrowed``): a loss at a bucket's middle
did not mean a win just above it (on the budgeted vLLM-sized grid a winner lost at 96 and held at 127, and
Validate's held-out counts lost at 97 and 104: docs/decisions.md, "A narrowed bucket starts where it
holds"). A count where the library refuses a candidate scores 0: it is not valid there.

A winner that cannot compute the bucket's other counts (a Triton kernel compiled for its own sizes,
``triton_gemm.serves_range``) would serve its grid point alone, the bucket's other counts running torch's
default. What can serve the bucket is tried instead (``_range_servers``): first the winner's own config on the
kernel of its family that takes the token count as an argument (``triton_gemm.ranged_twin``: a swapped tile's),
then the fastest finalist that serves the bucket. The first of them that, both re-timed at the grid point, is
within ``TIE`` of the winner there and holds ``FLOOR`` over the bucket takes its place. Else the winner keeps its grid
point, and the first of them that holds ``FLOOR`` over the rest of the bucket (``lo`` to ``hi - 1``, scored at
the same counts a bucket is), crowned one count below the grid point, is a row of its own there (``BELOW``, in
the winner's ``bucket``; ``rows_below``) that serves those counts, as a grid point would. No finalist that
cannot serve the bucket is tried in place of a winner. A Triton winner whose kernel takes its sizes as
arguments is scored as a library's is. A backend that cannot re-time a winner (``retime`` returns None) leaves
the bucket unscored, as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...backends.base import DEFAULT, Backend, ProblemResult, TuneSettings, WinnerRecord
from ...formats.tunableop import format_key
from ...kernels.triton_gemm import ranged_twin, serves_range
from ...problem import GemmProblem

FLOOR = 0.99  # the worst ratio a candidate may have over its bucket (as Validate's held-out counts)
ALTERNATIVES = 2  # finalists scored where the winner falls below FLOOR inside its bucket
TIE = 0.005  # how far behind a fixed-size winner at its grid point a finalist serving the whole bucket may be
NARROWING_PROBES = 3  # counts timed between a kept winner's highest loss in its bucket and the next count it holds
BELOW = "below"  # a fixed-size winner's ``bucket`` key: the result of the finalist serving the rest of its bucket


@dataclass
class Scored:
    name: str  # the candidate, as crowned at the grid point (``at_top`` is the search's result, crowned again)
    at_top: ProblemResult
    speedups: dict[int, float]  # token count -> speedup over torch's default (0: not valid there)

    @property
    def worst(self) -> float:
        return min(self.speedups.values())

    @property
    def highest_loss(self) -> int | None:
        """The highest count below the grid point where it fell below ``FLOOR`` (None: none). The grid point is
        the crown's to judge, and Validate's: a winner re-timed there keeps it whatever the reading."""
        top = self.at_top.problem.n
        return max((m for m, s in self.speedups.items() if s < FLOOR and m < top), default=None)

    def serves_from(self, lo: int) -> int:
        """The lowest count it serves: the lowest timed above ``highest_loss`` (the counts between were not
        timed: they run torch's default), at most the grid point."""
        lost = self.highest_loss
        return lo if lost is None else min(m for m in self.speedups if m > lost)


def edge_counts(bucket: tuple[int, int]) -> list[int]:
    """The counts a bucket's candidates are timed at besides the grid point: its lower edge, its middle and the
    count just below the grid point (a winner whose tile fits its grid point exactly loses there: on the H200,
    x0.92 at M = 95 under the M = 96 winner, docs/decisions.md). No count where the bucket is the grid point alone."""
    lo, hi = bucket
    return sorted({lo, (lo + hi) // 2, hi - 1} - {hi}) if lo < hi else []


def speedup_at(
    backend: Backend,
    problem: GemmProblem,
    name: str,
    record: WinnerRecord,
    settings: TuneSettings,
    crowning: bool = True,
):
    """``name``'s speedup over torch's default at ``problem`` (0.0 where it cannot run there) and the re-timed
    result; None where the backend cannot re-time a winner. The speedup is the verdict's; ``crowning`` False
    (an edge count, where nothing is crowned) skips the second reading a crowned winner reports: of the first
    run's 139 edge counts 113 won by the margin and took one, about 0.5 s each (docs/decisions.md)."""
    try:
        again = backend.retime(ProblemResult(problem, winner=name, record=record), settings, report=crowning)
    except Exception as err:  # refused by the library at this size, or a reading under the floor
        return 0.0, ProblemResult(problem, errors=[f"{type(err).__name__}: {err}"])
    if again is None:
        return None
    first = again.candidates[0] if again.candidates else None
    speedup = (first.verdict_speedup if first else None) or again.speedup
    if speedup is None and first and first.final_us and again.default_us:
        speedup = again.default_us / first.final_us
    return float(speedup or 0.0), again


def score(
    backend: Backend,
    result: ProblemResult,
    bucket: tuple[int, int] | None,
    settings: TuneSettings,
    prior: ProblemResult | None = None,
) -> ProblemResult:
    """``result`` with its winner scored over ``bucket`` (``result.bucket``), replaced by a finalist that serves
    the bucket better where the winner falls below ``FLOOR`` in it. A result re-timed rather than searched has no
    finalists of its own: those of the ``prior`` it was re-timed from (the cached or seeding result) stand in."""
    if bucket is None or bucket[0] >= bucket[1] or not result.has_winner:
        return result
    lo, hi = bucket
    counts = [m for m in edge_counts(bucket) if result.problem.with_tokens(m) is not None]
    finalists = _finalists(result, bucket) or (_finalists(prior, bucket, result.winner) if prior else [])
    if not serves_range(result.winner, lo, hi):
        return _instead_of_fixed(backend, result, bucket, counts, settings, finalists)
    winner = _scored(backend, result, counts, settings)
    if winner is None:
        result.bucket = {"lo": lo, "hi": hi, "note": f"not scored: the {backend.name} backend cannot re-time"}
        return result
    tried = [winner]
    if winner.worst < FLOOR:
        for candidate in finalists[:ALTERNATIVES]:
            record = WinnerRecord(dict(candidate.config or {}))
            scored = _crowned_and_scored(backend, result.problem, candidate.name, record, counts, settings)
            if scored is not None:
                tried.append(scored)
    best = max(tried, key=lambda s: (s.worst >= FLOOR, s.worst if s.worst >= FLOOR else s.speedups[hi]))
    if best.worst < FLOOR:
        best = _narrowed(backend, best, settings)
    if best is not winner:
        result = _crowned(result, best)
    result.bucket = _record(bucket, best, [(s.name, s.worst) for s in tried])
    return result


def _record(bucket: tuple[int, int], best: Scored, tried: Sequence[tuple[str, float]]) -> dict:
    """``result.bucket``: the bucket, the shipped candidate's speedups over it, its worst, the lowest count it
    serves, and what was tried (name, worst ratio over the bucket)."""
    lo, hi = bucket
    return {
        "lo": lo,
        "hi": hi,
        "speedups": {str(m): round(s, 4) for m, s in sorted(best.speedups.items())},
        "worst": round(best.worst, 4),
        "serves_from": best.serves_from(lo),
        "tried": [{"name": name, "worst": round(worst, 4)} for name, worst in tried],
    }


def _instead_of_fixed(
    backend: Backend,
    result: ProblemResult,
    bucket: tuple[int, int],
    counts: Sequence[int],
    settings: TuneSettings,
    finalists: Sequence,
) -> ProblemResult:
    """``result``, whose winner serves its grid point alone, with the first of ``_range_servers`` in its place
    that, re-timed at the grid point beside the winner, is within ``TIE`` of it there and holds ``FLOOR`` at
    ``counts``; else ``result`` with one of them as the row below it where it serves the rest of the bucket
    (``_with_below``)."""
    servers = _range_servers(result, bucket, finalists)
    if not servers:
        return result
    fixed = speedup_at(backend, result.problem, result.winner, result.record, settings, crowning=False)  # type: ignore[arg-type]
    if fixed is None:
        return result
    for name, record in servers:
        ranged = speedup_at(backend, result.problem, name, record, settings)
        if ranged is None:
            return result
        scored = None
        if ranged[1].has_winner and ranged[0] * (1 + TIE) >= fixed[0]:
            scored = _scored(backend, ranged[1], counts, settings)
        if scored is not None and scored.worst >= FLOOR:
            winner = result.winner
            result = _crowned(result, scored)
            result.origin += f" (in place of {winner}, x{fixed[0]:.3f} at the grid point, which serves it alone)"
            result.bucket = _record(bucket, scored, [(winner, 0.0), (scored.name, scored.worst)])  # no count else
            return result
    return _with_below(backend, result, bucket, servers, settings)


def _range_servers(
    result: ProblemResult, bucket: tuple[int, int], finalists: Sequence
) -> list[tuple[str, WinnerRecord]]:
    """What may serve the bucket of ``result``'s fixed-size winner, in the order tried: the winner's own config
    on its family's kernel that takes the token count as an argument (``triton_gemm.ranged_twin``: the swapped
    tile's), then the search's fastest finalist that serves the bucket."""
    found = []
    twin = ranged_twin(result.winner or "")
    if twin is not None and serves_range(twin.name, *bucket):
        found.append((twin.name, WinnerRecord(twin.to_json())))
    return found + [(c.name, WinnerRecord(dict(c.config or {}))) for c in finalists[:1]]


def _with_below(
    backend: Backend,
    result: ProblemResult,
    bucket: tuple[int, int],
    servers: Sequence[tuple[str, WinnerRecord]],
    settings: TuneSettings,
) -> ProblemResult:
    """``result``, whose fixed-size winner keeps its grid point, with the first of ``servers`` (name, record:
    candidates that serve ranges) that holds ``FLOOR`` at every count of the rest of its bucket (``lo`` to
    ``hi - 1``), crowned at ``hi - 1``, as the row ``BELOW`` it; else ``result`` as it was."""
    lo, hi = bucket
    top = result.problem.with_tokens(hi - 1)
    if top is None:
        return result
    rest = (lo, hi - 1)
    counts = [m for m in edge_counts(rest) if result.problem.with_tokens(m) is not None]
    tried = []
    for name, record in servers:
        scored = _crowned_and_scored(backend, top, name, record, counts, settings)
        if scored is None:
            continue
        tried.append((name, scored.worst))
        if scored.worst < FLOOR:
            continue
        below = scored.at_top
        below.origin = f"bucket {lo}-{hi}: {name} serves {lo}-{hi - 1}, below the fixed-size winner of M = {hi}"
        below.bucket = _record(rest, scored, tried)
        result.bucket = {"lo": lo, "hi": hi, "note": f"{result.winner} serves M = {hi} alone", BELOW: below.to_json()}
        return result
    return result


def rows_below(results: Sequence[ProblemResult]) -> list[ProblemResult]:
    """The results ``BELOW`` fixed-size winners (each a row at one count below its grid point, whose ``bucket``
    is the rest of the winner's): Bench writes them beside the grid's own, so that MergeResults, Validate and the
    bundle take each as a grid row of its own."""
    return [ProblemResult.from_json(r.bucket[BELOW]) for r in results if BELOW in r.bucket]


def _scored(backend: Backend, top: ProblemResult, counts: Sequence[int], settings: TuneSettings) -> Scored | None:
    """``top``'s winner (crowned at the grid point) timed at ``counts`` too; None where it cannot be re-timed."""
    speedups = {top.problem.n: float(top.speedup or 0.0)}
    for m in counts:
        problem = top.problem.with_tokens(m)
        timed = speedup_at(backend, problem, top.winner, top.record, settings, crowning=False)  # type: ignore[arg-type]
        if timed is None:
            return None
        speedups[m] = timed[0]
    return Scored(top.winner, top, speedups)  # type: ignore[arg-type]


def _narrowed(backend: Backend, scored: Scored, settings: TuneSettings) -> Scored:
    """``scored`` timed at up to ``NARROWING_PROBES`` more counts, each halving the gap between its highest
    loss and the lowest count above it where it held ``FLOOR``, so that ``serves_from`` starts near where it
    begins to hold rather than just above the loss (a probe the library refuses is a loss)."""
    for _ in range(NARROWING_PROBES):
        lost = scored.highest_loss
        if lost is None:
            break
        held = scored.serves_from(lost)
        middle = (lost + held) // 2
        problem = scored.at_top.problem.with_tokens(middle)
        if held - lost <= 1 or problem is None:
            break
        timed = speedup_at(backend, problem, scored.name, scored.at_top.record, settings, crowning=False)  # type: ignore[arg-type]
        if timed is None:
            break
        scored.speedups[middle] = timed[0]
    return scored


def _crowned_and_scored(
    backend: Backend,
    problem: GemmProblem,
    name: str,
    record: WinnerRecord,
    counts: Sequence[int],
    settings: TuneSettings,
) -> Scored | None:
    """``name`` crowned at ``problem`` (its verdict and reported reading) and timed at ``counts`` too; None where
    it is not crowned there or cannot be re-timed."""
    crowned = speedup_at(backend, problem, name, record, settings)
    if crowned is None or not crowned[1].has_winner:
        return None
    return _scored(backend, crowned[1], counts, settings)


def _finalists(result: ProblemResult, bucket: tuple[int, int], winner: str | None = None) -> list:
    """The search's finalists but ``winner`` (default: ``result``'s) with a config that computes every count of
    ``bucket``, fastest at the grid point first."""
    found = [
        c
        for c in result.candidates
        if c.name not in (DEFAULT, winner or result.winner)
        and c.final_us
        and not c.error
        and c.config
        and serves_range(c.name, *bucket)
    ]
    return sorted(found, key=lambda c: c.final_us)


def _crowned(result: ProblemResult, best: Scored) -> ProblemResult:
    """``result`` with ``best`` (re-timed and crowned at the grid point) as its winner; the search kept."""
    top = best.at_top
    result.crown(best.name, top.winner_us, top.record)  # type: ignore[arg-type]
    result.default_us = top.default_us
    result.numerics = {**result.numerics, **top.numerics}
    result.origin = f"{result.origin + '; ' if result.origin else ''}bucket: {best.name} serves it better"
    return result


def served(results: Sequence[dict], buckets: Mapping[str, tuple[int, int]]) -> dict[str, dict]:
    """Per grid key whose Bench score narrowed its bucket, ``{"lo": the lowest count it serves, "why"}`` (the
    shape of Validate's held-out split). Only a score of the bucket the shapes give counts (a cached result may
    carry another grid's)."""
    narrowed = {}
    for key, scored in _scores_of_these_buckets(results, buckets):
        lo = scored.get("serves_from", scored["lo"])
        if lo > scored["lo"]:
            narrowed[key] = {"lo": lo, "why": f"Bench: x{scored['worst']:.3f} at worst over its bucket"}
    return narrowed


def below_buckets(results: Sequence[dict], buckets: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The bucket of each row ``BELOW`` a fixed-size winner, by its key: the rest of the winner's bucket, where
    that bucket is the one the shapes give (a cached result may carry another grid's)."""
    found = {}
    for _, scored in _scores_of_these_buckets(results, buckets):
        if BELOW in scored:
            below = scored[BELOW]
            found[",".join(format_key(GemmProblem.from_dict(below["problem"])))] = (
                below["bucket"]["lo"],
                below["bucket"]["hi"],
            )
    return found


def _scores_of_these_buckets(results: Sequence[dict], buckets: Mapping[str, tuple[int, int]]):
    """(grid key, Bench's bucket record) of each result whose record scores the bucket ``buckets`` gives its key."""
    for data in results:
        scored = data.get("bucket") or {}
        key = ",".join(format_key(GemmProblem.from_dict(data["problem"])))
        if key in buckets and (scored.get("lo"), scored.get("hi")) == tuple(buckets[key]):
            yield key, scored


def summary(results: Sequence[ProblemResult]) -> dict | None:
    """What scoring did over a Bench (None: no grid winner was scored): how many winners, how many gave way
    to another kernel (a finalist, a swapped winner's twin), how many serve part of their bucket, the worst
    ratio a shipped one has inside it, and how many fixed-size winners have a row ``BELOW`` them."""
    scored = [r for r in results if r.bucket.get("speedups")]
    below = sum(BELOW in r.bucket for r in results)
    if not scored and not below:
        return None
    return {
        "scored": len(scored),
        "replaced": sum(r.bucket["tried"][0]["name"] != r.winner for r in scored),
        "narrowed": sum(r.bucket["serves_from"] > r.bucket["lo"] for r in scored),
        "worst": min((r.bucket["worst"] for r in scored), default=None),
        "below": below,
    }


def line(figures: dict | None) -> str:
    """The report's line on it ("" where nothing was scored)."""
    if not figures:
        return ""
    said = []
    if figures["scored"]:
        said.append(
            f"Bench timed {figures['scored']} grid winners inside their buckets too (lower edge, middle, one below "
            "the grid point): "
            f"{figures['replaced']} gave way to a kernel that serves the bucket better, {figures['narrowed']} "
            f"serve only from where they hold above their highest loss (the worst ratio inside a bucket: "
            f"x{figures['worst']:.3f})"
        )
    if figures.get("below"):
        said.append(
            f"{figures['below']} fixed-size winners serve their grid point alone, and a kernel crowned one count "
            "below each (a swapped winner's twin, or a finalist) serves the rest of its bucket"
        )
    return "; ".join(said)

"""The M grid: the token counts each weight is tuned at, and the bucket of token counts each grid point serves
(docs/serving.md).

M is the token count, the activation's rows: in the BLAS frame of a row-major ``F.linear`` it is ``n``
(``problem.py``). A *family* is every field of a problem but ``n`` (``GemmProblem.token_family``): a weight,
its op, dtypes and layout, over every token count.

``--m-grid`` is one of:

* ``auto`` (the default): ``serving`` where the workload ran a weight at more than one token count, within
  ``--grid-budget`` (10 minutes of Bench on one GPU unless given), else ``exact``; ``exact`` for the embedded
  default workload too, the README's first run, whose size must not grow with a grid (``resolve``);
* ``exact``: the token counts the workload ran, nothing else (every bucket is one M);
* ``serving``: the token counts the workload ran, plus the decode sizes a server pads its batches to (vLLM's
  CUDA-graph capture sizes: 1, 2, 4, then steps of 8 to 248 and of 16 from 256 to 512) and above them a
  power-of-two ladder with midpoints (768, 1024, 1536, 2048, ...) for prefill chunks, up to ``--m-max``
  (default: the largest M the workload ran) rounded up to the grid;
* a list ``1,2,4,16``: those token counts (ascending, no repeats), and the largest the workload ran where it is
  above them, so that every count it ran lies in a bucket (what it ran between grid points is served by the
  next point up, as an unseen count is: the list bounds what Bench costs).

Each grid point serves the token counts from the previous grid point + 1 to its own (its bucket), the way
GridBased logic looks an unseen size up toward the next larger grid point. No function here reads a file or
needs torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...errors import BadInput
from ...formats.m_ranges import by_family, m_range, read_ranges
from ...formats.tunableop import TunableOpEntry
from ...kernels.triton_gemm import serves_range
from ...problem import GemmProblem
from .grid_budget import BudgetFit, EstimatedGemm, bench_seconds, fit_budget, serving_buckets, wall_seconds

AUTO, EXACT, SERVING = "auto", "exact", "serving"
AUTO_MINUTES = 10.0  # auto's grid budget where none is given: the target for one 7B model's grid, one GPU
CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))  # vLLM's decode capture sizes up to 512
LADDER_START = 512  # above the capture sizes: 768, 1024, 1536, 2048, 3072, 4096, ...
TRITON_NARROWED = "a Triton winner compiled for its own sizes (or one token): it serves its M alone"

GridSpec = str | tuple[int, ...]


class GridError(BadInput):
    """An ``--m-grid`` or ``--m-max`` value the pipeline cannot use."""


def parse_grid(text: str, option: str | None = "--m-grid") -> GridSpec:
    """``auto``, ``exact``, ``serving`` or a tuple of token counts from ``--m-grid``; anything else is refused naming
    the value (a non-positive or non-integer count, one out of ascending order, a repeat), after ``option``
    and the whole text unless ``option`` is None (Luigi's refusal names them itself)."""
    text = text.strip()
    said = f"{option} {text!r}: " if option else ""
    if text in (AUTO, EXACT, SERVING):
        return text
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value < 1 or str(value) != part.lstrip("+"):
            raise GridError(f"{said}{part!r} is not a positive integer (or say auto, exact or serving)")
        if values and value == values[-1]:
            raise GridError(f"{said}{value} is repeated")
        if values and value < values[-1]:
            raise GridError(f"{said}{value} comes after {values[-1]}: list the sizes in ascending order")
        values.append(value)
    return tuple(values)


def family_of(problem: GemmProblem) -> GemmProblem | None:
    """The family a grid expands ``problem`` over (``GemmProblem.token_family``); None for a wildcard problem and
    for an outer product (``k = 1``, the rotary embedding's position x frequency, whose token count is not
    ``n``), which stay as they are."""
    return problem.token_family() if problem.k != 1 else None


def by_weight(
    problems: Iterable[GemmProblem],
) -> tuple[dict[GemmProblem, dict[int, GemmProblem]], list[GemmProblem]]:
    """``problems`` by ``family_of``: each family's members by token count, and the problems of none."""
    families: dict[GemmProblem, dict[int, GemmProblem]] = {}
    others: list[GemmProblem] = []
    for problem in problems:
        family = family_of(problem)
        if family is None:
            others.append(problem)
        else:
            families.setdefault(family, {})[problem.n] = problem  # type: ignore[index]
    return families, others


def resolve(
    spec: GridSpec, problems: Iterable[GemmProblem], embedded: bool = False, budget_s: float | None = None
) -> tuple[GridSpec, float | None, str]:
    """The grid ``auto`` stands for over ``problems`` (any other ``spec`` as it is), the budget it runs under
    and the note that says why: ``exact`` for the embedded default workload (``embedded``), whose figures are
    the README's and whose first run must not grow; ``serving`` where some weight ran at more than one token
    count (a server meets the counts between them, and others), within ``budget_s`` or, unless given,
    ``AUTO_MINUTES`` of Bench on one GPU; else ``exact``, nothing to serve between."""
    if spec != AUTO:
        return spec, budget_s, ""
    if embedded:
        return EXACT, budget_s, "m-grid auto: exact, the embedded default workload (--m-grid serving tunes its grid)"
    counts, _ = by_weight(problems)
    several = sum(len(seen) > 1 for seen in counts.values())
    if not several:
        return EXACT, budget_s, "m-grid auto: exact, no weight ran at more than one token count"
    budget_s = budget_s or 60 * AUTO_MINUTES
    return (
        SERVING,
        budget_s,
        (
            f"m-grid auto: serving, {several} of {len(counts)} weights ran at more than one token count, within "
            f"{budget_s / 60:g} min of Bench on one GPU (--grid-budget; --m-grid serving: no bound; --m-grid exact: "
            f"only the counts the workload ran)"
        ),
    )


def parse_m_max(value: int | str | None) -> int | None:
    """``--m-max`` as a positive integer, None (0 or empty: the largest M the workload ran)."""
    if value in (None, "", 0, "0"):
        return None
    try:
        number = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise GridError(f"--m-max {value!r}: not a positive integer")
    return number


def ladder(top: int) -> list[int]:
    """The prefill ladder above the capture sizes, through the first point >= ``top``: 768, 1024, 1536, ..."""
    points, power = [], LADDER_START
    while True:
        for point in (power + power // 2, 2 * power):
            points.append(point)
            if point >= top:
                return points
        power *= 2


def serving_points(top: int) -> list[int]:
    """The serving grid through ``top`` rounded up to the grid: the capture sizes, then the ladder."""
    points = [m for m in CAPTURE_SIZES if m < top]
    above = [m for m in CAPTURE_SIZES if m >= top]
    return points + ([above[0]] if above else ladder(top))


def grid_points(spec: GridSpec, seen: Iterable[int], m_max: int | None = None) -> list[int]:
    """The sorted token counts one family is tuned at: ``spec`` over the counts ``seen`` (see the module's
    docstring). ``m_max`` below a count the workload ran is refused naming both."""
    seen = sorted(set(seen))
    if m_max is not None and seen and m_max < seen[-1]:
        raise GridError(f"--m-max {m_max} is below M = {seen[-1]}, which the workload ran: raise it or leave it out")
    if spec == EXACT:
        return seen
    if spec == SERVING:
        top = m_max or (seen[-1] if seen else 1)
        return sorted({*seen, *serving_points(top)})
    listed = [m for m in spec if m_max is None or m <= m_max]  # type: ignore[union-attr]
    if seen and (not listed or listed[-1] < seen[-1]):
        listed.append(seen[-1])  # every count the workload ran lies in a bucket
    return listed


def buckets(points: Sequence[int], spec: GridSpec = SERVING) -> dict[int, tuple[int, int]]:
    """Each grid point's bucket ``(lo, hi)``: the counts it serves, from the previous point + 1 to itself
    (``exact``: itself alone)."""
    if spec == EXACT:
        return {m: (m, m) for m in sorted(points)}
    return serving_buckets(points)


@dataclass(frozen=True)
class GridPoint:
    """One problem to tune: a family at one grid M, the bucket of token counts it serves (None: a problem
    outside any family, served as recorded), whether the workload ran that exact M."""

    problem: GemmProblem
    bucket: tuple[int, int] | None
    seen: bool
    seeded: bool = False  # the workload ran it, but --grid-budget starts its search from a neighbour's winner


def expand(
    problems: Sequence[GemmProblem],
    spec: GridSpec,
    m_max: int | None = None,
    budget_s: float | None = None,
    shares: Mapping[GemmProblem, float] | None = None,
    basis: str = "GEMM time",
) -> tuple[list[GridPoint], str]:
    """Every family of ``problems`` over its grid: the collected problems (seen) and the grid's others, within
    ``budget_s`` seconds of Bench on one GPU where given (``grid_budget.fit_budget``; ``shares``, each problem's
    share of the workload's GEMM time or of its ``basis``, orders what it drops), and the note of what the
    budget dropped. Wildcard problems and outer products (``k = 1``, the rotary embedding's position x
    frequency, whose token count is not ``n``) stay as they are, a bucket of their own."""
    families, others = by_weight(problems)
    grids = {fam: (grid_points(spec, members, m_max), members) for fam, members in families.items()}
    fit = fit_budget(grids, budget_s, others, shares, basis) if budget_s else BudgetFit()
    points = [GridPoint(problem, None, True) for problem in others if problem not in fit.dropped]
    for fam, members in families.items():
        grid = [m for m in grids[fam][0] if fit.keeps(m, members)]
        any_member = next(iter(members.values()))
        for m, bucket in buckets(grid, spec).items():
            problem = members.get(m) or any_member.with_tokens(m)
            if problem is not None:
                points.append(GridPoint(problem, bucket, m in members, fit.seeds(m, members)))
    return points, fit.note


def cost_line(spec: GridSpec, gemms: Sequence[EstimatedGemm], seen: int, gpus: int = 1) -> str:
    """What the grid costs before Bench runs: ``gemms`` to tune, each its bucket and whether it is seeded (started
    from a neighbour's winner), ``seen`` of them the workload ran, and the estimated minutes of Bench on ``gpus``
    GPUs (``grid_budget.bench_seconds``; at ``grid_budget.GPU_EFFICIENCY`` each where there are several)."""
    name = spec if isinstance(spec, str) else ",".join(map(str, spec))
    gpus = max(1, gpus)
    minutes = wall_seconds(bench_seconds(gemms), gpus) / 60
    seeded = sum(s for _, s in gemms)
    started = f", {seeded} of them seeded" if seeded else ""
    return (
        f"m-grid {name}: {len(gemms)} GEMMs to tune ({seen} the workload ran{started}, {len(gemms) - seen} grid "
        f"points), about {minutes:.0f} min of Bench on {gpus} GPU{'s' if gpus > 1 else ''}"
    )


def spread(
    entries: Sequence[TunableOpEntry], bucket_of: Mapping[str, tuple[int, int]]
) -> tuple[list[TunableOpEntry], list[dict]]:
    """The rows as the libraries read them: TunableOp and hipBLASLt's override file match exact sizes only, so
    each kept grid row (``bucket_of`` its key's bucket) is repeated at every token count of its bucket, the
    grid point's own row first. A winner that cannot compute the bucket's other counts (a Triton kernel compiled
    for its own sizes, ``triton_gemm.serves_range``) serves its M alone (its bucket narrowed). Returns the rows
    and one range record per grid row (what the manifest lists)."""
    rows: list[TunableOpEntry] = []
    ranges = []
    for entry in entries:
        key = f"{entry.op_signature},{entry.params_signature}"
        bucket = bucket_of.get(key)
        rows.append(entry)
        if bucket is None:
            continue
        lo, hi = bucket
        note, below = None, None
        if lo < hi and not serves_range(entry.solution or "", lo, hi):
            lo, note, below = hi, f"{TRITON_NARROWED} (bucket {bucket[0]}-{bucket[1]})", bucket[0]
        for m in range(lo, hi):
            problem = entry.problem.with_tokens(m)
            if problem is not None:
                rows.append(TunableOpEntry.from_problem(problem, entry.solution, entry.time_ms))
        ranges.append(m_range(key, entry.solution or "", lo, hi, note or "", below).to_json())
    return rows, ranges


def default_ranges(
    buckets: Mapping[str, tuple[int, int]], served: Sequence[Mapping], why: Mapping[str, str]
) -> list[dict]:
    """The token counts whose tuned choice is torch's default: the whole bucket of a grid row the gate measured
    and dropped (``why``: grid key -> the gate's reason, e.g. nothing beat the default by the margin at the grid
    point), and the counts below a kept row's range where Bench's bucket scoring or Validate's held-out counts
    found its winner losing to the default (``served``: the ranges ``spread`` wrote, narrowed). A grid row the
    gate never saw (Bench failed on it) and the narrowing of a winner that cannot serve other counts are not
    among them: nothing was measured there. The runtime counts a call in one of these as a tuned choice
    (docs/serving.md, coverage); the libraries need no row for them (a miss runs the default)."""
    kept = {record["key"]: record for record in served}
    found = []
    for key, (lo, hi) in sorted(buckets.items()):
        record = kept.get(key)
        if record is None:
            if key in why:
                found.append({"key": key, "lo": lo, "hi": hi, "why": why[key]})
        elif int(record["lo"]) > lo and serves_range(str(record["solution"]), lo, hi):
            reason = str(record.get("note") or "its winner lost to the default below its range")
            found.append({"key": key, "lo": lo, "hi": int(record["lo"]) - 1, "why": reason})
    return found


def unspread(entries: Sequence[TunableOpEntry], ranges: Sequence[Mapping]) -> list[TunableOpEntry]:
    """``entries`` without the copies ``spread`` made: a row inside a range (``ranges``: the manifest's
    ``m_ranges``) of its weight, below the range's grid point, with the range's solution. What the runtime reads
    where it finds a call's range itself (``runtime.table.TunedTable.find``)."""
    families = by_family(read_ranges(ranges))

    def copied(entry: TunableOpEntry) -> bool:
        n, found = entry.problem.n, families.get(entry.problem.token_family(), ())  # type: ignore[arg-type]
        return any(n in r.copies() and entry.solution == r.solution for r in found)

    return [entry for entry in entries if not copied(entry)]

"""The M grid: the token counts each weight is tuned at, and the bucket of token counts each grid point serves
(docs/serving.md).

M is the token count, the activation's rows: in the BLAS frame of a row-major ``F.linear`` it is ``n``
(``problem.py``). A *family* is every field of a problem but ``n`` (``GemmProblem.token_family``): a weight,
its op, dtypes and layout, over every token count.

``--m-grid`` is one of:

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

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...errors import BadInput
from ...formats.m_ranges import by_family, m_range, read_ranges
from ...formats.tunableop import TunableOpEntry
from ...kernels.triton_gemm import serves_range
from ...problem import GemmProblem

EXACT, SERVING = "exact", "serving"
CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))  # vLLM's decode capture sizes up to 512
LADDER_START = 512  # above the capture sizes: 768, 1024, 1536, 2048, 3072, 4096, ...
TRITON_NARROWED = "a Triton winner compiled for its own sizes (or one token): it serves its M alone"
SECONDS_PER_PROBLEM = 4.0  # Bench's wall time per GEMM on one GPU, cuBLASLt with Triton (docs/serving.md)
SECONDS_PER_SEEDED = 3.4  # one started from a neighbour's winner: two verdicts where it holds, one and a search where
# not; 3.4 s a problem over the 313 seeded of a vLLM-sized grid on one H200 (docs/serving.md)
GPU_EFFICIENCY = 0.8  # what each of several GPUs counts of one: workers' start-up and Triton's compiles share the host

GridSpec = str | tuple[int, ...]


class GridError(BadInput):
    """An ``--m-grid`` or ``--m-max`` value the pipeline cannot use."""


def parse_grid(text: str, option: str | None = "--m-grid") -> GridSpec:
    """``exact``, ``serving`` or a tuple of token counts from ``--m-grid``; anything else is refused naming
    the value (a non-positive or non-integer count, one out of ascending order, a repeat), after ``option``
    and the whole text unless ``option`` is None (Luigi's refusal names them itself)."""
    text = text.strip()
    said = f"{option} {text!r}: " if option else ""
    if text in (EXACT, SERVING):
        return text
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value < 1 or str(value) != part.lstrip("+"):
            raise GridError(f"{said}{part!r} is not a positive integer (or say exact or serving)")
        if values and value == values[-1]:
            raise GridError(f"{said}{value} is repeated")
        if values and value < values[-1]:
            raise GridError(f"{said}{value} comes after {values[-1]}: list the sizes in ascending order")
        values.append(value)
    return tuple(values)


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
    ordered = sorted(points)
    if spec == EXACT:
        return {m: (m, m) for m in ordered}
    return {m: (prev + 1, m) for prev, m in zip([0, *ordered], ordered, strict=False)}


@dataclass(frozen=True)
class GridPoint:
    """One problem to tune: a family at one grid M, the bucket of token counts it serves (None: a problem
    outside any family, served as recorded), whether the workload ran that exact M."""

    problem: GemmProblem
    bucket: tuple[int, int] | None
    seen: bool
    seeded: bool = False  # the workload ran it, but --grid-budget starts its search from a neighbour's winner


def coarseness(m: int) -> int:
    """How coarse a grid point is, 0 the coarsest: a power of two, then a ladder point or a multiple of 64,
    then of 16, then the rest (the capture sizes in steps of 8). A budget keeps the coarsest."""
    if m & (m - 1) == 0:
        return 0
    if m > LADDER_START or m % 64 == 0:
        return 1
    return 2 if m % 16 == 0 else 3


@dataclass(frozen=True)
class BudgetFit:
    """What ``fit_budget`` keeps: the finest ``coarseness`` of the grid points the workload did not run that
    are tuned (-1: none), the finest of the counts it ran that are searched in full (the others, seeded, start
    from their weight's nearest searched count's winner; 3: all searched), and the note of what it gave up."""

    finest: int = 3
    searched: int = 3
    note: str = ""

    def keeps(self, m: int, ran: Collection[int]) -> bool:
        return m in ran or coarseness(m) <= self.finest

    def seeds(self, m: int, ran: Collection[int]) -> bool:
        """Whether ``m``, a count the workload ran, starts from a neighbour's winner: finer than ``searched``
        and not its weight's largest count (every weight keeps one count searched in full)."""
        return m in ran and coarseness(m) > self.searched and m != max(ran)


def bench_seconds(gemms: int, seeded: int = 0) -> float:
    """Bench's estimated seconds on one GPU for ``gemms``, ``seeded`` of them started from a neighbour's winner."""
    return (gemms - seeded) * SECONDS_PER_PROBLEM + seeded * SECONDS_PER_SEEDED


def wall_seconds(seconds: float, gpus: int) -> float:
    """``seconds`` of Bench on one GPU spread over ``gpus`` (at ``GPU_EFFICIENCY`` each where there are several)."""
    return seconds if gpus <= 1 else seconds / (gpus * GPU_EFFICIENCY)


def _bench_seconds(
    grids: Mapping[GemmProblem, tuple[list[int], Collection[int]]], others: int, fit: BudgetFit
) -> tuple[float, int, int]:
    """Bench's estimated seconds on one GPU for ``fit``, with the GEMMs it tunes and how many of them are seeded."""
    kept = seeded = 0
    for points, ran in grids.values():
        kept += sum(fit.keeps(m, ran) for m in points)
        seeded += sum(fit.seeds(m, ran) for m in points)
    return bench_seconds(others + kept, seeded), others + kept, seeded


def fit_budget(
    grids: Mapping[GemmProblem, tuple[list[int], Collection[int]]], budget_s: float, others: int = 0
) -> BudgetFit:
    """What keeps the grids (family -> (points, the counts it ran)) and ``others`` GEMMs outside any family
    within ``budget_s`` of Bench on one GPU (``SECONDS_PER_PROBLEM`` a GEMM searched, ``SECONDS_PER_SEEDED`` one
    seeded). First the grid points the workload did not run go, finest first; where the counts it ran alone
    overrun the budget, those go no further: they are seeded instead, finest first, down to the powers of two
    and each weight's largest count, which stay searched in full. Where even that overruns, the note says so."""
    total = others + sum(len(points) for points, _ in grids.values())
    for finest in (3, 2, 1, 0, -1):
        seconds, kept, _ = _bench_seconds(grids, others, BudgetFit(finest))
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
    alone = seconds / 60
    for searched in (2, 1, 0):
        fit = BudgetFit(-1, searched)
        seconds, kept, seeded = _bench_seconds(grids, others, fit)
        if seconds <= budget_s:
            break
    if not seeded:
        return BudgetFit(-1, 3, (
            f"--grid-budget {minutes}: the {kept} GEMMs the workload ran cost about {alone:.0f} min of Bench on one "
            f"GPU by themselves{gpus_to_fit(seconds, budget_s)}; no other grid point is tuned"
        ))  # fmt: skip
    which = {2: "the steps of 8 between multiples of 16", 1: "all but the multiples of 64 and the ladder"}.get(
        searched, "all but the powers of two"
    )
    over = "" if seconds <= budget_s else f": still over the budget{gpus_to_fit(seconds, budget_s)}"
    return BudgetFit(-1, searched, (
        f"--grid-budget {minutes}: the {kept} GEMMs the workload ran cost about {alone:.0f} min of Bench on one GPU "
        f"searched in full; {seeded} of them ({which}, each weight's largest count aside) start from the winner of "
        f"their weight's nearest searched count instead, searched only where it no longer beats torch's default: "
        f"about {seconds / 60:.0f} min{over}; no other grid point is tuned"
    ))  # fmt: skip


def gpus_to_fit(seconds: float, budget_s: float, most: int = 8) -> str:
    """Where ``seconds`` of Bench on one GPU overrun ``budget_s``, the fewest GPUs (at ``GPU_EFFICIENCY`` each, up
    to ``most``) that would bring its wall time within it, as the note's clause; empty where none would."""
    fits = next((g for g in range(2, most + 1) if wall_seconds(seconds, g) <= budget_s), None)
    if fits is None:
        return ""
    return f" (about {wall_seconds(seconds, fits) / 60:.0f} min of wall time on {fits} GPUs: --gpus {fits})"


def expand(
    problems: Sequence[GemmProblem], spec: GridSpec, m_max: int | None = None, budget_s: float | None = None
) -> tuple[list[GridPoint], str]:
    """Every family of ``problems`` over its grid: the collected problems (seen) and the grid's others, within
    ``budget_s`` seconds of Bench on one GPU where given (``fit_budget``), and the note of what the budget
    dropped. Wildcard problems and outer products (``k = 1``, the rotary embedding's position x frequency, whose
    token count is not ``n``) stay as they are, a bucket of their own."""
    families: dict[GemmProblem, dict[int, GemmProblem]] = {}
    points: list[GridPoint] = []
    for problem in problems:
        fam = problem.token_family() if problem.k != 1 else None
        if fam is None:
            points.append(GridPoint(problem, None, True))
        else:
            families.setdefault(fam, {})[problem.n] = problem  # type: ignore[index]
    grids = {fam: (grid_points(spec, members, m_max), members.keys()) for fam, members in families.items()}
    fit = fit_budget(grids, budget_s, len(points)) if budget_s else BudgetFit()
    for fam, members in families.items():
        grid = [m for m in grids[fam][0] if fit.keeps(m, members)]
        any_member = next(iter(members.values()))
        for m, bucket in buckets(grid, spec).items():
            problem = members.get(m) or any_member.with_tokens(m)
            if problem is not None:
                points.append(GridPoint(problem, bucket, m in members, fit.seeds(m, members)))
    return points, fit.note


def cost_line(spec: GridSpec, gemms: int, seen: int, gpus: int = 1, seeded: int = 0) -> str:
    """What the grid costs before Bench runs: ``gemms`` to tune (``seen`` of them the workload ran, ``seeded`` of
    those started from a neighbour's winner) and the estimated minutes of Bench on ``gpus`` GPUs (at
    ``GPU_EFFICIENCY`` each where there are several)."""
    name = spec if isinstance(spec, str) else ",".join(map(str, spec))
    gpus = max(1, gpus)
    minutes = wall_seconds(bench_seconds(gemms, seeded), gpus) / 60
    started = f", {seeded} of them seeded" if seeded else ""
    return (
        f"m-grid {name}: {gemms} GEMMs to tune ({seen} the workload ran{started}, {gemms - seen} grid points), "
        f"about {minutes:.0f} min of Bench on {gpus} GPU{'s' if gpus > 1 else ''}"
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

"""Gather GEMM shapes from TunableOp files: expand paths, dedupe by problem, count, summarise."""

from __future__ import annotations

import glob
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...atomic import atomic_write_json
from ...errors import BadInput, clip
from ...formats import json_file
from ...formats.tunableop import (
    OP_SIGNATURE_NAMES,
    SkippedLine,
    TunableOpFile,
    dtype_signature,
    format_key,
    parse_key,
    read_file,
)
from ...problem import GemmProblem
from . import mgrid
from .call_weights import time_shares


class ShapeInputError(BadInput):
    """An input path that names no TunableOp file."""


@dataclass
class ShapeRecord:
    """One distinct GEMM with how often and where it was seen, and its best recorded time."""

    problem: GemmProblem
    op_signature: str
    params_signature: str
    count: int = 0
    sources: list[str] = field(default_factory=list)
    time_ms: float | None = None
    solution: str | None = None
    calls: int | None = None  # GEMM calls the workload made (collection's lookup log); None: unknown
    time_share: float | None = None  # share of the workload's baseline GEMM time; None: unknown
    per_call_us: float | None = None  # baseline time of one call, as collection measured it
    bucket: tuple[int, int] | None = None  # the token counts its winner serves (``mgrid``); None: its own alone
    seeded: bool = False  # ran, but --grid-budget starts it from a neighbour's winner (``grid_budget.BudgetFit``)
    ran_inside: tuple[int, ...] = ()  # counts the workload ran in its bucket but not tuned, heaviest first

    @property
    def seen(self) -> bool:
        """Whether the workload ran it (a grid point it did not run has no recorded line)."""
        return self.count > 0

    @property
    def key(self) -> str:
        return f"{self.op_signature},{self.params_signature}"

    @property
    def call_count(self) -> int:
        """How often the workload ran it: the counted calls, else the recorded lines."""
        return self.calls if self.calls is not None else self.count

    def to_json(self) -> dict:
        p = self.problem
        return {
            "op": OP_SIGNATURE_NAMES[p.op],
            "dtype": dtype_signature(p),
            "transa": p.transa,
            "transb": p.transb,
            "m": p.m,
            "n": p.n,
            "k": p.k,
            "lda": p.lda,
            "ldb": p.ldb,
            "ldc": p.ldc,
            "batch": p.batch,
            "count": self.count,
            "calls": self.call_count,
            "time_share": self.time_share,
            "per_call_us": self.per_call_us,
            "op_signature": self.op_signature,
            "params_signature": self.params_signature,
            "time_ms": self.time_ms,
            "solution": self.solution,
            "sources": self.sources,
            "bucket": list(self.bucket) if self.bucket else None,
            "seeded": self.seeded,
            "ran_inside": list(self.ran_inside),
        }

    @classmethod
    def from_json(cls, row: dict) -> ShapeRecord:
        problem = parse_key(row["op_signature"], row["params_signature"])
        return cls(
            problem,
            row["op_signature"],
            row["params_signature"],
            row["count"],
            list(row.get("sources", [])),
            row.get("time_ms"),
            row.get("solution"),
            row.get("calls"),
            row.get("time_share"),
            row.get("per_call_us"),
            _bucket(row.get("bucket"), problem),
            _flag(row.get("seeded", False), "seeded"),
            _ran_inside(row.get("ran_inside", []), row.get("bucket")),
        )


def _flag(value: object, name: str) -> bool:
    if type(value) is not bool:
        raise ValueError(f"{name} {value!r} is not true or false")
    return value


def _ran_inside(value: object, bucket: object) -> tuple[int, ...]:
    """A row's ``ran_inside``: token counts inside its bucket, below its own (checked after ``_bucket``)."""
    if not (isinstance(value, list) and all(type(v) is int for v in value)):
        raise ValueError(f"ran_inside {value!r} is not a list of integers")
    lo, hi = bucket if isinstance(bucket, list) and value else (0, 0)
    outside = [m for m in value if not lo <= m < hi]
    if outside:
        raise ValueError(f"ran_inside {outside[0]} is not inside the bucket {bucket!r} below its grid point")
    return tuple(value)


def _bucket(value: object, problem: GemmProblem) -> tuple[int, int] | None:
    """A row's bucket: None, or ``[lo, hi]`` with ``1 <= lo <= hi == n`` (the grid point serves up to itself)."""
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)):
        raise ValueError(f"bucket {value!r} is not a pair of integers")
    lo, hi = value
    if not 1 <= lo <= hi == problem.n:
        raise ValueError(f"bucket {value!r} does not end at the row's n = {problem.n}")
    return lo, hi


@dataclass
class GatherResult:
    shapes: list[ShapeRecord]
    files: list[str]
    lines: int
    skipped: list[SkippedLine]
    weight_notes: list[str] = field(default_factory=list)


def apply_weights(result: GatherResult, calls: dict | None, baseline: dict | None) -> None:
    """Give every shape its ``calls`` and ``time_share`` from collection's ``calls.json`` and ``baseline.json``
    (``call_weights``). Without counts (``--untuned`` files, or a workload whose stderr held no lookup line)
    each recorded line counts as one call and there is no time share; the notes say so."""
    counted: dict[GemmProblem, int] = {}
    notes = result.weight_notes
    for key, n in ((calls or {}).get("calls") or {}).items():
        try:
            problem = parse_key(*key.split(",", 1))
        except ValueError as err:
            notes.append(f"lookup log key {key!r} ignored: {err}")
            continue
        counted[problem] = counted.get(problem, 0) + n
    if calls is None:
        notes.append(
            "call counts unknown (GEMMs read from files, not from a collection run): each recorded line "
            "counts as one call"
        )
    elif calls.get("note"):
        notes.append(calls["note"])
    per_call = {}
    for key, us in ((baseline or {}).get("per_call_us") or {}).items():
        per_call[parse_key(*key.split(",", 1))] = us
    notes += [f"{key}: {why}" for key, why in ((baseline or {}).get("notes") or {}).items()]
    missing = [r for r in result.shapes if counted and r.problem not in counted]
    if missing:
        notes.append(f"{len(missing)} recorded GEMMs have no lookup-log count (count 1 each), e.g. {missing[0].key}")
    keys = [r.key for r in result.shapes]
    calls_by_key, shares = time_shares(
        keys,
        {r.key: counted.get(r.problem, r.count if not counted else 0) for r in result.shapes},
        {r.key: per_call.get(r.problem) for r in result.shapes},
    )
    if counted and not baseline:
        notes.append("no baseline timing of the recorded GEMMs: weights are calls x the time Validate measures")
    for record in result.shapes:
        record.calls, record.time_share = calls_by_key[record.key], shares[record.key]
        record.per_call_us = per_call.get(record.problem)


def budget_shares(records: Sequence[ShapeRecord]) -> tuple[dict[GemmProblem, float], str]:
    """Each GEMM's share of the workload's GEMM time, or of its calls where any time is unknown (what orders
    the counts a grid budget drops), and which of the two."""
    timed = all(record.time_share is not None for record in records)
    weight = {r.problem: float(r.time_share if timed else r.call_count) for r in records}  # type: ignore[arg-type]
    total = sum(weight.values()) or 1.0
    return {problem: value / total for problem, value in weight.items()}, "GEMM time" if timed else "calls"


def apply_grid(
    result: GatherResult,
    spec: mgrid.GridSpec,
    m_max: int | None = None,
    budget_s: float | None = None,
    embedded: bool = False,
) -> None:
    """Expand every family of the gathered GEMMs over its M grid (``mgrid``): the collected ones get their
    bucket, the grid points the workload did not run join with no count and no time share (they weigh nothing
    in the workload's figures; they serve token counts it did not show). ``exact`` leaves the GEMMs as they
    are (an ``m_max`` below a count they ran is still refused). ``budget_s`` bounds Bench's estimated time on
    one GPU (``grid_budget.fit_budget``), which drops counts the workload ran only where nothing else fits it,
    the lightest by time share (by calls where the times are unknown) first. The notes say what the grid costs
    and what the budget dropped. ``auto`` is resolved first (``mgrid.resolve``; ``embedded``: the embedded
    default workload's GEMMs), and the notes say what it chose."""
    records = {record.problem: record for record in result.shapes}
    spec, budget_s, chosen = mgrid.resolve(spec, records, embedded, budget_s)
    result.weight_notes += [chosen] if chosen else []
    fitted = None if spec == mgrid.EXACT else budget_s  # exact still expands, for --m-max's check; no budget applies
    points, dropped = mgrid.expand(list(records), spec, m_max, fitted, *budget_shares(result.shapes))
    if spec == mgrid.EXACT:
        if budget_s:
            result.weight_notes.append(
                "--grid-budget is not applied: --m-grid exact tunes every GEMM the workload ran, each at its own "
                "token count (a serving or listed grid is what a budget bounds)"
            )
        return
    shares_known = any(record.time_share is not None for record in result.shapes)
    shapes = []
    for point in points:
        record = records.get(point.problem)
        if record is None:
            record = ShapeRecord(point.problem, *format_key(point.problem), count=0, calls=0)
            record.time_share = 0.0 if shares_known else None
        record.bucket, record.seeded = point.bucket, point.seeded
        shapes.append(record)
    tuned = {record.problem for record in shapes}
    _note_ran_inside(shapes, [r for r in result.shapes if r.problem not in tuned])
    result.shapes = sorted(shapes, key=lambda r: r.problem.sort_key())
    result.weight_notes += [note for note in (dropped,) if note]
    seen = sum(point.seen for point in points)
    result.weight_notes.append(mgrid.cost_line(spec, [(point.bucket, point.seeded) for point in points], seen))


def ran_inside_of(records: Sequence[ShapeRecord]) -> dict[str, tuple[int, ...]]:
    """Grid key -> the counts the workload ran in its bucket untuned, heaviest first (what Validate holds out
    first and reports on)."""
    return {record.key: record.ran_inside for record in records if record.ran_inside}


def _note_ran_inside(grid: Sequence[ShapeRecord], dropped: Sequence[ShapeRecord]) -> None:
    """Give each grid record the counts the workload ran inside its bucket that are not tuned (between the points
    of a listed grid, or dropped by ``--grid-budget``), heaviest first (``ran_inside``): Validate holds them out
    before any count it draws."""
    by_family: dict[GemmProblem | None, list[ShapeRecord]] = {}
    for record in grid:
        if record.bucket is not None:
            by_family.setdefault(mgrid.family_of(record.problem), []).append(record)
    heaviest_first = sorted(dropped, key=lambda r: (-(r.time_share or 0.0), -r.call_count, r.problem.n))
    for record in heaviest_first:
        family = by_family.get(mgrid.family_of(record.problem), [])
        n = record.problem.n
        home = next((g for g in family if g.bucket[0] <= n < g.bucket[1]), None)  # type: ignore[index]
        if home is not None:
            home.ran_inside = (*home.ran_inside, n)


def expand_inputs(specs: Iterable[str]) -> list[Path]:
    """Files as given, directories as their ``*.csv`` files (recursively), globs expanded; sorted, unique."""
    found: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            matches = sorted(p for p in path.rglob("*.csv") if p.is_file())
            if not matches:
                raise ShapeInputError(f"{spec}: directory holds no .csv file")
        elif path.is_file():
            matches = [path]
        elif glob.has_magic(spec):
            matches = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
            if not matches:
                raise ShapeInputError(f"{spec}: pattern matches no file")
        else:
            raise ShapeInputError(f"{spec}: no such file or directory")
        found.extend(matches)
    return list(dict.fromkeys(found))


def gather(specs: Sequence[str], *, lenient: bool = False) -> GatherResult:
    """Read every file named by ``specs`` and merge their GEMMs by problem."""
    files = expand_inputs(specs)
    return merge_files([read_file(path, lenient=lenient) for path in files])


def require_gemms(result: GatherResult, specs: Sequence[str]) -> None:
    """Refuse a gathering that found no GEMM to tune (an empty or header-only file, every line skipped)."""
    if not result.shapes:
        skipped = f", {len(result.skipped)} malformed lines skipped" if result.skipped else ""
        raise ShapeInputError(
            f"no GEMMs in {', '.join(result.files) or ', '.join(specs)} ({result.lines} rows{skipped}): nothing to tune"
        )


def merge_files(parsed: Sequence[TunableOpFile]) -> GatherResult:
    """Dedupe entries of parsed files by ``GemmProblem``, first-seen key spelling kept."""
    records: dict[GemmProblem, ShapeRecord] = {}
    lines = 0
    for tfile in parsed:
        lines += len(tfile.entries)
        for entry, count in tfile.distinct_counts():
            record = records.get(entry.problem)
            if record is None:
                record = records[entry.problem] = ShapeRecord(entry.problem, entry.op_signature, entry.params_signature)
            record.count += count
            if tfile.path not in record.sources:
                record.sources.append(tfile.path)
            time_ms = entry.time_ms
            if time_ms is not None and (record.time_ms is None or time_ms < record.time_ms):
                record.time_ms, record.solution = time_ms, entry.solution
    shapes = sorted(records.values(), key=lambda r: r.problem.sort_key())
    skipped = [s for tfile in parsed for s in tfile.skipped]
    return GatherResult(shapes, [f.path for f in parsed], lines, skipped)


def write_shapes_json(path: str | Path, result: GatherResult) -> None:
    atomic_write_json(path, [record.to_json() for record in result.shapes])


def read_shapes_json(path: str | Path) -> list[ShapeRecord]:
    """Load ``shapes.json``; a row that does not parse names the file and the row index."""
    rows = json_file.load(path, "shapes JSON (gemm-tune shapes --json)")
    if not isinstance(rows, list):
        raise ShapeInputError(f"{path}: expected a JSON list of shape objects")
    records = []
    for index, row in enumerate(rows):
        try:
            records.append(ShapeRecord.from_json(row))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            what = f"no {err} field" if isinstance(err, KeyError) else clip(str(err))
            raise ShapeInputError(f"{path}: row {index}: {what}") from None
    return records


NOTE = "note: "  # how the summary table starts a note


def summary_table(result: GatherResult) -> str:
    """A fixed-width table of the gathered shapes, followed by totals and skipped lines."""
    header = ("op", "dtype", "layout", "m", "n", "k", "batch", "serves", "count", "calls", "time%", "time_ms")
    rows = [
        (
            OP_SIGNATURE_NAMES[r.problem.op].removesuffix("TunableOp"),
            dtype_signature(r.problem),
            r.problem.layout,
            str(r.problem.m),
            str(r.problem.n),
            str(r.problem.k),
            str(r.problem.batch),
            "" if r.bucket is None else f"{r.bucket[0]}-{r.bucket[1]}",
            str(r.count),
            "" if r.calls is None else str(r.calls),
            "" if r.time_share is None else f"{100 * r.time_share:.1f}",
            "" if r.time_ms is None else f"{r.time_ms:.4g}",
        )
        for r in result.shapes
    ]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(header)]
    numeric = set(range(3, len(header)))

    def fmt(row: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    lines = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows]
    lines.append(f"{len(result.shapes)} distinct GEMMs from {result.lines} lines in {len(result.files)} files")
    lines += [f"{NOTE}{note}" for note in result.weight_notes]
    if result.skipped:
        lines.append(f"{len(result.skipped)} malformed lines skipped (--lenient):")
        lines += [f"  {s}" for s in result.skipped]
    return "\n".join(lines) + "\n"


def grid_notes(summary: str) -> list[str]:
    """What ``summary_table`` said of the M grid (the choice ``auto`` made, the budget, the cost), for the report."""
    said = (line.removeprefix(NOTE) for line in summary.splitlines() if line.startswith(NOTE))
    return [note for note in said if note.startswith(("m-grid ", "--grid-budget "))]

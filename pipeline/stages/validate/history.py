"""One history per workdir: every Validate appends its run's rows (docs/nightly.md, "History"), and the nights
read back as a trend across library upgrades.

``<workdir>/history/`` holds ``gemms.<ext>`` (one row per run and GEMM), ``runs.<ext>`` (one row per run: the
weighted and end-to-end figures) and ``meta.json`` (the schema version and the format). The format is Parquet
where pyarrow is installed when the history starts, CSV otherwise; the columns are the same. A run redone under
its name replaces its own rows. An append holds ``history/.lock``, writes each table whole to a temporary file
and renames it, runs last: a row of ``gemms`` whose ``(run, written)`` no row of ``runs`` has is an append that
was killed, and is not read. A file that does not parse, or a history from a newer schema, is refused naming it
and left as it is.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import fcntl
import io
import json
import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...atomic import atomic_open, atomic_write_json
from ...errors import BadInput
from ...stats import geomean
from ..run.fingerprint import STAMP
from ..run.layout import RunLayout

DIRECTORY = "history"
SCHEMA = 1
GEMM_TYPES = {
    **dict.fromkeys(("run", "written", "date", "fingerprint", "libraries", "workload", "key", "label"), str),
    **dict.fromkeys(("share", "baseline_us", "tuned_us", "speedup", "noise"), float),
    **{"kept": bool, "why": str, "source": str},
}
RUN_TYPES = {
    **dict.fromkeys(("run", "written", "date", "fingerprint", "libraries", "workload"), str),
    **{"passed": bool, "gemms": int, "kept": int},
    **dict.fromkeys(("weighted_speedup", "e2e_speedup", "e2e_noise"), float),
}
GEMM_COLUMNS, RUN_COLUMNS = tuple(GEMM_TYPES), tuple(RUN_TYPES)
LIBRARIES = ("torch", "cuda", "cublaslt", "hip", "rocblas", "hipblaslt", "hipblaslt_git", "triton", "driver")
Row = dict  # one history row: its table's columns, None where a value is missing


class HistoryError(BadInput):
    """A history file that does not parse, or one of a newer schema; the message starts with the path."""


@dataclass(frozen=True)
class History:
    """The runs (``runs``) and their GEMM rows (``gemms``), oldest first; empty lists where none ran."""

    runs: list[Row]
    gemms: list[Row]


def libraries(stack: dict) -> str:
    """The library versions a stack fingerprint stands for, in words (``torch 2.11.0, cublaslt 130100``)."""
    return ", ".join(f"{name} {stack[name]}" for name in LIBRARIES if stack.get(name))


def source_of(solution: str) -> str:
    """Where a winner comes from: the library's own pick (``default``), a library's algorithm, or our kernel."""
    if not solution or solution == "Default":
        return "default"
    return solution.split("_")[1].lower() if solution.startswith("Gemm_") else solution.split("_")[0]


def append(workdir: Path, run: dict, gemms: Sequence[dict]) -> History:
    """Add one run (``run``: ``RUN_COLUMNS`` but ``written`` and ``date``) and its GEMM rows (``GEMM_COLUMNS``
    but the run's own) to the workdir's history, replacing what an earlier run of that name left; the history as
    it now stands (what ``load`` would read back)."""
    root = Path(workdir) / DIRECTORY
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        meta = _meta(root)
        old = load(workdir)
        written = uuid.uuid4().hex[:12]
        date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        shared = {"run": run["run"], "written": written, "date": date}
        run_fields = {c: run.get(c) for c in ("fingerprint", "libraries", "workload")}
        runs = [r for r in old.runs if r["run"] != run["run"]] + [_typed({**run, **shared}, RUN_TYPES)]
        gemm_rows = [g for g in old.gemms if g["run"] != run["run"]]
        gemm_rows += [_typed({**g, **run_fields, **shared}, GEMM_TYPES) for g in gemms]
        _write(root / f"gemms.{meta['format']}", gemm_rows, GEMM_TYPES, meta["format"])
        _write(root / f"runs.{meta['format']}", runs, RUN_TYPES, meta["format"])  # last: it commits the append
    return History(_by_date(runs), gemm_rows)


def load(workdir: Path) -> History:
    """The workdir's history (empty where it has none); ``HistoryError`` for a file that is not one."""
    root = Path(workdir) / DIRECTORY
    if not (root / "meta.json").exists():
        return History([], [])
    meta = _meta(root)
    runs = _read(root / f"runs.{meta['format']}", meta["format"], RUN_TYPES)
    gemms = _read(root / f"gemms.{meta['format']}", meta["format"], GEMM_TYPES)
    committed = {(r["run"], r["written"]) for r in runs}
    return History(_by_date(runs), [g for g in gemms if (g["run"], g["written"]) in committed])


def nights(history: History) -> list[Row]:
    """One row per run, oldest first: its figures, ``new_shapes`` (keys no earlier run measured), ``caught_up``
    (rows the run before kept that this one does not, across a library upgrade), and, where the fingerprint
    changed, ``upgrade`` with ``default_moved`` (geomean of the default's time before over after, the GEMMs both
    measured: above 1, the upgrade made the default faster) and ``common`` (how many)."""
    out, seen, previous, by_run = [], set(), None, _by_run(history)
    for run in history.runs:
        mine = by_run.get(run["run"], {})
        row = {**run, "new_shapes": len(mine.keys() - seen) if previous is not None else 0}
        row.update(upgrade=False, default_moved=None, common=0, caught_up=0)
        if previous is not None and run["fingerprint"] != previous["fingerprint"]:
            before = by_run.get(previous["run"], {})
            both = [(before[k], mine[k]) for k in mine if k in before]
            pairs = [(b["baseline_us"], a["baseline_us"]) for b, a in both]
            ratios = [before_us / after_us for before_us, after_us in pairs if _positive(before_us, after_us)]
            row.update(upgrade=True, default_moved=geomean(ratios), common=len(ratios))
            row["caught_up"] = sum(bool(b["kept"]) and not a["kept"] for b, a in both)
        out.append(row)
        seen |= mine.keys()
        previous = run
    return out


def moved_most(history: History, table: Sequence[Row], count: int = 5) -> list[dict]:
    """The GEMMs whose default time moved most across the last upgrade (the newest run against the run before
    the fingerprint changed; ``table``: the history's ``nights``): key, label, the default before and after
    (us), their ratio, the speedup after."""
    upgrades = [i for i, night in enumerate(table) if night["upgrade"]]
    if not upgrades:
        return []
    by_run = _by_run(history)
    before, after = by_run.get(table[upgrades[-1] - 1]["run"], {}), by_run.get(table[-1]["run"], {})
    moved = [
        {"key": key, "label": a["label"], "before_us": before[key]["baseline_us"], "after_us": a["baseline_us"],
         "moved": before[key]["baseline_us"] / a["baseline_us"], "speedup_after": a["speedup"]}
        for key, a in after.items()
        if key in before and _positive(before[key]["baseline_us"], a["baseline_us"])
    ]  # fmt: skip
    return sorted(moved, key=lambda m: -abs(math.log(m["moved"])))[:count]


def one_gemm(history: History, key: str) -> list[Row]:
    """One GEMM's rows over the nights (``key`` as TunableOp writes it, or a label), oldest first."""
    return [g for g in history.gemms if key in (g["key"], g["label"])]


def csv_text(rows: Sequence[Row], columns: Sequence[str]) -> str:
    """``rows`` as the history's CSV writes them: a header, None as an empty field, floats in full."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(["" if row.get(c) is None else row[c] for c in columns] for row in rows)
    return buffer.getvalue()


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _by_run(history: History) -> dict[str, dict[str, Row]]:
    """The GEMM rows of each run by key, in one pass over the history (it grows by a night's rows a night)."""
    grouped: dict[str, dict[str, Row]] = {}
    for gemm in history.gemms:
        grouped.setdefault(gemm["run"], {})[gemm["key"]] = gemm
    return grouped


def _positive(*values: float | None) -> bool:
    return all(v is not None and v > 0 for v in values)


def _by_date(runs: list[Row]) -> list[Row]:
    return sorted(runs, key=lambda r: r["date"] or "")


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _meta(root: Path) -> dict:
    path = root / "meta.json"
    if not path.exists():
        meta = {"schema": SCHEMA, "format": "parquet" if _parquet() else "csv"}
        atomic_write_json(path, meta)
        return meta
    try:
        meta = json.loads(path.read_text())
        schema, fmt = int(meta["schema"]), meta["format"]
    except (ValueError, KeyError, TypeError) as err:
        raise HistoryError(f"{path}: not a history's meta.json ({type(err).__name__}: {err})") from None
    if schema > SCHEMA:
        raise HistoryError(f"{path}: a history of schema {schema}, newer than this gemm-tune's {SCHEMA}: upgrade it")
    if fmt not in ("csv", "parquet") or (fmt == "parquet" and not _parquet()):
        raise HistoryError(f"{path}: format {fmt!r}, which this Python cannot read (Parquet needs pyarrow)")
    return meta


def _parquet() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def _typed(row: dict, types: dict[str, type], where: str = "") -> Row:
    """``row`` with each column of ``types`` as its type (None for a missing or empty value; a CSV's text
    ``True``/``False`` as a bool); ``HistoryError`` naming ``where`` for a value that is not of its type."""
    out: Row = {}
    for column, kind in types.items():
        value = row.get(column)
        if value is None or value == "" or (isinstance(value, float) and value != value):
            out[column] = None
        elif kind is bool and isinstance(value, str):
            if value not in ("True", "False"):
                raise HistoryError(f"{where}: column {column}: {value!r} is not True or False")
            out[column] = value == "True"
        else:
            try:
                out[column] = int(float(value)) if kind is int else kind(value)
            except (TypeError, ValueError):
                raise HistoryError(f"{where}: column {column}: {value!r} is not a {kind.__name__}") from None
    return out


def _read(path: Path, fmt: str, types: dict[str, type]) -> list[Row]:
    """A table of the history, each row typed (``_typed``); ``HistoryError`` naming the file (and a CSV's line)
    for one that is not such a table."""
    if not path.exists():
        return []
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            columns, rows = table.column_names, table.to_pylist()
        else:
            with path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                columns, rows = reader.fieldnames or [], list(reader)
    except Exception as err:  # csv and pyarrow raise many kinds for a torn or foreign file
        raise HistoryError(f"{path}: not a gemm-tune history table ({type(err).__name__}: {err})") from None
    missing = [c for c in types if c not in columns]
    if missing:
        raise HistoryError(f"{path}: not a gemm-tune history table (no column {', '.join(missing)})")
    return [_typed(row, types, f"{path}:{line}") for line, row in enumerate(rows, start=2)]


def _write(path: Path, rows: list[Row], types: dict[str, type], fmt: str) -> None:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        kinds = {str: pa.string(), float: pa.float64(), bool: pa.bool_(), int: pa.int64()}
        schema = pa.schema([(c, kinds[kind]) for c, kind in types.items()])
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), buffer)
        with atomic_open(path, "wb") as handle:
            handle.write(buffer.getvalue())
    else:
        with atomic_open(path) as handle:
            handle.write(csv_text(rows, list(types)))


def entries(run_dir: Path, rows: Sequence[dict], passed: bool, weighted: float, e2e: dict) -> tuple[dict, list]:
    """The history's run row and GEMM rows of a report (``rows``: the report's, ``e2e``: Validate's A/B)."""
    layout = RunLayout.of(run_dir)
    stamp = _json(layout.validate / STAMP)
    manifest = _json(layout.collect_manifest)
    command = manifest.get("command")
    workload = " ".join(command) if isinstance(command, list) else command or "untuned files (--untuned)"
    run = {
        "run": Path(run_dir).name,
        "fingerprint": stamp.get("fingerprint"),
        "libraries": libraries(stamp.get("stack") or {}),
        "workload": workload,
        "passed": bool(passed),
        "gemms": len(rows),
        "kept": sum(bool(r["kept"]) for r in rows),
        "weighted_speedup": weighted,
        "e2e_speedup": e2e.get("tokens_speedup") or e2e.get("wall_speedup"),
        "e2e_noise": e2e.get("noise"),
    }
    gemms = [
        {
            "key": r["key"],
            "label": r["label"],
            "share": r["weight"],
            "baseline_us": r["baseline"]["median_us"],
            "tuned_us": r["tuned"]["median_us"],
            "speedup": r["speedup"],
            "noise": r["noise"],
            "kept": bool(r["kept"]),
            "why": r["reason"],
            "source": source_of(r["solution"]) if r["kept"] else "default",
        }
        for r in rows
    ]
    return run, gemms


def trend_lines(history: History) -> list[str]:
    """``gemm-tune history``'s table, one line per night, an upgrade's line above the night it happened."""
    table = nights(history)
    head = f"{'date':<10}  {'run':<16} {'fingerprint':<26} {'weighted':>9} {'end to end':>10} {'kept':>7}"
    lines = [head + f" {'caught up':>9} {'new shapes':>10}"]
    for night in table:
        if night["upgrade"]:
            moved = night["default_moved"]
            default = f"the default x{moved:.3f} faster" if moved else "no GEMM measured on both sides"
            lines.append(
                f"-- upgrade to {night['libraries']}: {default} (baseline before over after, {night['common']} "
                f"GEMMs); tuning adds x{night['weighted_speedup']:.3f} after it"
            )
        e2e = night["e2e_speedup"]
        e2e_text = f"x{e2e:.3f}" if isinstance(e2e, float) and e2e == e2e else "-"
        lines.append(
            f"{str(night['date'])[:10]:<10}  {night['run']:<16} {night['fingerprint'] or '-':<26} "
            f"{'x' + format(night['weighted_speedup'], '.3f'):>9} {e2e_text:>10} "
            f"{str(night['kept']) + '/' + str(night['gemms']):>7} {night['caught_up']:>9} {night['new_shapes']:>10}"
        )
    return lines


def gemm_lines(history: History, key: str) -> list[str]:
    """One GEMM's line over the nights, or why there is none."""
    rows = one_gemm(history, key)
    if not rows:
        return [f"no night measured {key!r} (a TunableOp key as the report writes it, or its label)"]
    lines = [f"{'date':<10}  {'run':<16} {'fingerprint':<26} {'default us':>10} {'tuned us':>9} {'speedup':>8} kept"]
    for r in rows:
        why = "" if r["kept"] else f" ({r['why']})" if isinstance(r["why"], str) and r["why"] else ""
        lines.append(
            f"{str(r['date'])[:10]:<10}  {r['run']:<16} {r['fingerprint'] or '-':<26} {r['baseline_us']:>10.2f} "
            f"{r['tuned_us']:>9.2f} {'x' + format(r['speedup'], '.3f'):>8} {'yes' if r['kept'] else 'no'}{why}"
        )
    return lines

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
import datetime
import fcntl
import io
import json
import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...atomic import atomic_open, atomic_write_json
from ...errors import BadInput
from ...stats import geomean
from ..run.fingerprint import STAMP
from ..run.layout import RunLayout

if TYPE_CHECKING:
    import pandas as pd  # imported where a history is read or written: a luigi command that never does pays nothing

DIRECTORY = "history"
SCHEMA = 1
GEMM_COLUMNS = (
    *("run", "written", "date", "fingerprint", "libraries", "workload", "key", "label", "share"),
    *("baseline_us", "tuned_us", "speedup", "noise", "kept", "why", "source"),
)
RUN_COLUMNS = (
    *("run", "written", "date", "fingerprint", "libraries", "workload", "passed", "gemms", "kept"),
    *("weighted_speedup", "e2e_speedup", "e2e_noise"),
)
LIBRARIES = ("torch", "cuda", "cublaslt", "hip", "rocblas", "hipblaslt", "hipblaslt_git", "triton", "driver")


class HistoryError(BadInput):
    """A history file that does not parse, or one of a newer schema; the message starts with the path."""


@dataclass(frozen=True)
class History:
    """The runs (``runs``) and their GEMM rows (``gemms``), oldest first; empty frames where none ran."""

    runs: pd.DataFrame
    gemms: pd.DataFrame


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
    import pandas as pd

    root = Path(workdir) / DIRECTORY
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        meta = _meta(root)
        old = load(workdir)
        written = uuid.uuid4().hex[:12]
        date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        shared = {"run": run["run"], "written": written, "date": date}
        new_run = pd.DataFrame([{**{c: None for c in RUN_COLUMNS}, **run, **shared}], columns=list(RUN_COLUMNS))
        run_fields = {c: run.get(c) for c in ("fingerprint", "libraries", "workload")}
        new_gemms = pd.DataFrame([{**g, **run_fields, **shared} for g in gemms], columns=list(GEMM_COLUMNS))
        runs = pd.concat([_without(old.runs, run["run"]), new_run], ignore_index=True)
        gemm_rows = pd.concat([_without(old.gemms, run["run"]), new_gemms], ignore_index=True)
        _write(root / f"gemms.{meta['format']}", gemm_rows, meta["format"])
        _write(root / f"runs.{meta['format']}", runs, meta["format"])  # last: it commits the append
    return History(runs.sort_values("date", kind="stable", ignore_index=True), gemm_rows)


def load(workdir: Path) -> History:
    """The workdir's history (empty where it has none); ``HistoryError`` for a file that is not one."""
    import pandas as pd

    root = Path(workdir) / DIRECTORY
    if not (root / "meta.json").exists():
        return History(pd.DataFrame(columns=list(RUN_COLUMNS)), pd.DataFrame(columns=list(GEMM_COLUMNS)))
    meta = _meta(root)
    runs = _read(root / f"runs.{meta['format']}", meta["format"], RUN_COLUMNS)
    gemms = _read(root / f"gemms.{meta['format']}", meta["format"], GEMM_COLUMNS)
    committed = set(zip(runs["run"], runs["written"], strict=True))
    whole = [pair in committed for pair in zip(gemms["run"], gemms["written"], strict=True)]
    return History(runs.sort_values("date", kind="stable", ignore_index=True), gemms[whole].reset_index(drop=True))


def nights(history: History) -> pd.DataFrame:
    """One row per run, oldest first: its figures, ``new_shapes`` (keys no earlier run measured), ``caught_up``
    (rows the run before kept that this one does not, across a library upgrade), and, where the fingerprint
    changed, ``upgrade`` with ``default_moved`` (geomean of the default's time before over after, the GEMMs both
    measured: above 1, the upgrade made the default faster) and ``common`` (how many)."""
    import pandas as pd

    runs, gemms = history.runs, history.gemms
    out, seen = [], set()
    previous = None
    for run in runs.itertuples(index=False):
        mine = gemms[gemms["run"] == run.run]
        keys = set(mine["key"])
        row = {**run._asdict(), "new_shapes": len(keys - seen) if previous is not None else 0}
        row.update(upgrade=False, default_moved=None, common=0, caught_up=0)
        if previous is not None:
            before = gemms[gemms["run"] == previous.run]
            both = before.merge(mine, on="key", suffixes=("_before", "_after"))
            if run.fingerprint != previous.fingerprint:
                row["upgrade"] = True
                ratios = (both["baseline_us_before"] / both["baseline_us_after"]).dropna()
                row["default_moved"] = geomean(ratios)
                row["common"] = len(ratios)
                row["caught_up"] = int((both["kept_before"].astype(bool) & ~both["kept_after"].astype(bool)).sum())
        out.append(row)
        seen |= keys
        previous = run
    return pd.DataFrame(out)


def moved_most(history: History, table: pd.DataFrame, count: int = 5) -> list[dict]:
    """The GEMMs whose default time moved most across the last upgrade (the newest run against the run before
    the fingerprint changed; ``table``: the history's ``nights``): key, label, the default before and after
    (us), their ratio, the speedup after."""
    upgrades = table.index[table["upgrade"]] if len(table) else []
    if not len(upgrades):
        return []
    at = upgrades[-1]
    before, after = table.loc[at - 1, "run"], table.loc[len(table) - 1, "run"]
    gemms = history.gemms
    both = gemms[gemms["run"] == before].merge(gemms[gemms["run"] == after], on="key", suffixes=("_b", "_a"))
    both = both.assign(moved=both["baseline_us_b"] / both["baseline_us_a"])
    both = both.assign(order=both["moved"].map(lambda v: -abs(math.log(v))))
    return [
        {"key": r.key, "label": r.label_a, "before_us": r.baseline_us_b, "after_us": r.baseline_us_a,
         "moved": r.moved, "speedup_after": r.speedup_a}
        for r in both.sort_values("order").head(count).itertuples()
    ]  # fmt: skip


def one_gemm(history: History, key: str) -> pd.DataFrame:
    """One GEMM's line over the nights (``key`` as TunableOp writes it, or a label)."""
    gemms = history.gemms
    mine = gemms[(gemms["key"] == key) | (gemms["label"] == key)]
    return mine[["date", "run", "fingerprint", "baseline_us", "tuned_us", "speedup", "kept", "why", "source"]]


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


def _read(path: Path, fmt: str, columns: Sequence[str]) -> pd.DataFrame:

    import pandas as pd

    if not path.exists():
        return pd.DataFrame(columns=list(columns))
    try:
        frame = pd.read_parquet(path) if fmt == "parquet" else pd.read_csv(path, keep_default_na=False, na_values=[""])
    except Exception as err:  # pandas and pyarrow raise many kinds for a torn or foreign file
        raise HistoryError(f"{path}: not a gemm-tune history table ({type(err).__name__}: {err})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise HistoryError(f"{path}: not a gemm-tune history table (no column {', '.join(missing)})")
    return frame[list(columns)].astype({"run": str, "written": str})


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _without(frame: pd.DataFrame, run: str) -> pd.DataFrame:
    return frame[frame["run"] != run] if len(frame) else frame


def _write(path: Path, frame: pd.DataFrame, fmt: str) -> None:

    if fmt == "parquet":
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        with atomic_open(path, "wb") as handle:
            handle.write(buffer.getvalue())
    else:
        with atomic_open(path) as handle:
            frame.to_csv(handle, index=False, lineterminator="\n")


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
    for night in table.to_dict("records"):
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
    if not len(rows):
        return [f"no night measured {key!r} (a TunableOp key as the report writes it, or its label)"]
    lines = [f"{'date':<10}  {'run':<16} {'fingerprint':<26} {'default us':>10} {'tuned us':>9} {'speedup':>8} kept"]
    for r in rows.to_dict("records"):
        why = "" if r["kept"] else f" ({r['why']})" if isinstance(r["why"], str) and r["why"] else ""
        lines.append(
            f"{str(r['date'])[:10]:<10}  {r['run']:<16} {r['fingerprint']:<26} {r['baseline_us']:>10.2f} "
            f"{r['tuned_us']:>9.2f} {'x' + format(r['speedup'], '.3f'):>8} {'yes' if r['kept'] else 'no'}{why}"
        )
    return lines

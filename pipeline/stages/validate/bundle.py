"""The ship bundle: the merged results, logic and hipBLASLt override file reduced to the rows the gate kept,
with a manifest."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...atomic import atomic_directory, atomic_write_json, atomic_write_text
from ...formats.hipblaslt_bench import BENCH_TYPES
from ...formats.hipblaslt_override import read_override, write_override
from ...formats.logic import copy_logic_file, dump_logic, is_record, load_logic, write_logic
from ...formats.m_ranges import read_ranges
from ...formats.rocm import problem_type_name
from ...formats.tunableop import TunableOpEntry, format_key, read_file, write_file
from ...kernels import triton_gemm
from ...problem import GemmProblem
from ..bench import bucket_score
from ..bench.tune import OVERRIDE
from ..gather import mgrid
from ..gather.shapes import ShapeRecord, read_shapes_json
from ..merge.logic_merge import pending_path, remove_unused, settle
from ..run.fingerprint import STAMP
from ..run.layout import RunLayout
from .gate import GateResult

MANIFEST = "manifest.json"


def own_kernel_rows(run_dir: Path, entries: Sequence[TunableOpEntry]) -> list[dict]:
    """The kept rows whose winner is one of this project's kernels, each with its config and the numerics
    figures Bench checked it with (from Bench's results): what a reader of the manifest needs to trust it."""
    own = [e for e in entries if (e.solution or "").startswith(triton_gemm.PREFIX)]
    wanted = {f"{e.op_signature},{e.params_signature}": e.solution for e in own}
    results = RunLayout.of(run_dir).bench / "results.json"
    if not wanted or not results.exists():
        return [{"key": key, "solution": name} for key, name in sorted(wanted.items())]
    rows = []
    for data in json.loads(results.read_text()):
        key = ",".join(format_key(GemmProblem.from_dict(data["problem"])))
        solution = ((data.get("record") or {}).get("solution")) or {}
        if wanted.get(key) == data.get("winner"):
            config = {k: v for k, v in solution.items() if k != "numerics"}
            rows.append(
                {"key": key, "solution": data["winner"], "config": config, "numerics": solution.get("numerics")}
            )
    return sorted(rows, key=lambda row: row["key"])


def buckets_of(shapes: Sequence[ShapeRecord]) -> dict[str, tuple[int, int]]:
    """The bucket of each grid row by TunableOp key (``mgrid``; none under ``--m-grid exact``)."""
    return {record.key: record.bucket for record in shapes if record.bucket is not None}


def grid_buckets(
    layout: RunLayout, shapes: Sequence[ShapeRecord]
) -> tuple[dict[str, tuple[int, int]], dict[str, dict]]:
    """Each grid row's bucket (of ``shapes``, the run's) as Bench left it (narrowed where its winner lost inside
    it; the rest of a fixed-size winner's bucket a row of its own below it: ``bucket_score``), and the narrowed
    ones (grid key -> ``{"lo", "why"}``)."""
    buckets = buckets_of(shapes)
    results = json.loads(layout.bench_results.read_text()) if layout.bench_results.exists() else []
    buckets.update(bucket_score.below_buckets(results, buckets))
    narrowed = bucket_score.served(results, buckets)
    return {k: (max(lo, narrowed.get(k, {}).get("lo", lo)), hi) for k, (lo, hi) in buckets.items()}, narrowed


def write_bundle(run_dir: Path, result: GateResult, meta: dict, split: Mapping[str, dict] | None = None) -> Path:
    """``RUN_DIR/bundle``: ``tunableop_results.csv``, ``logic/`` and the winner records beside it (``records/``)
    with only kept rows, each grid row spread
    over its bucket (``mgrid.spread``; a bucket in ``split``, grid key -> ``{"lo", "why"}``, failed at a held-out
    token count and serves from ``lo`` up), ``manifest.json`` last."""
    layout = RunLayout.of(run_dir)
    merged = read_file(layout.merged_csv)
    speedups = {row.key: row.speedup for row in result.kept}
    entries = [e for e in merged.entries if f"{e.op_signature},{e.params_signature}" in speedups]
    measured = {  # (ProblemType name, [M, N, B, K]) of each kept GEMM -> its validated speedup
        (problem_type_name(e.problem), (e.problem.m, e.problem.n, e.problem.batch, e.problem.k)): speedups[
            f"{e.op_signature},{e.params_signature}"
        ]
        for e in entries
    }
    shapes = read_shapes_json(layout.shapes) if layout.shapes.exists() else []
    buckets, narrowed = grid_buckets(layout, shapes)
    split = {**narrowed, **(split or {})}  # Validate's split lies inside Bench's narrowed bucket
    buckets = {key: (max(lo, split.get(key, {}).get("lo", lo)), hi) for key, (lo, hi) in buckets.items()}
    entries, ranges = mgrid.spread(entries, buckets)
    for record in ranges:
        if record["key"] in split:
            record["note"] = f"split: serves {record['lo']}-{record['hi']} ({split[record['key']]['why']})"
    defaulted = mgrid.default_ranges(buckets_of(shapes), ranges, {row.key: why for row, why in result.dropped})
    pending = _pending(layout)
    settled: list[dict] = []
    out = layout.bundle
    with atomic_directory(out) as staging:
        write_file(staging / "tunableop_results.csv", merged.validators, entries)
        (staging / "logic").mkdir()
        (staging / "records").mkdir()  # winner records beside the logic tree, never inside it
        for path in sorted([*layout.merged_logic.glob("*.yaml"), *layout.merged_records.glob("*.yaml")]):
            logic = load_logic(path)
            if is_record(logic):
                name = _problem_type(path, logic)
                logic.exact_logic = [row for row in logic.exact_logic if (name, tuple(row[0][:4])) in measured]
                if not logic.exact_logic:
                    continue
                remove_unused(logic)
                atomic_write_text(staging / "records" / path.name, dump_logic(logic))
            elif pending.get(path.name):
                settled += _settle(logic, path, pending[path.name], measured, staging / "logic")
            else:
                copy_logic_file(path, staging / "logic")
        if settled:
            atomic_write_json(staging / "logic-decisions.json", settled)
        override = next(
            (d / OVERRIDE for d in (layout.merge, layout.bench) if (d / OVERRIDE).exists()),
            None,
        )  # the merged override (runs before MergeResults merged it: Bench's)
        if override is not None:
            meta = {**meta, "hipblaslt_override": _kept_overrides(override, entries, staging / OVERRIDE, ranges)}
        if meta.get("fingerprint"):
            atomic_write_json(staging / STAMP, {"fingerprint": meta["fingerprint"], "stack": meta.get("stack", {})})
        atomic_write_json(
            staging / MANIFEST,
            {
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "validators": merged.validators,
                "rows": len(entries),
                "weighted_gemm_speedup": result.weighted_speedup,
                "m_ranges": ranges,
                "default_ranges": defaulted,  # counts whose tuned choice is torch's default (mgrid.default_ranges)
                "collected": sorted(record.key for record in shapes if record.seen),  # what the workload ran
                "own_kernel_rows": own_kernel_rows(run_dir, entries),
                "dropped": [{"key": r.key, "reason": why} for r, why in result.dropped],
                **meta,
            },
        )
    return out


def _problem_type(path: Path, logic) -> str:
    """The ProblemType name of a logic file (its name after the schedule: ``aquavanjaram_<ProblemType>.yaml``)."""
    schedule = logic.data[1] if logic.layout == "list" else logic.data.get("ScheduleName")
    return path.stem.removeprefix(f"{schedule}_")


def _pending(layout: RunLayout) -> dict[str, list[dict]]:
    """The sizes the logic merge replaced pending Validate, by logic file (``logic_merge.pending_path``)."""
    path = pending_path(layout.merged_logic)
    by_file: dict[str, list[dict]] = {}
    for item in json.loads(path.read_text()) if path.exists() else []:
        by_file.setdefault(item["file"], []).append(item)
    return by_file


def _settle(logic, path: Path, pending: list[dict], measured: dict, out: Path) -> list[dict]:
    """A merged logic file whose pending sizes Validate settled (``logic_merge.settle``), written to ``out``;
    its decisions, each naming the file."""
    name = _problem_type(path, logic)

    def why(size: tuple) -> str | None:
        speedup = measured.get((name, size))
        return None if speedup is None else f"kept: Validate measured it x{speedup:.3f} over the library's pick"

    decisions = settle(logic, pending, why)
    write_logic(logic, out / path.name)
    return [{"file": path.name, **d} for d in decisions]


def _kept_overrides(source: Path, kept: list, out: Path, ranges: Sequence[dict] = ()) -> dict:
    """Write the override rows of the kept GEMMs to ``out``, each legacy row of a grid row also at every count of
    its range (``ranges``, ``mgrid.spread``'s: the reader matches exact sizes only). The reader keys a legacy row
    (what hipblaslt-bench writes) on transposes, sizes, batch and types only (no ld's, no scale form:
    docs/upstream.md), so where kept GEMMs that differ in their scaling (a tensorwise and a rowwise FP8 GEMM of
    one shape) share that key, no legacy row ships for it: either would be applied to both. Those keys are
    reported. A current-schema row keys on its scale formats too, and ships (at its grid point alone)."""
    overrides = read_override(source)
    spread_of = {  # the override key of a grid row's size -> the token counts below it in its range
        (r.grid.transa, r.grid.transb, str(r.grid.m), str(r.grid.n), str(r.grid.k), str(r.grid.batch)): r.copies()
        for r in read_ranges(ranges)
    }

    def key(problem) -> tuple:
        return (
            problem.transa,
            problem.transb,
            str(problem.m),
            str(problem.n),
            str(problem.k),
            str(problem.batch),
            BENCH_TYPES.get(problem.a_type, ""),
        )

    forms: dict[tuple, set] = {}
    for e in kept:
        forms.setdefault(key(e.problem), set()).add((e.problem.op, e.problem.rowwise))
    ambiguous = {k for k, f in forms.items() if len(f) > 1}
    rows = [
        entry
        for entry in overrides.entries
        if (
            k := tuple(
                dict(entry.fields).get(c, "") for c in ("transA", "transB", "m", "n", "k", "batch_count", "a_type")
            )
        )
        in forms
        and (k not in ambiguous or entry.current)  # a current row keys on its scale formats
    ]
    for entry in list(rows):
        fields = dict(entry.fields)
        trans = tuple("N" if fields.get(t, "N") == "N" else "T" for t in ("transA", "transB"))  # the reader's
        size = (*trans, *(fields.get(c, "") for c in ("m", "n", "k", "batch_count")))
        rows += [row for n in spread_of.get(size, ()) if (row := entry.with_n(n)) is not None]
    if rows:
        write_override(out, overrides.git_version, rows)
    return {
        "file": out.name if rows else None,
        "rows": len(rows),
        "git_version": overrides.git_version,
        "left_out": [
            ",".join(k) + ": kept GEMMs of this shape differ in their scaling, which the override "
            "reader does not tell apart"
            for k in sorted(ambiguous)
        ],
    }

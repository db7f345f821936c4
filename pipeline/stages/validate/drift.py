"""Drift against the previous run of the same workload: what a night changed.

The previous run is the newest other run directory of the workdir that ran the same workload (the same
collection command, or no collection for both) and reached a report. Compared: the shapes recorded, the
winner of every GEMM both runs kept, and the speedups: a row kept before and not now is dropped because
the library caught up with it (its default got as fast) when the stack changed, or, on the same stack, that
this run's measurement did not confirm it (the gate's reason is given); a row kept by both whose speedup
fell by more than the noise shrank.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..run.fingerprint import stamped
from ..run.layout import RunLayout
from .measured import MeasuredRow

SHRINK = 0.02  # a kept row's speedup must fall by more than this (and its noise) to count as shrunk


def _json(path: Path) -> dict | list | None:
    return json.loads(path.read_text()) if path.exists() else None


def workload_of(run_dir: Path) -> list | None:
    manifest = _json(RunLayout.of(run_dir).collect_manifest)
    return manifest.get("command") if manifest else None


def previous_run(run_dir: Path) -> Path | None:
    """The newest sibling of ``run_dir`` with a report, for the same workload."""
    run_dir = Path(run_dir).absolute()
    workload, found = workload_of(run_dir), []
    for summary in run_dir.parent.glob("*/report/summary.json"):
        other = summary.parents[1]
        if other != run_dir and workload_of(other) == workload:
            found.append((summary.stat().st_mtime_ns, other))
    return max(found)[1] if found else None


def _rows(run_dir: Path) -> dict[str, dict]:
    measured = _json(RunLayout.of(run_dir).measurements) or {"rows": []}
    gate = _json(RunLayout.of(run_dir).gate) or {}
    kept, reasons = set(gate.get("kept", [])), {d["key"]: d["reason"] for d in gate.get("dropped", [])}
    rows = [MeasuredRow.from_json(r) for r in measured["rows"]]
    return {
        r.key: {
            "solution": r.solution,
            "speedup": r.speedup,
            "noise": r.noise,
            "kept": r.key in kept,
            "reason": reasons.get(r.key, ""),
            "label": r.label,
        }
        for r in rows
    }


def _shapes(run_dir: Path) -> set[str]:
    rows = _json(RunLayout.of(run_dir).shapes) or []
    return {f"{r['op_signature']},{r['params_signature']}" for r in rows}


def compare(run_dir: Path, previous: Path | None) -> dict:
    """The drift of ``run_dir`` against ``previous`` (None: there is no previous run to compare with)."""
    if previous is None:
        return {"previous_run": None}
    layout = RunLayout.of(run_dir)
    now, before = _rows(Path(run_dir)), _rows(previous)
    shapes_now, shapes_before = _shapes(Path(run_dir)), _shapes(previous)
    changed, shrank, dropped = [], [], []
    upgraded = stamped(layout.validate) != stamped(RunLayout.of(previous).validate)
    for key, row in sorted(now.items()):
        old = before.get(key)
        if old is None or not old["kept"]:
            continue
        entry = {
            "key": key,
            "label": row["label"],
            "before": old["solution"],
            "after": row["solution"],
            "speedup_before": old["speedup"],
            "speedup_after": row["speedup"] if row["kept"] else 1.0,
        }
        if not row["kept"]:
            why = (
                "the library caught up: under the new stack the default is as fast, the row is dropped"
                if upgraded
                else f"not kept this run, same stack (noise or the gate): {row['reason']}"
            )
            dropped.append({**entry, "why": why})
        elif row["solution"] != old["solution"]:
            changed.append(entry)
        if row["kept"] and row["speedup"] < old["speedup"] - max(SHRINK, row["noise"], old["noise"]):
            shrank.append(entry)
    return {
        "previous_run": previous.name,
        "previous_fingerprint": stamped(RunLayout.of(previous).validate),
        "fingerprint": stamped(layout.validate),
        "new_shapes": sorted(shapes_now - shapes_before),
        "gone_shapes": sorted(shapes_before - shapes_now),
        "winners_changed": changed,
        "speedups_shrank": shrank,
        "dropped": dropped,
    }


def lines(drift: dict) -> list[str]:
    """A few plain lines for the report and the printed summary."""
    if not drift.get("previous_run"):
        return ["no previous run of this workload to compare with"]
    stack = (
        "same stack"
        if drift["fingerprint"] == drift["previous_fingerprint"]
        else f"stack {drift['previous_fingerprint']} -> {drift['fingerprint']}"
    )
    return [
        f"against {drift['previous_run']} ({stack}): {len(drift['new_shapes'])} new shapes, "
        f"{len(drift['gone_shapes'])} gone, {len(drift['winners_changed'])} winners changed, "
        f"{len(drift['speedups_shrank'])} speedups shrank, "
        f"{len(drift['dropped'])} rows kept before and dropped now"
    ]

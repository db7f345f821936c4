"""Benchmark: does the grid budget's estimate of Bench's time match what Bench took? (docs/serving.md)

    python bench/grid_cost.py [LABEL=]workdir/<run> [...] [--out bench/results/grid_cost_<gpu>_<date>.json]

``--grid-budget`` keeps what fits its minutes by an estimate, per GEMM (``grid_gemm_seconds``): a count that
serves itself alone, a power of two whose bucket holds counts below it, another count with such a bucket, a
count seeded from its weight's nearest searched winner above it, a GEMM outside any family. This reads what a run wrote,
its ``shapes/shapes.json`` (each GEMM's bucket, whether it is seeded) and Bench's ``bench/problems/*.json``
(each tuned GEMM's ``tuning_s``), and sets the estimate against the measured seconds, in all and per class;
and, of the seeded GEMMs, how often the seed held, from above and from below (``seeds``: their ``origin``).
A run whose Bench has not finished is compared on what it tuned. No GPU: it reads files, on any machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
from pathlib import Path

from pipeline.api import (
    GRID_GEMM_CLASSES,
    INPUT,
    BadInput,
    atomic_write_json,
    claim_output_file,
    grid_gemm_class,
    grid_gemm_seconds,
    load_json,
    note_written,
    problem_id,
    read_shapes_json,
)

SEEDED_ORIGIN = re.compile(r"^(retimed|retuned): the grid point M = (\d+) winner")  # grid_seeds, base.tune
TARGET_RATIO = (0.8, 1.25)  # measured / estimated over a whole tuned grid: what a minutes budget may miss by


def run_cost(run: Path, label: str = "") -> dict:
    """One run's estimate against Bench's measured seconds, over the GEMMs Bench tuned (``label``: its name in the
    record, the directory's name where empty)."""
    shapes = run / "shapes" / "shapes.json"
    if not shapes.is_file():
        raise BadInput(f"{run}: no shapes/shapes.json; name a run directory (workdir/<run-name>)")
    records = read_shapes_json(shapes)
    problems = run / "bench" / "problems"
    by_class: dict[str, list[tuple[float, float]]] = {name: [] for name in GRID_GEMM_CLASSES}
    seeds: dict[str, list[float]] = {}
    starts, ends = [], []
    for record in records:
        path = problems / f"{problem_id(record.problem)}.json"
        if not path.is_file():
            continue
        result = load_json(path, "Bench's result of one GEMM")
        if not isinstance(result, dict) or not isinstance(result.get("tuning_s"), int | float):
            raise BadInput(f"{path}: no tuning_s (seconds); a Bench result of this version is expected")
        estimate = grid_gemm_seconds(record.bucket, record.seeded)
        by_class[grid_gemm_class(record.bucket, record.seeded)].append((estimate, float(result["tuning_s"])))
        if record.seeded:
            seeds.setdefault(seed_outcome(str(result.get("origin") or ""), record.problem.n), []).append(
                float(result["tuning_s"])
            )
        timeline = result.get("timeline") or {}
        starts += [timeline["start"]] if "start" in timeline else []
        ends += [timeline["end"]] if "end" in timeline else []
    pairs = [pair for rows in by_class.values() for pair in rows]
    stack = run / "bench" / "stack.json"
    gpu = load_json(stack, "Bench's stack").get("stack", {}).get("gpu") if stack.is_file() else None
    estimated, measured = sum(e for e, _ in pairs), sum(m for _, m in pairs)
    return {
        "run": label or run.name,
        "gpu": gpu,
        "tuned_on": datetime.date.fromtimestamp(min(starts)).isoformat() if starts else None,
        "gemms": len(records),
        "tuned": len(pairs),
        "estimated_s": round(estimated, 1),
        "measured_s": round(measured, 1),
        "ratio": round(measured / estimated, 3) if estimated else None,
        "estimated_all_s": round(sum(grid_gemm_seconds(r.bucket, r.seeded) for r in records), 1),
        "classes": {
            name: {
                "tuned": len(rows),
                "estimated_s_each": rows[0][0],
                "measured_s_mean": round(statistics.mean(m for _, m in rows), 2),
                "measured_s": round(sum(m for _, m in rows), 1),
            }
            for name, rows in by_class.items()
            if rows
        },
        "seeds": {
            outcome: {"count": len(times), "measured_s_mean": round(statistics.mean(times), 2)}
            for outcome, times in sorted(seeds.items())
        },
    }


def seed_outcome(origin: str, n: object) -> str:
    """What became of a seeded GEMM, from its result's ``origin``: its neighbour's winner ``held`` or was
    ``lost`` (then searched), ``from above`` or ``from below`` its count ``n``; ``searched`` where it had no seed
    (no crowned anchor above it), ``other`` where an earlier stack's or the cache's winner came first."""
    if not origin:
        return "searched"
    found = SEEDED_ORIGIN.match(origin)
    if found is None or not isinstance(n, int):
        return "other"
    side = "below" if int(found.group(2)) < n else "above"
    return f"{'held' if found.group(1) == 'retimed' else 'lost'} from {side}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (workdir/<run-name>), each LABEL=PATH to name it")
    parser.add_argument("--out", help="write the record JSON here")
    parser.add_argument("--force", action="store_true", help="replace an --out that gemm-tune did not write")
    args = parser.parse_args()
    named = [(label, Path(path)) for label, _, path in (arg.rpartition("=") for arg in args.runs)]
    try:
        if args.out:  # never over what it reads: a run's files stay as they are
            inputs = [
                path
                for _, run in named
                for path in (
                    run / "shapes" / "shapes.json",
                    run / "bench" / "stack.json",
                    *run.glob("bench/problems/*"),
                )
            ]
            claim_output_file(args.out, inputs, args.force)
        runs = [run_cost(run, label) for label, run in named]
    except BadInput as err:
        print(f"grid_cost: {err}", file=sys.stderr)
        return INPUT
    record = {
        "benchmark": "grid budget's estimate against Bench's time",
        "date": datetime.date.today().isoformat(),
        "device": sorted({run["gpu"] for run in runs if run["gpu"]}),
        "target_ratio": list(TARGET_RATIO),
        "runs": runs,
    }
    if args.out:
        atomic_write_json(args.out, record)
        note_written(args.out)  # a later run may replace what this one wrote
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

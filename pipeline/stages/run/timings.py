"""Where a run's time went: one record per stage (``<run>/timings/<stage>.json``, wall seconds and when).

Each Luigi task records its wall time when it succeeds; Validate also records its parts (the GEMM
measurements, the end-to-end A/B) before it writes the report, so the report has them. A stage done by an
earlier invocation of the same run keeps that invocation's record; ``lines`` says which stages were.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

from ...atomic import atomic_write_json

DIRECTORY = "timings"
ORDER = (
    "CollectShapes",
    "GatherShapes",
    "GenerateConfigs",
    "BenchPlan",
    "BenchShard",
    "Bench",
    "MergeResults",
    "MergeLogic",
    "validate-gemms",
    "validate-e2e",
    "Validate",
    "TuneWorkload",
    "Package",
)


def dag_rank(name: str) -> tuple[int, str]:
    """Where a stage's record comes in the DAG (shards by index; a name it does not know last)."""
    base = name.split("-")[0] if name.startswith("BenchShard") else name
    return (ORDER.index(base) if base in ORDER else len(ORDER), name)


def record(run_dir: Path, stage: str, seconds: float, end: float | None = None) -> None:
    """Save that ``stage`` of the run took ``seconds`` of wall time, ending at ``end`` (epoch s, default now).
    The records of later stages that ended before this one started go: they were made from what this one
    replaced (a rerun that redid Bench and stopped at Validate keeps no earlier Package time)."""
    end = time.time() if end is None else end
    start = end - seconds
    atomic_write_json(
        Path(run_dir) / DIRECTORY / f"{stage}.json",
        {"stage": stage, "seconds": round(seconds, 3), "start": round(start, 3), "end": round(end, 3)},
    )
    for name, data in read(run_dir).items():
        if dag_rank(name)[0] > dag_rank(stage)[0] and data["end"] < start:
            (Path(run_dir) / DIRECTORY / f"{name}.json").unlink(missing_ok=True)


@contextlib.contextmanager
def timed(run_dir: Path, stage: str) -> Iterator[None]:
    """Record the block's wall time as ``stage`` when it succeeds."""
    start = time.monotonic()
    yield
    record(run_dir, stage, time.monotonic() - start)


def read(run_dir: Path) -> dict[str, dict]:
    """The stage records of a run, in DAG order (shards by index), each with its seconds, start and end."""
    records = {}
    for path in sorted((Path(run_dir) / DIRECTORY).glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            data = json.loads(path.read_text())
            records[data["stage"]] = data

    return {name: records[name] for name in sorted(records, key=dag_rank)}


def seconds(run_dir: Path) -> dict[str, float]:
    """Wall seconds by stage (``read`` without the clock times)."""
    return {name: data["seconds"] for name, data in read(run_dir).items()}


def line(stage_seconds: dict[str, float]) -> str:
    """``CollectShapes 35.2 s, GatherShapes 0.3 s, ...; total 96.1 s`` (Validate's parts count only until
    Validate's own record exists)."""
    tasks = {k: v for k, v in stage_seconds.items() if not k.startswith("validate-")}
    parts = {k: v for k, v in stage_seconds.items() if k.startswith("validate-")}
    total = sum(tasks.values()) + (0.0 if "Validate" in tasks else sum(parts.values()))
    return ", ".join(f"{name} {value:.1f} s" for name, value in stage_seconds.items()) + f"; total {total:.1f} s"

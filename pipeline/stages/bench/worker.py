"""One Bench worker: claim a free GPU, then take problems from the shared queue one at a time (each under a
lock of its own, ``claims/<id>.lock``), write each result as it finishes.

    python -m pipeline.stages bench-worker QUEUE.json OUT_DIR --gpus 0,1 --name shard0

Its timeline (``shards/<name>.timeline.json``, epoch seconds) says where its start-up went: ``spawned`` (the
stage started the process), ``started`` (Python and the pipeline imported), ``slot_claimed``,
``backend_imported`` (torch, vendor bindings), ``backend_ready`` (CUDA context, handles), ``prepared`` (the
backend's once-per-process measurements), ``done``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ...atomic import atomic_write_json
from ...backends.base import BackendBase, ProblemResult, TuneSettings, tune
from ...backends.slots import gpu_slot, lock_dir
from ...problem import GemmProblem
from . import bucket_score
from .registry import load_factory
from .tune import RUNTIME, pending, problem_id, result_path

log = logging.getLogger("pipeline")


def load_backend(
    path: str, gpu: int, options: dict | None = None, marks: dict[str, float] | None = None
) -> BackendBase:
    """Construct the backend of registry factory ``module:function`` on ``gpu``; ``marks`` gets when the factory
    was found (``backend_imported``) and when it returned (``backend_ready``: torch and the vendor bindings
    imported, the CUDA context and handles made)."""
    marks = {} if marks is None else marks
    factory = load_factory(path)
    marks["backend_imported"] = time.time()
    backend = factory(gpu, **(options or {}))
    marks["backend_ready"] = time.time()
    return backend


@contextlib.contextmanager
def claimed_problem(out_dir: Path, problem: GemmProblem) -> Iterator[bool]:
    """Hold ``claims/<id>.lock`` for the block if no other worker holds it (yields False then)."""
    path = out_dir / "claims" / f"{problem_id(problem)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def work(
    backend: BackendBase,
    problems: list[GemmProblem],
    out_dir: Path,
    settings: TuneSettings,
    previous: dict[GemmProblem, ProblemResult],
    previous_from: dict[GemmProblem, str],
    gpu: int,
    buckets: dict[GemmProblem, tuple[int, int]] | None = None,
) -> int:
    """Tune each problem no other worker has claimed, writing each result as it finishes; how many it tuned.
    A grid point's winner (``buckets``: the token counts it serves) is scored over its bucket first."""
    tuned = 0
    for problem in problems:
        with claimed_problem(out_dir, problem) as mine:
            if not mine or result_path(out_dir, problem).exists():
                continue
            for result in tune(backend, [problem], settings, previous, previous_from):
                start = time.monotonic()
                bucket = (buckets or {}).get(problem)
                result = bucket_score.score(backend, result, bucket, settings, previous.get(problem))
                result.tuning_s += time.monotonic() - start
                result.timeline.update(gpu=gpu, pid=os.getpid())
                atomic_write_json(result_path(out_dir, result.problem), result.to_json())
                tuned += 1
                speed = f" x{result.speedup:.3f}" if result.speedup else ""
                status = result.skipped or (result.errors[0] if result.errors else f"{result.winner}{speed}")
                log.info(
                    "%s %sx%sx%s: %s",
                    result.problem.op,
                    result.problem.m,
                    result.problem.n,
                    result.problem.k,
                    status,
                )
    return tuned


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("shard")
    parser.add_argument("out_dir")
    parser.add_argument("--gpus", default="0")
    parser.add_argument("--name", default="shard0", help="this worker's files under shards/")
    parser.add_argument(
        "--spawned-at", type=float, default=None, help="when the stage started this process (epoch s), for the timeline"
    )
    args = parser.parse_args(argv)
    started = time.time()
    spec = json.loads(Path(args.shard).read_text())
    out_dir = Path(args.out_dir)
    problems = pending([GemmProblem.from_dict(p) for p in spec["problems"]], out_dir)
    settings = TuneSettings(**spec["settings"])
    previous, previous_from, sources = {}, {}, spec.get("previous_from") or {}
    for pid, data in spec.get("previous", {}).items():
        result = ProblemResult.from_json(data)
        previous[result.problem] = result
        previous_from[result.problem] = sources.get(pid, "")
    buckets = {
        problem: tuple(spec["buckets"][problem_id(problem)])
        for problem in problems
        if problem_id(problem) in spec.get("buckets", {})
    }
    marks = {"spawned": args.spawned_at or started, "started": started}
    with gpu_slot(lock_dir(), [int(g) for g in args.gpus.split(",")]) as gpu:
        marks["slot_claimed"] = time.time()
        backend = load_backend(spec["backend"], gpu, spec.get("backend_options"), marks)
        runtime = backend.runtime()
        if runtime:
            atomic_write_json(out_dir / RUNTIME, runtime)
        backend.prepare()
        marks["prepared"] = time.time()
        try:
            tuned = work(backend, problems, out_dir, settings, previous, previous_from, gpu, buckets)
        finally:
            backend.close()
    atomic_write_json(
        Path(args.shard).with_name(f"{args.name}.timeline.json"),
        {"gpu": gpu, "pid": os.getpid(), "problems": tuned, **marks, "done": time.time()},
    )
    return 0

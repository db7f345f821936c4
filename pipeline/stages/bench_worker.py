"""One Bench worker: claim a free GPU, tune a shard's problems, write each result as it finishes.

    python -m pipeline.stages bench-worker SHARD.json OUT_DIR --gpus 0,1
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Sequence
from pathlib import Path

from ..atomic import atomic_write_json
from ..backends.base import ProblemResult, TuneSettings, tune
from ..backends.slots import gpu_slot, lock_dir
from ..problem import GemmProblem
from .bench import RUNTIME, pending, result_path


def load_backend(path: str, gpu: int, options: dict | None = None):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)(gpu, **(options or {}))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("shard")
    parser.add_argument("out_dir")
    parser.add_argument("--gpus", default="0")
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.shard).read_text())
    out_dir = Path(args.out_dir)
    problems = pending([GemmProblem.from_dict(p) for p in spec["problems"]], out_dir)
    settings = TuneSettings(**spec["settings"])
    previous = {}
    for data in spec.get("previous", {}).values():
        result = ProblemResult.from_json(data)
        previous[result.problem] = result
    with gpu_slot(lock_dir(), [int(g) for g in args.gpus.split(",")]) as gpu:
        backend = load_backend(spec["backend"], gpu, spec.get("backend_options"))
        runtime = getattr(backend, "runtime", lambda: {})()
        if runtime:
            atomic_write_json(out_dir / RUNTIME, runtime)
        for result in tune(backend, problems, settings, previous, spec.get("previous_from") or ""):
            atomic_write_json(result_path(out_dir, result.problem), result.to_json())
            speed = f" x{result.speedup:.3f}" if result.speedup else ""
            status = result.skipped or (result.errors[0] if result.errors else f"{result.winner}{speed}")
            print(f"{result.problem.op} {result.problem.m}x{result.problem.n}x{result.problem.k}: {status}",
                  flush=True)
    return 0


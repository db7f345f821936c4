"""Multi-GPU scaling of the Bench stage: the same problem set tuned with ``--gpus 1, 2, 4, 8`` on one machine,
each in a fresh run directory (so no cache helps), through the real ``luigi --module pipeline Bench``.

Reported per GPU count: wall time of the luigi process and of the Bench stage (first worker spawned to last
worker done), problems per minute, the scaling ratio against one GPU, and per GPU a timeline: worker
start-up (spawn to backend ready), busy time (sum of its problems' tuning times), busy share of the stage,
and when it finished (stragglers show as an early finish on some GPUs). Winners are checked against the
one-GPU run: the same solution, or speedups within ``--noise`` of each other.

    python bench/scaling.py --backend cublaslt --gpus 1 2 4 8 --out bench/results/scaling_cublaslt.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.api import GemmProblem, atomic_write_json, format_key, run_process

ROOT = Path(__file__).resolve().parents[1]

PROBLEMS = ROOT / "bench" / "scaling_untuned.csv"


def visible_gpus() -> tuple[int, str]:
    probe = "import torch; print(torch.cuda.device_count()); print(torch.cuda.get_device_name(0))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split("\n")
    return int(out[0]), out[1]


def warm_stack_cache(workdir: Path) -> Path:
    """Probe the stack once (a nightly workdir keeps its probe; every fresh run here gets a copy of it)."""
    cache = workdir / "warm" / "cache" / "stack"
    code = "import sys; from pathlib import Path; from pipeline.api import stack_facts; stack_facts(Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(cache)], check=True)
    return cache


def run_bench(
    workdir: Path, backend: str, gpus: int, time_budget: float, problems: Path, stack_cache: Path | None = None
) -> dict:
    """One Bench run in its own workdir (its own tuned cache); returns its wall time and what its workers
    recorded."""
    run = f"g{gpus}"
    command = [
        sys.executable,
        "-m",
        "luigi",
        "--module",
        "pipeline",
        "Bench",
        "--local-scheduler",
        "--workdir",
        str(workdir),
        "--run-name",
        run,
        "--untuned",
        str(problems),
        "--m-grid",
        "exact",  # the problem set as given: the scaling of these GEMMs, not of a grid around them
        "--backend",
        backend,
        "--gpus",
        str(gpus),
        "--time-budget",
        str(time_budget),
    ]
    env = {**os.environ, "GEMM_TUNE_LOCK_DIR": str(workdir / f"locks-{run}")}
    if stack_cache is not None:
        shutil.copytree(stack_cache, workdir / "cache" / "stack", dirs_exist_ok=True)
    start = time.time()
    proc = run_process(command, env=env)
    wall = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(f"Bench with {gpus} GPUs failed:\n{proc.stderr[-4000:]}")
    bench = workdir / run / "bench"
    results = json.loads((bench / "results.json").read_text())
    workers = [json.loads(p.read_text()) for p in sorted((bench / "shards").glob("*.timeline.json"))]
    return {"wall_s": wall, "started": start, "results": results, "workers": workers}


STARTUP_PHASES = (
    ("python_s", "spawned", "started"),
    ("slot_wait_s", "started", "slot_claimed"),
    ("import_s", "slot_claimed", "backend_imported"),
    ("init_s", "backend_imported", "backend_ready"),
    ("prepare_s", "backend_ready", "prepared"),
)


def startup(worker: dict) -> dict:
    """Where a worker's start-up went: Python and the pipeline, the GPU slot, importing the backend (torch,
    bindings), constructing it (CUDA context, handles), its once-per-process measurements."""
    phases = {name: worker[b] - worker[a] for name, a, b in STARTUP_PHASES if a in worker and b in worker}
    ready = worker.get("prepared", worker["backend_ready"])
    return {"startup_s": ready - worker["spawned"], "startup_phases_s": phases, "ready": ready}


def summarize(gpus: int, data: dict) -> dict:
    """Stage wall, throughput and the per-GPU timeline of one run (times relative to the first spawn).
    Outside the stage: ``before_stage_s`` (luigi's start, the shapes, the cache lookups) and
    ``after_stage_s`` (merging the results into the stage's outputs, luigi's exit)."""
    workers, results = data["workers"], data["results"]
    t0, t1 = min(w["spawned"] for w in workers), max(w["done"] for w in workers)
    stage = t1 - t0
    per_gpu = []
    for w in sorted(workers, key=lambda w: w["gpu"]):
        mine = [r for r in results if r.get("timeline", {}).get("pid") == w["pid"]]
        busy = sum(r["tuning_s"] for r in mine)
        start = startup(w)
        per_gpu.append(
            {
                "gpu": w["gpu"],
                "problems": len(mine),
                "startup_s": start["startup_s"],
                "startup_phases_s": start["startup_phases_s"],
                "busy_s": busy,
                "busy_share": busy / stage,
                "ready_at_s": start["ready"] - t0,
                "done_at_s": w["done"] - t0,
            }
        )
    seconds = {
        ",".join(format_key(GemmProblem.from_dict(r["problem"]))): [
            r.get("timeline", {}).get("gpu"),
            round(r["tuning_s"], 3),
        ]
        for r in results
    }
    return {
        "gpus": gpus,
        "problems": len(results),
        "wall_s": data["wall_s"],
        "bench_stage_s": stage,
        "outside_stage_s": data["wall_s"] - stage,
        "before_stage_s": t0 - data["started"],
        "after_stage_s": data["started"] + data["wall_s"] - t1,
        "problems_per_min": 60 * len(results) / data["wall_s"],
        "stage_problems_per_min": 60 * len(results) / stage,
        "finish_spread_s": max(g["done_at_s"] for g in per_gpu) - min(g["done_at_s"] for g in per_gpu),
        "per_gpu": per_gpu,
        "problem_gpu_and_s": seconds,
    }


def agreement(base: list[dict], other: list[dict], noise: float) -> dict:
    """How many problems got the same winner, or speedups within ``noise``, as in the one-GPU run."""
    by_key = {json.dumps(r["problem"], sort_keys=True): r for r in base}
    same, close, differ = 0, 0, []
    for r in other:
        b = by_key[json.dumps(r["problem"], sort_keys=True)]
        if r["winner"] == b["winner"]:
            same += 1
        elif abs((r["speedup"] or 1.0) - (b["speedup"] or 1.0)) <= noise * (b["speedup"] or 1.0):
            close += 1
        else:
            differ.append(
                {
                    "problem": r["problem"],
                    "winner": r["winner"],
                    "speedup": r["speedup"],
                    "one_gpu_winner": b["winner"],
                    "one_gpu_speedup": b["speedup"],
                }
            )
    return {"same_winner": same, "within_noise": close, "differ": differ}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cublaslt", choices=["cublaslt", "tunableop", "hipblaslt"])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--time-budget", type=float, default=20.0, help="Bench --time-budget")
    parser.add_argument("--problems", type=Path, default=PROBLEMS)
    parser.add_argument("--noise", type=float, default=0.03, help="speedups this close count as agreeing")
    parser.add_argument("--workdir", type=Path, default=None, help="where the fresh runs go (default: a temp dir)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--device-count",
        type=int,
        default=None,
        help="GPUs to assume instead of asking torch (the AMD tools count their own)",
    )
    args = parser.parse_args()
    count, device = (
        (args.device_count, os.environ.get("GEMM_TUNE_DEVICE_NAME", "unknown")) if args.device_count else visible_gpus()
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gemm-tune-scaling-"))
    runs, raw, skipped = [], {}, []
    result = {
        "benchmark": "bench/scaling.py",
        "device": device,
        "gpus_visible": count,
        "date": datetime.date.today().isoformat(),
        "backend": args.backend,
        "time_budget": args.time_budget,
        "problems_file": str(args.problems.relative_to(ROOT))
        if args.problems.is_relative_to(ROOT)
        else str(args.problems),
        "runs": runs,
        "not_run": skipped,
    }
    stack = warm_stack_cache(workdir)
    for gpus in args.gpus:
        if gpus > count:
            skipped.append({"gpus": gpus, "why": f"{count} GPUs visible on this machine"})
            continue
        raw[gpus] = run_bench(
            workdir / f"{args.backend}-g{gpus}", args.backend, gpus, args.time_budget, args.problems, stack
        )
        run = summarize(gpus, raw[gpus])
        base = runs[0] if runs else run
        one = base["gpus"] == 1
        run["scaling_vs_1"] = base["wall_s"] / run["wall_s"] if one else None
        run["stage_scaling_vs_1"] = base["bench_stage_s"] / run["bench_stage_s"] if one else None
        run["winners_vs_1"] = agreement(raw[base["gpus"]]["results"], raw[gpus]["results"], args.noise)
        runs.append(run)
        atomic_write_json(args.out, result)  # after every run: a cut-off call keeps them
        print(
            f"{args.backend} gpus={gpus}: wall {run['wall_s']:.1f} s, stage {run['bench_stage_s']:.1f} s,"
            f" {run['problems_per_min']:.0f} problems/min",
            flush=True,
        )
    atomic_write_json(args.out, result)
    for run in runs:
        print(
            f"gpus={run['gpus']}: x{run['scaling_vs_1'] or 0:.2f} wall, x{run['stage_scaling_vs_1'] or 0:.2f} stage; "
            + ", ".join(
                f"gpu{g['gpu']} busy {100 * g['busy_share']:.0f}% done@{g['done_at_s']:.0f}s" for g in run["per_gpu"]
            )
        )
        phases = run["per_gpu"][0]["startup_phases_s"]
        print(
            f"  outside the stage: {run['before_stage_s']:.1f} s before, {run['after_stage_s']:.1f} s after; gpu0 "
            f"start-up {run['per_gpu'][0]['startup_s']:.1f} s = "
            + " + ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in phases.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

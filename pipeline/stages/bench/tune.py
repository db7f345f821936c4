"""The Bench stage: shard problems by estimated cost, one worker process per GPU, resumable outputs.

Each worker claims a GPU slot with an exclusive lock (``lock_dir()/gpu<N>.lock``, machine-wide), so
concurrent runs never share a GPU, and writes every problem's result atomically to ``problems/<id>.json``
as soon as it is done: a rerun skips finished problems (and so finished shards), a failing problem is recorded while the
others finish. Afterwards the results become ``results.json``, a ``tunableop_results.csv`` and Equality
logic files (``logic/``), plus ``summary.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from ... import procs
from ...atomic import atomic_directory, atomic_write_json, atomic_write_text
from ...backends.base import DEFAULT, ProblemResult, TuneSettings
from ...errors import ToolError
from ...formats.hipblaslt_override import parse_override, write_override
from ...formats.logic import dump_logic, record_equality
from ...formats.rocm import problem_type_name
from ...formats.tunableop import TunableOpEntry, format_key, write_file
from ...problem import GemmProblem
from ...procs import tail_lines
from ...stats import geomean
from ..run.layout import OVERRIDE, RUNTIME
from . import bucket_score, own_kernels

TOOL_LOGIC = "logic-tool"  # logic a vendor tool wrote (find_exact, TensileLite): replaces the winners' records


class BenchError(ToolError):
    """A Bench worker failed, or problems were left without a result."""


def problem_id(problem: GemmProblem) -> str:
    return hashlib.sha1(",".join(format_key(problem)).encode()).hexdigest()[:16]


def result_path(out_dir: Path, problem: GemmProblem) -> Path:
    return out_dir / "problems" / f"{problem_id(problem)}.json"


def estimate_cost(problem: GemmProblem) -> float:
    """Rough seconds to tune: a fixed search overhead plus the work of ~100 timed candidate calls."""
    return 1.0 + 100 * problem.flops() / 5e14


def shard(problems: Sequence[GemmProblem], count: int, by_weight: bool = False) -> list[list[GemmProblem]]:
    """Longest-processing-time-first split into ``count`` shards of similar estimated cost; ``by_weight`` (an M
    grid) keeps a weight's token counts (its ``token_family``) in one shard: Bench's second pass over a grid
    starts a count from the winner of its own weight's anchors (``grid_seeds``), which a shard reads only from
    what it tuned itself, so a fleet tunes as one worker does."""
    units: dict[GemmProblem, list[GemmProblem]] = {}
    for problem in sorted(problems, key=lambda p: (-estimate_cost(p), p.sort_key())):
        units.setdefault((by_weight and problem.token_family()) or problem, []).append(problem)
    shards: list[list[GemmProblem]] = [[] for _ in range(max(1, count))]
    loads = [0.0] * len(shards)
    for unit in sorted(units.values(), key=lambda u: (-sum(map(estimate_cost, u)), u[0].sort_key())):
        i = loads.index(min(loads))
        shards[i] += unit
        loads[i] += sum(map(estimate_cost, unit))
    return [sorted(s, key=lambda p: (-estimate_cost(p), p.sort_key())) for s in shards if s]


def shard_plan(problems: Sequence[GemmProblem], count: int, by_weight: bool = False) -> dict:
    """The plan of a sharded Bench: ``count`` cost-balanced shards (empty ones kept, so every index exists), a
    weight's counts together over an M grid (``by_weight``, ``shard``)."""
    shards = shard(problems, count, by_weight)
    shards += [[] for _ in range(count - len(shards))]
    return {"shards": [[p.to_dict() for p in part] for part in shards]}


def plan_shard(plan_path: Path, index: int) -> list[GemmProblem]:
    return [GemmProblem.from_dict(d) for d in json.loads(Path(plan_path).read_text())["shards"][index]]


def pending(problems: Sequence[GemmProblem], out_dir: Path) -> list[GemmProblem]:
    return [p for p in problems if not result_path(out_dir, p).exists()]


def run_shards(
    problems: Sequence[GemmProblem],
    out_dir: Path,
    gpus: Sequence[int],
    settings: TuneSettings,
    factory: str,
    progress: Callable[[int, int], None] | None = None,
    backend_options: dict | None = None,
    previous: dict[str, dict] | None = None,
    previous_from: dict[str, str] | None = None,
    name: str = "shard",
    buckets: dict[GemmProblem, tuple[int, int]] | None = None,
) -> None:
    """Tune every problem without a result yet: one worker process per GPU, all pulling from one queue,
    costliest first (each claims a problem with a lock the kernel drops if it dies, so none is tuned twice
    and no GPU idles while another has a backlog). ``factory`` is the backend's ``module:function`` (its
    ``registry.BackendEntry.factory_path``), ``backend_options`` its arguments besides the GPU (e.g.
    ``bench``); ``previous`` the winners to re-time first and ``previous_from`` the stack each was tuned
    under (both by problem id; ``base.CACHED``: this stack's own cache); ``name`` prefixes the worker files
    under ``shards/`` (concurrent callers on one directory use their own); ``buckets`` the token counts each
    grid point's winner serves (``bucket_score``)."""
    out_dir = Path(out_dir).absolute()
    todo = sorted(pending(problems, out_dir), key=lambda p: (-estimate_cost(p), p.sort_key()))
    queue = out_dir / "shards" / f"{name}queue.json"
    previous, todo_set = previous or {}, set(todo)
    carried = [problem_id(p) for p in todo if problem_id(p) in previous]  # the winners to re-time, costliest first
    atomic_write_json(
        queue,
        {
            "problems": [p.to_dict() for p in todo],
            "settings": asdict(settings),
            "backend": factory,
            "backend_options": backend_options or {},
            "previous": {pid: previous[pid] for pid in carried},
            "previous_from": {pid: (previous_from or {}).get(pid, "") for pid in carried},
            "buckets": {problem_id(p): list(b) for p, b in (buckets or {}).items() if p in todo_set},
        },
    )
    with contextlib.ExitStack() as stack:  # a failure here, or this run's death, kills every worker
        workers = []
        for index in range(min(len(gpus), len(todo))):
            log = stack.enter_context((out_dir / "shards" / f"{name}{index}.log").open("w"))
            gpu_list, shard_name = ",".join(map(str, gpus)), f"{name}{index}"
            spawned = repr(time.time())
            worker = procs.running_worker(
                log, "bench-worker", queue, out_dir, "--gpus", gpu_list, "--name", shard_name, "--spawned-at", spawned
            )
            workers.append(stack.enter_context(worker))
        while running := [proc for proc in workers if proc.poll() is None]:
            if progress:
                progress(len(problems) - len(pending(problems, out_dir)), len(problems))
            procs.exited_within(running[0], 0.2)
    failed = []
    for index, proc in enumerate(workers):
        if proc.returncode != 0:
            tail = tail_lines((out_dir / "shards" / f"{name}{index}.log").read_text(), 15)
            failed.append(f"shard {index} worker exited with code {proc.returncode}:\n{tail}")
    left = pending(problems, out_dir)
    if failed or left:
        raise BenchError("\n".join(failed) + f"\n{len(left)} problems have no result; rerun to resume")


def tunableop_entries(results: Sequence[ProblemResult]) -> list[TunableOpEntry]:
    """One results row per tuned problem: the winner (or ``Default``) and its time in ms."""
    return [
        TunableOpEntry.from_problem(r.problem, r.winner, r.winner_us / 1000.0)
        for r in results
        if not r.skipped and not r.errors and r.winner_us
    ]


def logic_files(results: Sequence[ProblemResult], runtime: dict) -> dict[str, str]:
    """Equality logic per ProblemType, of the winners that beat the default, named by backend (the cuBLASLt
    container on NVIDIA; on AMD the hipBLASLt solution index and name of each winner)."""
    backend = runtime.get("backend", "cublaslt")
    arch = runtime.get("arch") or f"sm_{runtime.get('capability', '').replace('.', '')}"
    groups: dict[str, list[ProblemResult]] = defaultdict(list)
    for r in results:
        if r.has_winner:
            groups[problem_type_name(r.problem)].append(r)
    files = {}
    for name, group in sorted(groups.items()):
        p = group[0].problem
        problem_type = {
            "OperationType": "GEMM",
            "DataType": p.a_type,
            "DestDataType": p.c_type,
            "ComputeDataType": p.compute_type,
            "TransposeA": p.transa == "T",
            "TransposeB": p.transb == "T",
            "UseBias": p.op == "gemm_and_bias",
            "Batched": True,
        }
        winners = [
            (
                (r.problem.m, r.problem.n, r.problem.batch, r.problem.k),
                r.record.solution,
                r.problem.flops() / (r.winner_us * 1e3),
            )
            for r in group
        ]
        logic = record_equality(backend, problem_type, arch, [runtime.get("name", "unknown")], winners)
        files[f"{backend}_{name}.yaml"] = dump_logic(logic)
    return files


def override_text(results: Sequence[ProblemResult]) -> tuple[str | None, list[str]]:
    """The hipBLASLt override file of the winners (``Git Version:`` first), and where its rows came from."""
    winners = [r for r in results if r.has_winner and r.record.override_rows]
    if not winners:
        return None, []
    git = winners[0].record.library_git or "unknown"
    sources = sorted({r.record.override_source for r in winners})
    return f"Git Version: {git}\n" + "".join(r.record.override_rows for r in winners), sources


def summarize(results: Sequence[ProblemResult]) -> dict:
    tuned = [r for r in results if not r.skipped and not r.errors and r.speedup]
    speedups = [r.speedup for r in tuned]
    origins = [r.origin.split(":")[0].split(" ")[0] or "tuned" for r in results if not r.skipped and not r.errors]
    return {
        "problems": len(results),
        "tuned": len(tuned),
        "origin": {name: origins.count(name) for name in ("tuned", "cache", "retimed", "retuned")},
        "improved": sum(r.winner != DEFAULT for r in tuned),
        "geomean_speedup": geomean(speedups),
        "skipped": [{"problem": ",".join(format_key(r.problem)), "reason": r.skipped} for r in results if r.skipped],
        "errors": [{"problem": ",".join(format_key(r.problem)), "error": r.errors[0]} for r in results if r.errors],
        "tuning_s": sum(r.tuning_s for r in results),
        "buckets": bucket_score.summary(results),
        "tensile": [
            {
                "problem": ",".join(format_key(r.problem)),
                "kernel": c.name,
                "tensile_us": c.final_us,
                "heuristic_us": r.default_us,
                "speedup": r.default_us / c.final_us,
            }
            for r in results
            for c in r.candidates
            if (c.config or {}).get("Tuner") == "tensile" and r.default_us and c.final_us
        ],
    }


def files_to_merge(out_dir: Path) -> list[str]:
    """What MergeResults merges of Bench's outputs by default: the results file, and the override file where the
    backend wrote one (hipBLASLt)."""
    return [str(out_dir / "tunableop_results.csv"), *([str(out_dir / OVERRIDE)] * (out_dir / OVERRIDE).exists())]


def write_outputs(problems: Sequence[GemmProblem], out_dir: Path, triton: dict | None = None) -> dict:
    """results.json, tunableop_results.csv, logic/*.yaml and summary.json (written last) from the results;
    ``triton``: ``{"backend": name, "amd": bool}`` where the run asked for ``--triton`` (``own_kernels``)."""
    texts = [result_path(out_dir, p).read_text() for p in problems]
    searched = [ProblemResult.from_json(json.loads(text)) for text in texts]
    tuned = set(problems)  # a row below is never one of them (every count the workload ran is a grid point)
    below = [r for r in bucket_score.rows_below(searched) if r.problem not in tuned]  # rows of their own
    results = [*searched, *below]
    texts += [json.dumps(r.to_json(), indent=1) for r in below]
    runtime = json.loads((out_dir / RUNTIME).read_text()) if (out_dir / RUNTIME).exists() else {}
    atomic_write_text(out_dir / "results.json", "[\n" + ",\n".join(t.strip() for t in texts) + "\n]\n")
    validators = runtime.get("validators") or {"PT_VERSION": runtime.get("pt_version", "unknown")}
    write_file(out_dir / "tunableop_results.csv", validators, tunableop_entries(results))
    with atomic_directory(out_dir / "logic") as staging:
        tool_logic = out_dir / TOOL_LOGIC
        files = (
            {p.name: p.read_text() for p in sorted(tool_logic.glob("*.yaml"))}
            if tool_logic.is_dir()
            else logic_files(results, runtime)
        )
        for name, text in files.items():
            atomic_write_text(staging / name, text)
    text, sources = override_text(results)
    if text is not None:
        override = parse_override(text, str(out_dir / OVERRIDE))
        write_override(out_dir / OVERRIDE, override.git_version, override.entries)
    summary = {**summarize(searched), "runtime": runtime, "override_source": sources}
    if triton is not None:
        summary["triton"] = own_kernels.summary(searched, triton["backend"], triton["amd"])
    atomic_write_json(out_dir / "summary.json", summary)
    return summary

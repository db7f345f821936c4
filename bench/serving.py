"""The serving targets (docs/serving.md), measured as a user runs them: for each model and dtype, the job collects a
HuggingFace decoder served as a server schedules it (``pipeline.workloads.serve``) on one seed, tunes it over an M
grid, and its end-to-end A/B serves another seed with CUDA-graph decode; then the same bundle is A/B'd with eager
decode through ``pipeline.runtime``. One record:

    python3 bench/serving.py --models llama3-8b,qwen2-7b --dtypes bf16,fp8 --gpus 4 \\
        --out bench/results/serving_<gpu>_<date>.json

Per model, dtype and arm (``graphs``, ``eager``): ``coverage`` (the share of GEMM time at token counts the
collection never saw that ran a tuned choice, a roofline estimate), ``held_out_worst`` (the lowest speedup Validate
measured at a held-out count inside the ranges the bundle serves, after it split the buckets that lost; the lowest
before the splits beside it), tokens/s both ways with their ratio and the interval of the paired ratio (and,
where it is wider than 3%, ``pairs_to_resolve``: about how many alternations its spread needs), p99 step
latency both ways; per model and dtype the job's verdict, its Bench time and GPUs. The eager row adds
``host_budget``: the runtime's host time a run against the GPU time its rows save (Validate's medians), and
``host_bound``, the gate's words where the host time is the larger and the A/B saw no gain (None where it pays).
``targets`` says which of the issue's targets each row meets. The record is written again as each row is measured
(``complete`` false until the last), so an interrupted run keeps what it finished (a job stopped by ``--timeout``
inside its A/B leaves a row of the alternations it finished, marked ``unfinished``, with its ``runs``); run again
with the same ``--workdir``, it resumes: each job where Luigi left it, each A/B at its first unfinished alternation.
``--arms graphs`` leaves out the eager A/B. Each job's log is ``<workdir>/<model>-<dtype>.log``.
The job runs with ``--allow-e2e-regression`` so that a refused bundle is still measured eager (the
verdict says it was refused).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from pipeline.api import (
    CAPTURE_SIZES,
    INPUT,
    BadInput,
    ab_budget_line,
    ab_host_budget,
    ab_interrupted,
    ab_pairs_needed,
    ab_test,
    atomic_write_json,
    claim_output_file,
    load_json,
    note_written,
    padded_size,
    run_process,
    runtime_flags,
    tail_lines,
)

TARGETS = {"coverage": 0.95, "held_out_worst": 0.99, "graphs": 1.05, "eager": 1.00}
DTYPES = ("bf16", "fp8")
ARMS = ("graphs", "eager")


def serve_command(model: str, dtype: str, seed: int, args: argparse.Namespace, *extra: str) -> str:
    """The serving workload's command line for one model, dtype and request seed."""
    parts = [
        "python3 -m pipeline.workloads.serve",
        f"--arch {model} --layers {args.layers} --seed {seed} --requests {args.requests}",
        f"--max-seqs {args.max_seqs} --prompt-max {args.prompt_max} --output-max {args.output_max}",
        f"--max-batched-tokens {args.max_batched_tokens}",
        *([f"--max-capture {args.max_capture}"] if args.max_capture else []),
        *(["--fp8"] if dtype == "fp8" else []),
        *(["--compile"] if args.compile else []),
        *extra,
    ]
    return " ".join(parts)


def job_command(model: str, dtype: str, workdir: Path, args: argparse.Namespace) -> list[str]:
    """The job: collect on seed 1, A/B on seed 2 with graph decode, over ``--m-grid``."""
    return [
        sys.executable, "-m", "luigi", "--module", "pipeline", "TuneWorkload", "--local-scheduler",
        "--workdir", str(workdir), "--run-name", f"{model}-{dtype}",
        "--workload-cmd", serve_command(model, dtype, 1, args),
        "--e2e-cmd", serve_command(model, dtype, 2, args, f"--repeat {args.passes}"),
        "--m-grid", args.m_grid, "--gpus", str(args.gpus), "--allow-e2e-regression",
        "--e2e-reps", str(args.e2e_reps), "--validate-rounds", str(args.validate_rounds),
        *(["--e2e-graphs-only"] if args.graphs_only else []),
        *(["--e2e-parallel"] if args.e2e_parallel else []),
        *(["--grid-budget", str(args.grid_budget)] if args.grid_budget else []),
        *(["--e2e-max-reps", str(args.e2e_max_reps)] if args.e2e_max_reps else []),
    ]  # fmt: skip


def arm_row(model: str, dtype: str, arm: str, e2e: dict, held: dict | None) -> dict:
    """One record row from an A/B outcome (``e2e.ab_test``'s) and Validate's held-out record."""
    coverage = e2e.get("coverage") or {}
    base, tuned = e2e.get("baseline") or {}, e2e.get("tuned") or {}
    side = {k: e2e[k] for k in ("parallel_gpus", "by_gpu") if e2e.get(k)}  # --e2e-parallel: each GPU's pairs
    budget = {}  # the runtime's host time against the GPU time it saves, and the gate's words where it cannot pay
    if e2e.get("host_budget"):
        budget = {"host_budget": e2e["host_budget"], "host_bound": ab_budget_line(e2e).removeprefix("; ") or None}
    return {
        "model": model,
        "dtype": dtype,
        "arm": arm,
        "coverage": coverage.get("tuned_share_of_time"),
        "coverage_calls": coverage.get("tuned_share_of_calls"),
        "unseen_calls": coverage.get("unseen_calls"),
        "coverage_counted": "graph captures only" if coverage.get("graphs_only") else "every call",
        "held_out_worst": ((held or {}).get("worst_shipped") or {}).get("speedup"),  # inside what ships
        "held_out_worst_before_splits": ((held or {}).get("worst") or {}).get("speedup"),
        "tokens_per_s": {"baseline": base.get("median_tokens_per_s"), "tuned": tuned.get("median_tokens_per_s")},
        "speedup": e2e.get("tokens_speedup"),
        "interval": e2e.get("interval"),
        "resolved": e2e.get("resolved"),
        "pairs_to_resolve": ab_pairs_needed(e2e),  # about how many alternations its spread needs (None: resolved)
        "p99_ms": {"baseline": base.get("median_p99_ms"), "tuned": tuned.get("median_p99_ms")},
        "decode_tokens_per_s": {
            "baseline": base.get("median_decode_tokens_per_s"),
            "tuned": tuned.get("median_decode_tokens_per_s"),
        },
        "decode_speedup": e2e.get("decode_speedup"),
        "decode_interval": e2e.get("decode_interval"),
        "reps": e2e.get("reps"),
        **budget,
        **side,
        **({"runs": e2e["runs"]} if e2e.get("runs") else {}),  # what the record's figures are recomputed from
    }


def targets(row: dict) -> dict[str, bool | None]:
    """Which targets a row meets (None: not measured): coverage, the worst held-out count, tokens/s for its arm
    (the whole pass, and the decode steps alone: a server's steady state, which the eager prefill's spread does
    not blur), and p99 step latency no worse than the baseline's beyond the A/B's interval."""
    speedup, interval, p99 = row["speedup"], row["interval"], row["p99_ms"]
    slack = (interval[1] - interval[0]) if interval else 0.0

    def at_least(value: float | None, floor: float) -> bool | None:
        return None if value is None else value >= floor

    return {
        "coverage": at_least(row["coverage"], TARGETS["coverage"]),
        "held_out_worst": at_least(row["held_out_worst"], TARGETS["held_out_worst"]),
        "tokens_per_s": at_least(speedup, TARGETS[row["arm"]]),
        "decode_tokens_per_s": at_least(row.get("decode_speedup"), TARGETS[row["arm"]]),  # the steady state
        "p99": None if None in p99.values() else p99["tuned"] <= p99["baseline"] * (1 + slack),
    }


def json_or_none(path: Path) -> dict | None:
    """A record a job writes when its stage gets that far: its content (a corrupt one is named, with its line),
    or None where it is not there."""
    return load_json(path) if path.exists() else None


def bench_figures(run: Path) -> dict:
    """What Bench's own record says once Bench has run (``bench/summary.json``; nothing before): its problems, its
    tuning seconds summed over the problems, and how each result came (``origin``: searched, from this stack's
    cache, ``retimed``: a neighbour's or an earlier stack's winner that still won, ``retuned``: searched after it
    lost)."""
    summary = json_or_none(run / "bench" / "summary.json")
    if summary is None:
        return {}
    return {
        "bench_problems": summary.get("problems"),
        "bench_tuning_s": summary.get("tuning_s"),
        "bench_origin": summary.get("origin"),
    }


def run_dir_figures(run: Path) -> tuple[dict, dict | None, dict, Path]:
    """A finished job's A/B, held-out record, report summary and bundle (a refused one where it was refused)."""
    validate = run / "validate"
    e2e = json.loads((validate / "e2e.json").read_text())
    held = json_or_none(validate / "held_out.json")
    summary = json.loads((run / "report" / "summary.json").read_text())
    bundle = run / "bundle" if (run / "bundle").is_dir() else run / "bundle.refused"
    return e2e, held, summary, bundle


def measure(model: str, dtype: str, workdir: Path, args: argparse.Namespace) -> Iterator[dict]:
    """The job and the eager A/B of one model and dtype: its rows (those of ``args.arms``), each as it is
    measured. A job that stops (``--timeout``, a failure) inside its A/B leaves its ``unfinished_row`` first."""
    log = workdir / f"{model}-{dtype}.log"
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        code = run_process(job_command(model, dtype, workdir, args), timeout_s=args.timeout, log=log).returncode
        why = f"the job exited {code}"
    except subprocess.TimeoutExpired:
        code, why = None, f"the job ran past --timeout {args.timeout:.0f} s"
    run = workdir / f"{model}-{dtype}"
    if code != 0 or not (run / "report" / "summary.json").exists():
        stopped = unfinished_row(model, dtype, run, args, why)
        if stopped is not None:
            yield stopped
        tail = tail_lines(log.read_text(errors="replace"), 30)
        raise RuntimeError(f"{model} {dtype}: {why} (its log: {log}):\n{tail}")
    e2e, held, summary, bundle = run_dir_figures(run)
    job = {
        "verdict": summary.get("verdict"),
        "bench_s": (summary.get("stage_seconds") or {}).get("Bench"),
        "gemms": summary.get("gemms"),
        "kept": summary.get("kept"),
        **bench_figures(run),
    }
    if "graphs" in args.arms:
        row = arm_row(model, dtype, "graphs", e2e, held)
        yield {**row, "job": job, "targets": targets(row)}
    if "eager" not in args.arms:
        return
    graphs_only = args.graphs_only or args.eager_graphs_only
    eager = ab_test(
        ["bash", "-c", serve_command(model, dtype, 2, args, f"--eager --repeat {args.passes}")],
        bundle / "tunableop_results.csv",
        run / ("eager-ab-graphs-only" if graphs_only else "eager-ab"),  # each mode's runs and records apart
        args.eager_reps,
        args.timeout,
        via="runtime",
        max_reps=args.eager_max_reps or None,
        runtime_flags=runtime_flags(graphs_only),
    )
    budget = ab_host_budget(eager, run)  # the runtime's host time a run against the GPU time its rows save
    row = arm_row(model, dtype, "eager", {**eager, **({"host_budget": budget} if budget else {})}, held)
    yield {**row, "job": job, "targets": targets(row)}


def unfinished_row(model: str, dtype: str, run: Path, args: argparse.Namespace, why: str) -> dict | None:
    """The graphs row of a job stopped inside its end-to-end A/B, from the alternations it finished (a rerun with
    the same ``--workdir`` goes on from them): marked ``unfinished``, with its ``runs`` and the gate's verdict;
    None where no alternation finished."""
    ab = next(filter(None, map(ab_interrupted, sorted((run / "validate").glob("e2e*")))), None)
    if ab is None:
        return None
    held = json_or_none(run / "validate" / "held_out.json")
    gate = json_or_none(run / "validate" / "gate.json") or {}
    row = arm_row(
        model, dtype, "graphs", {**ab, "coverage": ab.get("coverage") or {"graphs_only": args.graphs_only}}, held
    )
    job = {"verdict": gate.get("message"), "bench_s": None, "gemms": None, "kept": len(gate.get("kept", []))}
    job.update(bench_figures(run))
    stopped = {"unfinished": f"{why}, after {ab['reps']} alternations", "runs": ab["runs"]}
    return {**row, "job": job, "targets": targets(row), **stopped}


def recorded(out: Path, record: dict, rows: Iterable[dict]) -> dict:
    """``record`` with ``rows`` appended, written to ``out`` after each row (``complete`` false) and once more at
    the end (``complete`` true): what is measured is kept, whatever stops the run later."""
    for row in rows:
        record["rows"].append(row)
        atomic_write_json(out, record)
        note_written(out)
    record["complete"] = True
    atomic_write_json(out, record)
    note_written(out)
    return record


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="llama3-8b,qwen2-7b")
    parser.add_argument("--dtypes", default="bf16,fp8")
    parser.add_argument(
        "--layers",
        type=int,
        default=0,
        help="decoder layers (default 0: the released model's, whose decode steps spend their time on the GPU, "
        "mostly in GEMMs; with 2 layers a step is mostly host time and tokens/s hardly sees the GEMMs: "
        "docs/serving.md)",
    )
    # the request mix of the record's rows; a vLLM-sized one (--requests 128 --max-seqs 32 --prompt-max 512
    # --output-max 128 --max-batched-tokens 512) runs every capture size to 512: a 454-GEMM grid for the Qwen2-7B
    # shape in FP8, about 30 minutes of Bench on one GPU, 26 under --grid-budget 10 (measured: docs/serving.md)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-seqs", type=int, default=8)
    parser.add_argument("--prompt-max", type=int, default=64)
    parser.add_argument("--output-max", type=int, default=32)
    parser.add_argument("--max-batched-tokens", type=int, default=64)
    parser.add_argument(
        "--max-capture",
        type=int,
        help="the workload's --max-capture, the largest step (tokens) served as a CUDA graph. Default: every step "
        "(--max-batched-tokens + --max-seqs, up to 512), as vLLM at its default 256 sequences captures every step "
        "up to 512 tokens; 0: the workload's default (vLLM's rule, twice --max-seqs)",
    )
    parser.add_argument("--m-grid", default="serving")
    parser.add_argument("--gpus", type=int, default=0, help="Bench's GPUs (0: every visible one)")
    parser.add_argument(
        "--grid-budget",
        type=float,
        default=0.0,
        help="the job's --grid-budget: minutes of Bench the grid may cost, its finest points the workload did not "
        "run dropped first (0: no bound; the job prints the grid's estimate before Bench)",
    )
    parser.add_argument(
        "--graphs-only",
        action="store_true",
        help="apply the bundle with pipeline.runtime --graphs-only in both arms (the job's --e2e-graphs-only): "
        "only the GEMMs captured into CUDA graphs are routed, so eager decode meets no runtime",
    )
    parser.add_argument(
        "--eager-graphs-only",
        action="store_true",
        help="the eager A/B alone applies the bundle with pipeline.runtime --graphs-only, as the eager row's "
        "host_bound advises; the job keeps its own A/B (changing the job's --e2e-graphs-only would redo Validate)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="serve with the layers compiled (the workload's --compile, in collection and every A/B), as vLLM "
        "serves by default: the layers' elementwise work fused, so a step is mostly its GEMMs",
    )
    parser.add_argument(
        "--arms", default=",".join(ARMS), help="graphs, eager or both: eager is the same bundle A/B'd with eager decode"
    )
    parser.add_argument("--eager-reps", type=int, default=3)
    parser.add_argument(
        "--eager-max-reps", type=int, default=0, help="the eager A/B's alternations at most (0: as the job's A/B)"
    )
    parser.add_argument("--e2e-reps", type=int, default=3, help="the job's end-to-end alternations (at least)")
    parser.add_argument(
        "--e2e-max-reps", type=int, default=0, help="the job's end-to-end alternations at most (0: the job's default)"
    )
    parser.add_argument("--validate-rounds", type=int, default=7, help="the job's interleaved rounds per GEMM")
    parser.add_argument(
        "--e2e-parallel",
        action="store_true",
        help="the job's A/B runs its alternations side by side, one on each of --gpus (the job's --e2e-parallel)",
    )
    parser.add_argument(
        "--passes",
        type=int,
        default=3,
        help="timed passes of an A/B run (the workload's --repeat; its median is the run's figure): a pass of the "
        "compiled Llama-3-8B shape is 0.4 s of a 24 s run on the H200, the rest start-up",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds a job or a run may take")
    parser.add_argument("--workdir", default="", help="the jobs' workdir (default: a fresh temporary directory)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--force", action="store_true", help="replace an --out that gemm-tune did not write")
    args = parser.parse_args(argv)
    if args.max_capture is None:
        args.max_capture = padded_size(min(args.max_batched_tokens + args.max_seqs, CAPTURE_SIZES[-1]))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        out = claim_output_file(args.out, [], args.force)
        for option, value, allowed in (("--dtypes", args.dtypes, DTYPES), ("--arms", args.arms, ARMS)):
            wrong = [d for d in value.split(",") if d not in allowed]
            if wrong:
                raise BadInput(f"{option} {value!r}: {', '.join(wrong)} not one of {', '.join(allowed)}")
    except BadInput as err:
        print(f"serving: {err}", file=sys.stderr)
        return INPUT
    import torch

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gemm-tune-serving-")).absolute()
    record = {
        "benchmark": "bench/serving.py",
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(0),
        "gpus": args.gpus or torch.cuda.device_count(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "workdir", "force")},
        "targets": TARGETS,
        "complete": False,
        "rows": [],
    }
    measured = (
        row
        for model in args.models.split(",")
        for dtype in args.dtypes.split(",")
        for row in measure(model, dtype, workdir, args)
    )
    for row in recorded(out, record, measured)["rows"]:
        print(f"{row['model']} {row['dtype']} {row['arm']}: {row['targets']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

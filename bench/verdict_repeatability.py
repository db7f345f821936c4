"""How repeatable is one A/B verdict of a tuned GEMM against torch's default? The same pair measured several
times, each on fresh operands, with the product's timer (``GraphTimer``: CUDA-graph replays over rotating
operand copies, rounds in the order ``interleaved_samples`` gives them), by several estimators and settings.

    python bench/verdict_repeatability.py workdir/<run>/bench/results.json --repeats 5 \\
        --out bench/results/verdict_repeatability_<gpu>_<date>.json

Per winner of the run's Bench and per setting (rounds, work per replay, ``warm_up`` before the rounds or not), the
speedup of each repeat by two estimators: the ratio of the medians (what ``interleaved`` reports) and the
median of the per-round ratios (each round's baseline over the same round's tuned time, adjacent
replays, so slow drifts of the clock cancel). The spread of the repeats (max / min - 1) says which estimator
agrees with itself within 2%.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from pipeline.atomic import atomic_write_json
from pipeline.backends.base import DEFAULT, ProblemResult, TuneSettings
from pipeline.backends.cublaslt import CublasLtBackend
from pipeline.backends.measure import TimingSettings, device_info, interleaved_samples, rotating_operands

SETTINGS = {  # name: (rounds, min_graph_us, warm-up ms (least, most), idle s before)
    "7x2ms warm200": (7, 2000.0, (200.0, 200.0), 0.0),
    "7x2ms warm200 idle1s": (7, 2000.0, (200.0, 200.0), 1.0),
    "7x2ms warm1000 idle1s": (7, 2000.0, (1000.0, 1000.0), 1.0),
    "7x2ms settled idle1s": (7, 2000.0, TimingSettings().warmup_ms, 1.0),
    "14x2ms settled idle1s": (14, 2000.0, TimingSettings().warmup_ms, 1.0),
}


def one(backend: CublasLtBackend, result: ProblemResult, timing: TimingSettings, idle_s: float, seed: int) -> dict:
    """One A/B of the default and the winner on fresh operands (``seed``), after ``idle_s`` of an idle GPU (as
    between a stage's rows): both estimators, and the SM clock (MHz, NVML) when the rounds ended."""
    time.sleep(idle_s)
    problem = result.problem
    workspace = torch.empty(TuneSettings().workspace_bytes, dtype=torch.uint8, device=backend.device)
    tuned, gemm = backend.launcher_for(problem, result.record.solution, workspace)
    default, _ = backend.launcher_for(problem, None, workspace)
    sets = rotating_operands(problem, backend.device, dataclasses.replace(timing, seed=seed))
    samples = interleaved_samples(problem, {DEFAULT: default, "tuned": tuned}, sets, timing)
    gemm.close()
    base, tuned_us = samples[DEFAULT], samples["tuned"]
    return {
        "ratio_of_medians": statistics.median(base) / statistics.median(tuned_us),
        "median_of_ratios": statistics.median(b / t for b, t in zip(base, tuned_us, strict=True)),
        "default_us": statistics.median(base),
        "tuned_us": statistics.median(tuned_us),
        "sm_clock_mhz": clock(),
    }


def clock() -> int | None:
    """The SM clock now (torch's NVML query), None where NVML cannot be had."""
    try:
        return torch.cuda.clock_rate()
    except Exception:  # pynvml missing or refused: the figure is optional
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    results = [ProblemResult.from_json(r) for r in json.loads(args.results.read_text())]
    winners = [r for r in results if r.has_winner][: args.limit]
    backend = CublasLtBackend(0)
    out = {"device": device_info(backend.device), "date": datetime.date.today().isoformat(), "problems": []}
    for result in winners:
        row = {"label": result.problem.label(), "bench_predicted": result.speedup, "settings": {}}
        for name, (rounds, graph_us, warm_ms, idle_s) in SETTINGS.items():
            timing = TimingSettings(rounds=rounds, min_graph_us=graph_us, warmup_ms=warm_ms)
            repeats = [one(backend, result, timing, idle_s, seed=100 + i) for i in range(args.repeats)]
            spread = {
                est: max(r[est] for r in repeats) / min(r[est] for r in repeats) - 1
                for est in ("ratio_of_medians", "median_of_ratios")
            }
            row["settings"][name] = {"repeats": repeats, "spread": spread}
            print(
                f"{row['label']:34s} {name:16s} bench x{result.speedup:.3f} | ratio of medians "
                + " ".join(f"{r['ratio_of_medians']:.3f}" for r in repeats)
                + f" (spread {spread['ratio_of_medians']:.1%}) | median of ratios "
                + " ".join(f"{r['median_of_ratios']:.3f}" for r in repeats)
                + f" (spread {spread['median_of_ratios']:.1%}) | MHz "
                + " ".join(str(r["sm_clock_mhz"]) for r in repeats),
                flush=True,
            )
        out["problems"].append(row)
        atomic_write_json(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

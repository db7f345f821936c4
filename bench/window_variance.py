"""Where a speedup figure's spread comes from: windows within one process, or processes (#36: Bench's
prediction and Validate's figure differ by 2-4% on a few mid-size GEMMs, each with a tight interval of its own).

For each problem and its tuned solution (a cuBLASLt algorithm's or a Triton config's name), ``--processes``
fresh worker processes run one after another; each times the solution against torch's default in ``--windows``
windows (``measure.windowed_samples`` with one window at a time: fresh operand copies at their own addresses,
warm-up, interleaved rounds), and records each window's median per-round speedup, both medians and the SM
clock. One worker (the first; ``--screen-in``) screens the problem with the product's search before its windows
(``CublasLtBackend.tune_one``, as Bench's worker has screened hundreds of configs before its verdict) and
records Bench's own figure, then the solution's verdict timed again as Bench times it, at once and after the
GPU idled 2 and 8 s (``settled``), with the SM clock. The report splits the variance of the window speedups
into within-process and between-process parts.

    python bench/window_variance.py --out bench/results/window_variance_<gpu>_<date>.json \\
        [--processes 4] [--windows 6] [--problems KEY=SOLUTION ...] [--screen-in 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

# the three rows of bench_agreement_h100_2026-11-25_triton_default.json: two that disagreed, one that agreed
PROBLEMS = {
    "GemmTunableOp_BFloat16_TN,tn_14336_128_4096_ld_4096_4096_14336": (
        "Gemm_Cublaslt_id_66_tile_164_stages_35_splitk_1_red_0_swizzle_0_custom_0_inner_0_cluster_3"
    ),
    "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_4096_512_14336_ld_14336_14336_4096_a_Float8_e4m3fn"
    "_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float_ast_0_bst_0_dscale_0_fast_0_bias_None": (
        "Gemm_Cublaslt_id_66_tile_20_stages_36_splitk_1_red_0_swizzle_0_custom_6_inner_0_cluster_5"
    ),
    "GemmTunableOp_BFloat16_TN,tn_4096_128_14336_ld_14336_14336_4096": (
        "Gemm_Cublaslt_id_66_tile_15_stages_35_splitk_1_red_0_swizzle_0_custom_0_inner_0_cluster_3"
    ),
}


def worker(key: str, solution: str, windows: int, screen: bool, seed: int) -> dict:
    """One process's windows (and, with ``screen``, the product's search first)."""
    import torch

    from pipeline.backends.base import TuneSettings
    from pipeline.backends.cublaslt import CublasLtBackend
    from pipeline.backends.measure import TimingSettings, windowed_samples
    from pipeline.formats.tunableop import parse_key
    from pipeline.kernels.torch_gemm import torch_launcher
    from pipeline.stages.accept.validate import solution_config
    from pipeline.stats import round_speedups

    problem = parse_key(*key.split(",", 1))
    backend = CublasLtBackend(0, triton_cache=str(Path(tempfile.gettempdir()) / "window-variance-triton"))
    out: dict = {"screened": None, "windows": []}
    if screen:
        start = time.monotonic()
        result = backend.tune_one(problem, TuneSettings())
        out["screened"] = {
            "winner": result.winner, "speedup": result.speedup, "s": round(time.monotonic() - start, 1),
            "verdict_low": next((c.verdict_low for c in result.candidates if c.name == result.winner), None),
            "sm_clock_mhz": clock(), "settled": settled_verdicts(backend, problem, solution_config(solution), seed),
        }  # fmt: skip
    workspace = torch.empty(TuneSettings().workspace_bytes, dtype=torch.uint8, device=backend.device)
    tuned, closer = backend.launcher_for(problem, solution_config(solution), workspace)
    launchers = {"baseline": torch_launcher(problem), "tuned": tuned}
    try:
        for window in range(windows):
            settings = TimingSettings(windows=1, seed=seed + 1000 * window)
            samples = windowed_samples(problem, launchers, backend.device, settings)
            ratios = round_speedups(samples, "baseline", "tuned")
            out["windows"].append({
                "speedup": statistics.median(ratios), "baseline_us": statistics.median(samples["baseline"]),
                "tuned_us": statistics.median(samples["tuned"]), "rounds": len(ratios), "sm_clock_mhz": clock(),
            })  # fmt: skip
    finally:
        if closer:
            closer.close()
        backend.close()
    return out


SETTLE_S = (0.0, 2.0, 8.0)


def settled_verdicts(backend, problem, config: dict, seed: int) -> list[dict]:
    """``config`` against the default as Bench's verdict times it (``verdict_samples``: the verdict process, its
    rounds), right after the search and again after the GPU idled ``SETTLE_S`` seconds: does the figure move
    with the state the search left the GPU in?"""
    from pipeline.backends.base import TuneSettings
    from pipeline.backends.cublaslt import VERDICT_PAIR
    from pipeline.backends.measure import TimingSettings
    from pipeline.stats import round_speedups

    out = []
    for settle in SETTLE_S:
        time.sleep(settle)
        before = clock()
        timing = TimingSettings(seed=seed + 3 + int(settle))
        samples = backend.verdict_samples(problem, config, timing, 2 * timing.rounds, TuneSettings().workspace_bytes)
        speedup = statistics.median(round_speedups(samples, *VERDICT_PAIR))
        out.append({"settle_s": settle, "speedup": speedup, "sm_clock_before": before, "sm_clock_after": clock()})
    return out


def clock() -> int | None:
    """The SM clock when a window ended (torch's NVML query; None without NVML): power limits move it, and
    the wider GEMMs' speedups with it (``bench/README.md``, "Does Bench predict what ships?")."""
    import torch

    try:
        return torch.cuda.clock_rate()
    except Exception:  # pynvml missing or refused: the figure is optional
        return None


def split_variance(processes: list[list[float]]) -> dict:
    """One-way analysis of the window speedups grouped by process: the within-process SD (pooled), the SD of
    the process means, and the SD the process means would have from the within-process spread alone."""
    means = [statistics.fmean(p) for p in processes]
    within = [x - statistics.fmean(p) for p in processes for x in p]
    dof = sum(len(p) - 1 for p in processes)
    within_sd = (sum(d * d for d in within) / dof) ** 0.5 if dof else 0.0
    per_process = len(processes[0])
    return {
        "process_means": means,
        "within_process_sd": within_sd,
        "between_process_means_sd": statistics.stdev(means) if len(means) > 1 else 0.0,
        "expected_means_sd_from_windows": within_sd / per_process**0.5,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--problems", nargs="+", help="KEY=SOLUTION (default: the three of the 2026-11-25 runs)")
    parser.add_argument(
        "--screen-in", type=int, default=0, help="which process (from 0) screens before its windows; -1: none"
    )
    parser.add_argument("--worker", nargs=4, metavar=("KEY", "SOLUTION", "SCREEN", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        key, solution, screen, seed = args.worker
        print(json.dumps(worker(key, solution, args.windows, screen == "1", int(seed))))
        return
    from pipeline import procs

    problems = dict(p.split("=", 1) for p in args.problems) if args.problems else PROBLEMS
    record = {"date": time.strftime("%Y-%m-%d"), "processes": args.processes, "windows": args.windows,
              "screen_in": args.screen_in, "rows": []}  # fmt: skip
    for key, solution in problems.items():
        runs = []
        for index in range(args.processes):
            argv = [sys.executable, __file__, "--windows", str(args.windows), "--worker", key, solution,
                    "1" if index == args.screen_in else "0", str(7919 * (index + 1))]  # fmt: skip
            proc = procs.run(argv)  # a worker dies with this script, even on kill -9 (pipeline.procs)
            if proc.returncode != 0:
                raise SystemExit(f"worker {index} of {key}: exit {proc.returncode}: {proc.stderr[-2000:]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        speedups = [[w["speedup"] for w in run["windows"]] for run in runs]
        row = {"key": key, "solution": solution, "processes": runs, **split_variance(speedups)}
        record["rows"].append(row)
        screened = next((run["screened"] for run in runs if run["screened"]), None)
        figures = {k: v for k, v in row.items() if k.endswith("sd") or k == "process_means"}
        print(key.split(",")[1][:40], figures, screened)
        if args.out:
            from pipeline.atomic import atomic_write_json

            atomic_write_json(args.out, record)


if __name__ == "__main__":
    main()

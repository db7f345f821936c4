"""Is torch's default GEMM a per-process draw? (#36: on the H100 torch's FP8 28672x1x4096 default read 42.4-42.7
us in some processes and 44.5-46.0 us in others, Validate's two pairs in one process agreeing, while the Triton
winner beside it moved by 1-3%; that one row took Bench's prediction 4.3% away from Validate's.)

torch keeps one cuBLAS workspace per (handle, stream) for the life of a process, and every CUDA graph of a process
is captured on one stream, so a split-K default writes its partial sums to the same place in every window of a
process. Per problem, in each of ``--processes`` fresh processes, alternating ``--reps`` times: ``--windows``
windows as they run now (``kept``), then as many windows each after ``torch._C._cuda_clearCublasWorkspaces()``,
``torch.cuda.empty_cache()`` and an allocation of a random size held to the end (``moved``: the next workspace
lands elsewhere). Per window: the default's median, the winner's, and the median per-round speedup. If the
default's time is a per-process draw of its workspace, ``kept`` windows agree within a process and differ
between processes, and ``moved`` windows spread within one process as widely as processes do.

    python bench/default_workspace.py --out bench/results/default_workspace_<gpu>_<date>.json
        [--processes 3] [--windows 4] [--reps 2] [--problems KEY=SOLUTION ...]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROBLEMS = (
    "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_28672_1_4096_ld_4096_4096_28672_a_Float8_e4m3fn"
    "_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float_ast_0_bst_0_dscale_0_fast_0_bias_None=triton_r1c1k512_s1_g1_w2_st2",
    "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_4096_1_4096_ld_4096_4096_4096_a_Float8_e4m3fn"
    "_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float_ast_0_bst_0_dscale_0_fast_0_bias_None=triton_r1c8k1024_s1_g1_w8_st1",
    "GemmTunableOp_BFloat16_TN,tn_128256_1_4096_ld_4096_4096_128256=triton_r1c1k2048_s1_g1_w8_st2",
    "GemmTunableOp_BFloat16_TN,tn_4096_128_14336_ld_14336_14336_4096="
    "Gemm_Cublaslt_id_66_tile_15_stages_35_splitk_1_red_0_swizzle_0_custom_0_inner_0_cluster_3",
)


def worker(problems: list[str], windows: int, reps: int, seed: int) -> dict:
    """One process: per problem, ``reps`` x (``windows`` kept, ``windows`` moved)."""
    import torch

    from pipeline.backends.base import TuneSettings
    from pipeline.backends.cublaslt import CublasLtBackend
    from pipeline.backends.measure import TimingSettings, device_info, interleaved_samples, rotating_operands
    from pipeline.formats.tunableop import parse_key
    from pipeline.kernels.torch_gemm import torch_launcher
    from pipeline.stages.accept.validate import solution_config

    if not hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        raise SystemExit(f"torch {torch.__version__} has no torch._C._cuda_clearCublasWorkspaces")
    backend = CublasLtBackend(0, verdict_process=False)
    draws, out = random.Random(seed), []
    workspace = torch.empty(TuneSettings().workspace_bytes, dtype=torch.uint8, device=backend.device)
    for spec in problems:
        key, solution = spec.split("=", 1)
        problem = parse_key(*key.split(",", 1))
        tuned, gemm = backend.launcher_for(problem, solution_config(solution), workspace)
        launchers = {"baseline": torch_launcher(problem), "tuned": tuned}
        row: dict = {"key": key, "solution": solution, "kept": [], "moved": []}
        shims = []
        for rep in range(reps):
            for mode in ("kept", "moved"):
                held = []  # every window on operand copies of its own in both modes, as measure.windowed_samples
                for window in range(windows):
                    if mode == "moved":
                        torch._C._cuda_clearCublasWorkspaces()
                        torch.cuda.empty_cache()
                        shims.append(torch.empty(draws.randrange(1, 64) << 20, dtype=torch.uint8, device="cuda"))
                    settings = TimingSettings(seed=seed + 1000 * (rep * 2 * windows + window) + (mode == "moved"))
                    held.append(rotating_operands(problem, backend.device, settings))
                    samples = interleaved_samples(problem, launchers, held[-1], settings)
                    ratios = [b / t for b, t in zip(samples["baseline"], samples["tuned"], strict=True)]
                    row[mode].append({
                        "default_us": round(statistics.median(samples["baseline"]), 3),
                        "winner_us": round(statistics.median(samples["tuned"]), 3),
                        "speedup": round(statistics.median(ratios), 4),
                    })  # fmt: skip
        del shims
        if gemm is not None:
            gemm.close()
        out.append(row)
    return {"device": device_info(backend.device), "rows": out}


def summary(record: dict) -> None:
    """Per problem and mode: each process's default medians (min-max over its windows), and the speedups'."""
    for index, key in enumerate(record["problems"]):
        print(key.split(",")[1].split("_ld_")[0], key.split("=", 1)[1][:28])
        for mode in ("kept", "moved"):
            cells = []
            for process in record["processes"]:
                windows = process["rows"][index][mode]
                us = [w["default_us"] for w in windows]
                speed = [w["speedup"] for w in windows]
                cells.append(f"{min(us):.2f}-{max(us):.2f} us x{min(speed):.3f}-{max(speed):.3f}")
            print(f"  {mode:5}", " | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), help="KEY=SOLUTION")
    parser.add_argument("--summary", metavar="JSON", help="print a file's summary")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.summary:
        summary(json.loads(Path(args.summary).read_text()))
        return
    if args.worker is not None:
        print(json.dumps(worker(args.problems, args.windows, args.reps, args.worker)))
        return
    from pipeline import procs
    from pipeline.atomic import atomic_write_json

    record = {"date": time.strftime("%Y-%m-%d"), "windows": args.windows, "reps": args.reps,
              "problems": args.problems, "processes": []}  # fmt: skip
    for index in range(args.processes):
        argv = [sys.executable, __file__, "--windows", str(args.windows), "--reps", str(args.reps),
                "--worker", str(7919 * (index + 1)), "--problems", *args.problems]  # fmt: skip
        proc = procs.run(argv)  # dies with this script (pipeline.procs)
        if proc.returncode != 0:
            raise SystemExit(f"process {index}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        record["processes"].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        if args.out:
            atomic_write_json(args.out, record)
    summary(record)


if __name__ == "__main__":
    main()

"""Bench's verdict against Validate's reading of the same winner, alternating in one run (#36: some shapes read
2-5% higher at Bench than at Validate, run after run).

Per GEMM: the cuBLASLt backend searches it as Bench does (``tune_one``, its verdict in the verdict child), then
``--turns`` times, alternating: the verdict again in the child (``verdict_samples``), the same verdict timed in
this process (``time_verdict``), and Validate's reading (``measure.windowed`` over torch's default and the
winner rebuilt from its config, as ``TorchTimer.pair`` times it, seed + 1 as its fresh pair). Each reading is
the default's median over the winner's; the SM clock (``nvidia-smi``) is logged before each.

    python bench/harness_probe.py --out bench/results/harness_probe_<gpu>_<date>.json [--turns 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = ((4096, 128, 4096), (14336, 128, 4096), (4096, 128, 14336), (4096, 4, 4096), (6144, 4, 4096))


def sm_clock() -> int | None:
    """The SM clock now (MHz), or None where nvidia-smi does not answer."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
        return int(out.stdout.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def ratio(samples: dict[str, list[float]], base: str, tuned: str) -> float:
    return statistics.median(samples[base]) / statistics.median(samples[tuned])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    import torch
    from triton_decode import write_record

    from pipeline.backends.base import TuneSettings
    from pipeline.backends.cublaslt import VERDICT_PAIR, CublasLtBackend
    from pipeline.backends.measure import bandwidth, windowed_samples
    from pipeline.backends.torch_gemm import torch_launcher
    from pipeline.problem import GemmProblem

    device, settings = torch.device("cuda", 0), TuneSettings()
    backend = CublasLtBackend(0)
    backend.prepare()
    timing = backend.timing
    rows = []
    try:
        for m, n, k in SHAPES:
            problem = GemmProblem("gemm", "T", "N", m, n, k, k, k, m)
            result = backend.tune_one(problem, settings)
            row = {"gemm": f"{m}x{n}x{k}", "winner": result.winner, "bench_speedup": result.speedup, "turns": []}
            if result.has_winner:
                config = result.record.solution
                workspace = torch.empty(settings.workspace_bytes, dtype=torch.uint8, device=device)
                for _ in range(args.turns):
                    turn = {"clock_mhz": sm_clock()}
                    child = backend.verdict_samples(problem, config, timing, timing.rounds, settings.workspace_bytes)
                    turn["verdict_child"] = ratio(child, *VERDICT_PAIR)
                    here = backend.time_verdict(problem, config, timing, timing.rounds, settings.workspace_bytes)
                    turn["verdict_here"] = ratio(here, *VERDICT_PAIR)
                    tuned, gemm = backend.launcher_for(problem, config, workspace)
                    try:
                        fresh = dataclasses.replace(timing, seed=timing.seed + 1)
                        launchers = {"baseline": torch_launcher(problem), "tuned": tuned}
                        turn["validate_like"] = ratio(
                            windowed_samples(problem, launchers, device, fresh), "baseline", "tuned"
                        )
                    finally:
                        if gemm is not None:
                            gemm.close()
                    row["turns"].append({key: round(v, 4) if isinstance(v, float) else v for key, v in turn.items()})
                    print(row["gemm"], turn, flush=True)
            rows.append(row)
            write_record(args.out, device, bandwidth(device), {"rows": rows})
    finally:
        backend.close()


if __name__ == "__main__":
    main()

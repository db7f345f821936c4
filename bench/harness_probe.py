"""Bench's verdict against Validate's reading of the same winner, alternating in one run (#36: some shapes read
2-5% higher at Bench than at Validate, run after run).

Per GEMM: the cuBLASLt backend searches it as Bench does (``tune_one``, its verdict in the verdict child), then
``--turns`` times, alternating: the verdict again in the child (``verdict_samples``), the same verdict timed in
this process (``time_verdict``), and Validate's reading (``measure.windowed_samples`` over torch's default and the
winner rebuilt from its config, as ``TorchTimer.pair`` times it, seed + 1 as its fresh pair). Each reading is
the default's median over the winner's; the SM clock (``nvidia-smi``) is logged before each.

    python bench/harness_probe.py --out bench/results/harness_probe_<gpu>_<date>.json [--turns 4]
        [--problems KEY=SOLUTION ...]

``--problems`` reads given rows (a TunableOp key and the solution a run named for it) without a search, and
each reading keeps both medians (``*_us``: torch's default's and the winner's), to tell which of the two moves.
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


def medians(samples: dict[str, list[float]], base: str, tuned: str) -> list[float]:
    return [round(statistics.median(samples[base]), 3), round(statistics.median(samples[tuned]), 3)]


def problems_of(given: list[str] | None) -> list[tuple]:
    """(problem, solution or None) per row: the ``--problems`` given, else ``SHAPES`` to search."""
    from pipeline.formats.tunableop import parse_key
    from pipeline.problem import GemmProblem

    if given:
        return [(parse_key(*p.split("=", 1)[0].split(",", 1)), p.split("=", 1)[1]) for p in given]
    return [(GemmProblem("gemm", "T", "N", m, n, k, k, k, m), None) for m, n, k in SHAPES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--problems", nargs="+", help="KEY=SOLUTION rows to read without a search")
    args = parser.parse_args()
    import torch
    from triton_decode import write_record

    from pipeline.backends.base import TuneSettings
    from pipeline.backends.cublaslt import VERDICT_PAIR, CublasLtBackend
    from pipeline.backends.measure import bandwidth, windowed_samples
    from pipeline.kernels.torch_gemm import torch_launcher
    from pipeline.stages.accept.validate import solution_config

    device, settings = torch.device("cuda", 0), TuneSettings()
    backend = CublasLtBackend(0)
    backend.prepare()
    timing = backend.timing
    rows = []
    try:
        for problem, given in problems_of(args.problems):
            if given is None:
                result = backend.tune_one(problem, settings)
                winner, speedup, config = result.winner, result.speedup, result.has_winner and result.record.solution
            else:
                winner, speedup, config = given, None, solution_config(given)
            gemm_name = f"{problem.m}x{problem.n}x{problem.k}" + ("" if problem.a_type == "bfloat16" else " fp8")
            row = {"gemm": gemm_name, "winner": winner, "bench_speedup": speedup, "turns": []}
            if config:
                workspace = torch.empty(settings.workspace_bytes, dtype=torch.uint8, device=device)
                for _ in range(args.turns):
                    turn = {"clock_mhz": sm_clock()}
                    child = backend.verdict_samples(problem, config, timing, timing.rounds, settings.workspace_bytes)
                    turn["verdict_child"], turn["verdict_child_us"] = (
                        ratio(child, *VERDICT_PAIR),
                        medians(child, *VERDICT_PAIR),
                    )
                    here = backend.time_verdict(problem, config, timing, timing.rounds, settings.workspace_bytes)
                    turn["verdict_here"], turn["verdict_here_us"] = (
                        ratio(here, *VERDICT_PAIR),
                        medians(here, *VERDICT_PAIR),
                    )
                    tuned, gemm = backend.launcher_for(problem, config, workspace)
                    try:
                        fresh = dataclasses.replace(timing, seed=timing.seed + 1)
                        launchers = {"baseline": torch_launcher(problem), "tuned": tuned}
                        like = windowed_samples(problem, launchers, device, fresh)
                        turn["validate_like"], turn["validate_like_us"] = (
                            ratio(like, "baseline", "tuned"),
                            medians(like, "baseline", "tuned"),
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

"""What ``--triton`` costs Bench and what it finds: each decode GEMM (Llama-3-8B projections at T tokens, bf16,
and its gate/up as tensorwise-scaled FP8) tuned by the product's cuBLASLt backend without and with the Triton
kernels, the latter with a cold compile cache and again with the warm one (a nightly's steady state: the cache
lives in the workdir). Per GEMM: wall seconds of ``tune_one``, the compile phase, the winner and Bench's
speedup over torch's default (its verdict, re-timed alone on fresh operands).

    python bench/triton_bench_cost.py --out bench/results/triton_bench_cost_<gpu>_<date>.json [--tokens 1 4 8]

An ``--out`` that is a directory is refused (exit 12) before anything is measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from pipeline.api import INPUT, TENSORWISE_E4M3, BadInput, GemmProblem, atomic_write_json, claim_output_file

if TYPE_CHECKING:
    from pipeline.api import CublasLtBackend, TuneSettings

LLAMA3_8B = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}


def problems(tokens: list[int]) -> list[tuple[str, GemmProblem]]:
    out = [
        (f"{name} T={t}", GemmProblem("gemm", "T", "N", n, t, k, k, k, n))
        for t in tokens
        for name, (n, k) in LLAMA3_8B.items()
    ]
    n, k = LLAMA3_8B["gate_up"]
    out += [(f"fp8 gate_up T={t}", GemmProblem("scaled_gemm", "T", "N", n, t, k, k, k, n, **TENSORWISE_E4M3))
            for t in tokens]  # fmt: skip
    return out


def run(backend: CublasLtBackend, problem: GemmProblem, settings: TuneSettings) -> dict:
    start = time.monotonic()
    result = backend.tune_one(problem, settings)
    wall = time.monotonic() - start
    return {
        "wall_s": round(wall, 2),
        "phases": {k: round(v, 2) for k, v in result.phases.items()},
        "winner": result.winner,
        "speedup": round(result.speedup or 1.0, 4),
        "numerics": (result.record.solution.get("numerics") if result.record else None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    try:
        claim_output_file(args.out, [], force=True)
    except BadInput as err:
        print(f"triton_bench_cost: {err}", file=sys.stderr)
        return INPUT
    import torch  # the GPU's: after the output is claimed
    import triton

    from pipeline.api import CublasLtBackend, TuneSettings, device_info

    settings = TuneSettings()
    cache = tempfile.mkdtemp(prefix="triton-cache-")
    library = with_triton = None
    try:
        library, with_triton = CublasLtBackend(0), CublasLtBackend(0, triton_cache=cache)
        rows = measure(library, with_triton, args.tokens, settings)
    finally:
        for backend in (library, with_triton):
            if backend is not None:
                backend.close()
        shutil.rmtree(cache, ignore_errors=True)
    record = {
        "date": datetime.date.today().isoformat(),
        "device": device_info(torch.device("cuda", 0)),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "settings": {"time_budget_s": settings.time_budget_s, "margin": settings.margin},
        "median_added_s": {
            "cold": statistics.median(r["added_s_cold"] for r in rows),
            "warm": statistics.median(r["added_s_warm"] for r in rows),
        },
        "triton_wins": sum(r["triton_warm"]["winner"].startswith("triton_") for r in rows),
        "rows": rows,
    }
    atomic_write_json(args.out, record)
    print(json.dumps({k: record[k] for k in ("median_added_s", "triton_wins")}))
    return 0


def measure(
    library: CublasLtBackend, with_triton: CublasLtBackend, tokens: list[int], settings: TuneSettings
) -> list[dict]:
    """Each GEMM tuned by the library alone, then with the Triton kernels on the compile cache as the GEMMs
    before it left it ("cold": its configs not compiled yet where no earlier GEMM shared them), then again."""
    rows = []
    for name, problem in problems(tokens):
        row = {"gemm": name, "problem": problem.to_dict()}
        row["library"] = run(library, problem, settings)
        row["triton_cold"] = run(with_triton, problem, settings)
        row["triton_warm"] = run(with_triton, problem, settings)
        row["added_s_cold"] = round(row["triton_cold"]["wall_s"] - row["library"]["wall_s"], 2)
        row["added_s_warm"] = round(row["triton_warm"]["wall_s"] - row["library"]["wall_s"], 2)
        rows.append(row)
        print(
            f"{name:16} library {row['library']['wall_s']:5.1f} s {row['library']['winner'][:24]:24} "
            f"x{row['library']['speedup']:.3f} | triton +{row['added_s_cold']:.1f} s cold, "
            f"+{row['added_s_warm']:.1f} s warm, {row['triton_warm']['winner'][:34]:34} "
            f"x{row['triton_warm']['speedup']:.3f}",
            flush=True,
        )
    return rows


if __name__ == "__main__":
    sys.exit(main())

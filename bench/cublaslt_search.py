"""Benchmark the cuBLASLt search on a GPU: ours against an exhaustive search of the same pool and against
nvmath's ``Matmul.autotune`` over its 8 heuristic candidates, each against torch's default path.

    python bench/cublaslt_search.py --set all --out results.json [--max-problems N]

Problems: the 40 Llama-shaped ones of the H100 measurements (``bench/README.md``) (qkv 4096->6144, o 4096->4096,
gate_up 4096->28672, down 14336->4096, 5120->13824 at M in 1..8192; lm_head 4096->128256 up to M=512),
plus what the embedded workload records. All bf16 ``F.linear`` without bias, BLAS frame ``tn``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import nvmath
import torch
from nvmath.bindings import cublasLt as lt
from nvmath.linalg.advanced import Matmul, MatmulPlanPreferences

from pipeline.backends.base import DEFAULT, TuneSettings
from pipeline.backends.cublaslt import CublasLtBackend
from pipeline.backends.measure import device_info, interleaved, rotating_operands
from pipeline.formats.tunableop import format_key
from pipeline.kernels.cublaslt_algo import new_record, read_config
from pipeline.kernels.lt_gemm import LtGemm
from pipeline.kernels.torch_gemm import OperandSet, torch_launcher, torch_views
from pipeline.problem import TENSORWISE_E4M3, GemmProblem
from pipeline.stats import geomean

LINEARS = {
    "qkv": (4096, 6144),
    "o": (4096, 4096),
    "gate_up": (4096, 28672),
    "down": (14336, 4096),
    "5120->13824": (5120, 13824),
}
TOKENS = (1, 8, 32, 128, 512, 2048, 8192)
LM_HEAD_TOKENS = (1, 8, 32, 128, 512)
WORKLOAD_TOKENS = (1, 4, 128, 512, 1024, 4096)


def linear(name: str, tokens: int, k: int, n_out: int) -> tuple[str, GemmProblem]:
    return f"{name} M={tokens}", GemmProblem("gemm", "T", "N", n_out, tokens, k, k, k, n_out)


FP8_TOKENS = (1, 8, 512, 2048)  # decode and prefill


def fp8_linear(name: str, tokens: int, k: int, n_out: int) -> tuple[str, GemmProblem]:
    """The tensorwise e4m3 ``_scaled_mm`` of a linear layer, bf16 out, keyed as the recorder keys it."""
    return f"fp8 {name} M={tokens}", GemmProblem(
        "scaled_gemm",
        "T",
        "N",
        n_out,
        tokens,
        k,
        k,
        k,
        n_out,
        **TENSORWISE_E4M3,
    )


def problem_sets() -> dict[str, list[tuple[str, GemmProblem]]]:
    llama = [linear(n, t, k, o) for n, (k, o) in LINEARS.items() for t in TOKENS]
    llama += [linear("lm_head", t, 4096, 128256) for t in LM_HEAD_TOKENS]
    workload = [linear(n, t, k, o) for n, (k, o) in LINEARS.items() if n != "5120->13824" for t in WORKLOAD_TOKENS] + [
        linear("lm_head", t, 4096, 128256) for t in (1, 4)
    ]
    seen = {p for _, p in llama}
    extra = [(label, p) for label, p in workload if p not in seen]
    fp8 = [fp8_linear(n, t, k, o) for n, (k, o) in LINEARS.items() if n != "5120->13824" for t in FP8_TOKENS]
    return {
        "llama": llama,
        "workload": extra,
        "all": llama + extra,
        "smoke": [llama[1], llama[10], llama[-1]],
        "fp8": fp8,
    }


def nvmath_pick(p: GemmProblem, ops: OperandSet) -> tuple[np.ndarray, float, int]:
    """nvmath's own pick: ``Matmul(x, y)`` in torch's frame (which cuBLASLt sees as our BLAS frame), planned
    with its 8 heuristic algorithms, ``autotune``d; its best algorithm as a record, the seconds it took and
    how many it compared."""
    x, y, _ = torch_views(p, ops)
    start = time.monotonic()
    mm = Matmul(x, y)
    mm.plan(preferences=MatmulPlanPreferences(limit=8))
    mm.autotune(iterations=10)
    record = new_record()
    record["algo"] = mm.algorithms[0].as_numpy()["algo"]
    count = len(mm.algorithms)
    mm.free()
    return record, time.monotonic() - start, count


def nvmath_autotune(backend: CublasLtBackend, p: GemmProblem, settings: TuneSettings) -> dict:
    """nvmath's pick (``nvmath_pick``) run under our descriptors, timed in our harness against torch's default."""
    sets = rotating_operands(p, backend.device, backend.timing)
    record, tuning_s, count = nvmath_pick(p, sets[0])
    workspace = torch.empty(settings.workspace_bytes, dtype=torch.uint8, device=backend.device)
    gemm = LtGemm(p, backend.handle, workspace)
    try:
        if not gemm.check(record):
            return {
                "error": "nvmath's best algorithm does not pass AlgoCheck under the BLAS-frame descriptors",
                "tuning_s": tuning_s,
            }
        config = read_config(record)
        final = interleaved(p, {DEFAULT: torch_launcher(p), "nvmath": gemm.launcher(record)}, sets, backend.timing)
    finally:
        gemm.close()
    ratio = final[DEFAULT].median / final["nvmath"].median
    return {
        "default_us": final[DEFAULT].median,
        "tuned_us": final["nvmath"].median,
        "raw_speedup": ratio,
        "speedup": ratio if ratio >= 1 + settings.margin else 1.0,
        "tuning_s": tuning_s,
        "winner": config["SolutionNameMin"],
        "candidates": count,
    }


def run(
    problems: list[tuple[str, GemmProblem]], settings: TuneSettings, exhaustive: bool, with_nvmath: bool, partial: Path
) -> list:
    backend = CublasLtBackend(settings.device)
    rows = []
    for label, p in problems:
        row: dict = {"label": label, "key": ",".join(format_key(p)), "floor_us": p.floor_us()}
        start = time.monotonic()
        ours = backend.tune_one(p, settings)
        row["ours"] = {
            "default_us": ours.default_us,
            "tuned_us": ours.winner_us,
            "speedup": ours.speedup,
            "winner": ours.winner,
            "tuning_s": time.monotonic() - start,
            "pool": len(ours.candidates),
            "numerics": ours.numerics,
            "phases": ours.phases,
            "screened": sum(c.screen_us is not None for c in ours.candidates),
        }
        if exhaustive:
            start = time.monotonic()
            full = backend.exhaustive_one(p, settings)
            row["exhaustive"] = {
                "default_us": full.default_us,
                "tuned_us": full.winner_us,
                "speedup": full.speedup,
                "winner": full.winner,
                "tuning_s": time.monotonic() - start,
                "phases": full.phases,
            }
        if with_nvmath:
            try:
                row["nvmath"] = nvmath_autotune(backend, p, settings)
            except Exception as err:  # report, keep benchmarking
                row["nvmath"] = {"error": f"{type(err).__name__}: {err}"}
        o = row["ours"]
        o["eff_default"], o["eff_tuned"] = row["floor_us"] / o["default_us"], row["floor_us"] / o["tuned_us"]
        print(
            f"{label:22s} default {o['default_us']:9.1f} us  tuned {o['tuned_us']:9.1f} us  x{o['speedup']:.3f}"
            f"  eff {o['eff_default']:.2f}->{o['eff_tuned']:.2f}  {o['tuning_s']:5.1f} s  pool {o['pool']}"
            + (
                f"  | exh x{row['exhaustive']['speedup']:.3f} {row['exhaustive']['tuning_s']:5.1f} s"
                if exhaustive
                else ""
            )
            + (f"  | nvmath x{row['nvmath'].get('speedup', float('nan')):.3f}" if with_nvmath else ""),
            flush=True,
        )
        rows.append(row)
        partial.write_text(json.dumps(rows) + "\n")  # what a time-out leaves behind
        torch.cuda.empty_cache()
    return rows


def summary(rows: list) -> dict:
    out = {}
    for mode in ("ours", "exhaustive", "nvmath"):
        ok = [r[mode] for r in rows if mode in r and "speedup" in r[mode]]
        if ok:
            out[mode] = {
                "geomean_speedup": geomean([r["speedup"] for r in ok]),
                "min_speedup": min(r["speedup"] for r in ok),
                "improved_3pct": sum(r["speedup"] >= 1.03 for r in ok),
                "tuning_s": sum(r["tuning_s"] for r in ok),
                "problems": len(ok),
            }
    if "exhaustive" in out:
        out["ours_vs_exhaustive"] = {
            "speedup_share": (out["ours"]["geomean_speedup"] - 1) / (out["exhaustive"]["geomean_speedup"] - 1)
            if out["exhaustive"]["geomean_speedup"] > 1
            else None,
            "geomean_ratio": out["ours"]["geomean_speedup"] / out["exhaustive"]["geomean_speedup"],
            "time_share": out["ours"]["tuning_s"] / out["exhaustive"]["tuning_s"],
        }
    out["eff_geomean_default"] = geomean([r["ours"]["eff_default"] for r in rows])
    out["eff_geomean_tuned"] = geomean([r["ours"]["eff_tuned"] for r in rows])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=["llama", "workload", "all", "smoke"], default="all")
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-problems", type=int, default=0)
    parser.add_argument("--budget", type=float, default=TuneSettings.time_budget_s)
    parser.add_argument("--no-exhaustive", action="store_true")
    parser.add_argument("--no-nvmath", action="store_true")
    args = parser.parse_args()
    problems = problem_sets()[args.set]
    if args.max_problems:
        problems = problems[: args.max_problems]
    settings = TuneSettings(time_budget_s=args.budget)
    started = time.monotonic()
    rows = run(problems, settings, not args.no_exhaustive, not args.no_nvmath, Path(args.out + ".partial"))
    data = {
        "date": datetime.date.today().isoformat(),
        "device": device_info(torch.device("cuda", 0)),
        "versions": {"torch": torch.__version__, "cublasLt": lt.get_version(), "nvmath": nvmath.__version__},
        "settings": settings.__dict__,
        "set": args.set,
        "wall_s": time.monotonic() - started,
        "summary": summary(rows),
        "problems": rows,
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

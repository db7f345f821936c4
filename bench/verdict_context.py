"""Does the GPU's state when a winner is read move its speedup? (#36: over eight agreement sets on the H100,
Bench's prediction sits 0.1-0.7% *under* Validate's figure on Triton rows and 0.1-1.1% *over* it on cuBLASLt
rows with N > 16, a split by source that noise alone would not give.)

Bench reads its verdict right after searching the problem; Validate reads a row right after the row before.
Per GEMM (a tuned row: ``KEY=SOLUTION``), ``--turns`` times: the product's search of the problem (``tune_one``
of cuBLASLt's pool alone, its verdict in the verdict child: Bench's own figure where it names the row's
solution), then the row's solution against torch's default read three times in this process, each one reading
as Bench's verdict reads it (``VERDICT_WINDOWS`` windows of ``rounds`` interleaved rounds, fresh operands per
window): at once after the search (``after_search``), at once after that reading (``after_reading``), and after
the GPU idled ``--idle-s`` (``after_idle``). Each reading keeps its raw per-round samples per window, the SM
clock and the GPU's temperature and power after it, so estimators can be compared offline (``--analyse``).

    python bench/verdict_context.py --out bench/results/verdict_context_<gpu>_<date>.json [--turns 3]
        [--problems KEY=SOLUTION ...] [--deadline-s 480]
    python bench/verdict_context.py --analyse bench/results/verdict_context_<gpu>_<date>.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# rows of bench_agreement_h100_2026-11-26_late.json: three Triton rows Bench read 1.0-1.7% under Validate,
# five cuBLASLt rows it read 1.2-3.3% over
PROBLEMS = (
    "GemmTunableOp_BFloat16_TN,tn_4096_1_4096_ld_4096_4096_4096=triton_r1c1k2048_s1_g1_w8_st2",
    "GemmTunableOp_BFloat16_TN,tn_128256_4_4096_ld_4096_4096_128256=triton_r16c64k256_s1_g8_w4_st4",
    "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_4096_1_14336_ld_14336_14336_4096_a_Float8_e4m3fn"
    "_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float_ast_0_bst_0_dscale_0_fast_0_bias_None=triton_r1c1k1024_s1_g1_w4_st2",
    "GemmTunableOp_BFloat16_TN,tn_4096_4_4096_ld_4096_4096_4096="
    "Gemm_Cublaslt_id_66_tile_393_stages_35_splitk_1_red_0_swizzle_0_custom_1_inner_0_cluster_4",
    "GemmTunableOp_BFloat16_TN,tn_4096_128_4096_ld_4096_4096_4096="
    "Gemm_Cublaslt_id_66_tile_134_stages_35_splitk_1_red_0_swizzle_0_custom_0_inner_0_cluster_7",
    "GemmTunableOp_BFloat16_TN,tn_4096_128_14336_ld_14336_14336_4096="
    "Gemm_Cublaslt_id_66_tile_15_stages_35_splitk_1_red_0_swizzle_0_custom_0_inner_0_cluster_3",
    "GemmTunableOp_BFloat16_TN,tn_14336_128_4096_ld_4096_4096_14336="
    "Gemm_Cublaslt_id_66_tile_164_stages_35_splitk_1_red_0_swizzle_0_custom_0_inner_0_cluster_3",
    "GemmTunableOp_BFloat16_TN,tn_6144_4096_4096_ld_4096_4096_6144="
    "Gemm_Cublaslt_id_66_tile_197_stages_35_splitk_1_red_0_swizzle_0_custom_2_inner_0_cluster_5",
)
VERDICT_WINDOWS = 6  # as Bench's verdict pools (``CublasLtBackend._verdict``), and Validate over its two pairs
CONDITIONS = ("after_search", "after_reading", "after_idle")


def gpu_state() -> dict:
    """SM clock (MHz), temperature (C) and power (W) now, where NVML answers."""
    import torch

    state = {}
    for name, query in (("sm_mhz", torch.cuda.clock_rate), ("temp_c", torch.cuda.temperature)):
        try:
            state[name] = query()
        except Exception:  # NVML missing: the figure is optional
            state[name] = None
    try:
        state["power_w"] = torch.cuda.power_draw() / 1000.0
    except Exception:
        state["power_w"] = None
    return state


def reading(problem, launchers: dict, device, seed: int, rounds: int) -> dict:
    """``VERDICT_WINDOWS`` windows of ``measure.windowed_samples`` (operands of their own, all held to the end),
    its pooled rounds split back into each window's raw samples."""
    from pipeline.backends.measure import TimingSettings, windowed_samples

    pooled = windowed_samples(problem, launchers, device, TimingSettings(seed=seed, windows=VERDICT_WINDOWS), rounds)
    windows = [
        {name: values[w * rounds : (w + 1) * rounds] for name, values in pooled.items()} for w in range(VERDICT_WINDOWS)
    ]
    return {"windows": windows, **gpu_state()}


def pooled_ratio(windows: list[dict]) -> float:
    """Bench's and Validate's estimator until 2026-11-26: the default's median over the winner's, pooled."""
    base = [x for w in windows for x in w["baseline"]]
    tuned = [x for w in windows for x in w["tuned"]]
    return statistics.median(base) / statistics.median(tuned)


def run(problems: list[str], turns: int, idle_s: float, out: str, deadline: float) -> None:
    import torch
    from triton_decode import write_record

    from pipeline.backends.base import TuneSettings
    from pipeline.backends.cublaslt import CublasLtBackend
    from pipeline.backends.measure import bandwidth
    from pipeline.formats.tunableop import parse_key
    from pipeline.kernels.torch_gemm import torch_launcher
    from pipeline.stages.accept.validate import solution_config

    device, settings = torch.device("cuda", 0), TuneSettings()
    backend = CublasLtBackend(0)
    backend.prepare()
    rounds = backend.timing.rounds
    workspace = torch.empty(settings.workspace_bytes, dtype=torch.uint8, device=device)
    rows = [{"key": p.split("=", 1)[0], "solution": p.split("=", 1)[1], "turns": []} for p in problems]
    try:
        for turn in range(turns):
            for index, row in enumerate(rows):
                if time.monotonic() > deadline:
                    raise TimeoutError
                problem = parse_key(*row["key"].split(",", 1))
                start = time.monotonic()
                result = backend.tune_one(problem, settings)
                record = {
                    "bench": result.speedup, "bench_winner": result.winner, "bench_default_us": result.default_us,
                    "bench_winner_us": result.winner_us, "search_s": round(time.monotonic() - start, 2),
                }  # fmt: skip
                tuned, gemm = backend.launcher_for(problem, solution_config(row["solution"]), workspace)
                launchers = {"baseline": torch_launcher(problem), "tuned": tuned}
                try:
                    seed = 7919 * (turn + 1) + 101 * index
                    record["after_search"] = reading(problem, launchers, device, seed, rounds)
                    record["after_reading"] = reading(problem, launchers, device, seed + 1, rounds)
                    time.sleep(idle_s)
                    record["after_idle"] = reading(problem, launchers, device, seed + 2, rounds)
                finally:
                    if gemm is not None:
                        gemm.close()
                    torch.cuda.empty_cache()
                row["turns"].append(record)
                figures = {c: round(pooled_ratio(record[c]["windows"]), 4) for c in CONDITIONS}
                print(row["key"].split(",")[1][:28], turn, round(result.speedup or 1.0, 4), figures, flush=True)
            write_record(out, device, bandwidth(device), {"idle_s": idle_s, "rows": rows})
    except TimeoutError:
        print("deadline: stopping with what was read", flush=True)
    finally:
        write_record(out, device, bandwidth(device), {"idle_s": idle_s, "rows": rows})
        backend.close()


def per_window(window: dict) -> float:
    return statistics.median(b / t for b, t in zip(window["baseline"], window["tuned"], strict=True))


ESTIMATORS = {
    "pooled medians (both sides until 2026-11-26)": pooled_ratio,
    "median of round ratios": lambda ws: statistics.median(
        b / t for w in ws for b, t in zip(w["baseline"], w["tuned"], strict=True)
    ),
    "mean of window ratios": lambda ws: statistics.fmean(per_window(w) for w in ws),
    "median of window ratios": lambda ws: statistics.median(per_window(w) for w in ws),
}


def analyse(path: str) -> None:
    """Per row and condition, the mean reading (%) against the row's overall mean; per estimator, the SD of a
    reading within a row (pooled over rows), and the offset of Bench's own figure where its search named the
    row's solution (the search here is cuBLASLt's alone: a Triton row's is never that)."""
    record = json.loads(Path(path).read_text())
    for name, estimator in ESTIMATORS.items():
        deviations, by_condition = [], {c: [] for c in (*CONDITIONS, "bench")}
        for row in record["rows"]:
            values = {c: [100 * math.log(estimator(t[c]["windows"])) for t in row["turns"]] for c in CONDITIONS}
            everything = [v for vs in values.values() for v in vs]
            if len(everything) < 2:
                continue
            centre = statistics.fmean(everything)
            deviations += [v - centre for v in everything]
            for condition, vs in values.items():
                by_condition[condition] += [v - centre for v in vs]
            by_condition["bench"] += [
                100 * math.log(t["bench"]) - centre for t in row["turns"] if t["bench_winner"] == row["solution"]
            ]
        sd = (sum(d * d for d in deviations) / max(len(deviations) - len(record["rows"]), 1)) ** 0.5
        offsets = {c: round(statistics.fmean(v), 2) for c, v in by_condition.items() if v}
        print(f"{name}: sd of a reading {sd:.2f}%; mean offset by condition (%) {offsets}")
    for row in record["rows"]:
        cells = []
        for condition in CONDITIONS:
            values = [pooled_ratio(t[condition]["windows"]) for t in row["turns"]]
            clocks = [t[condition]["sm_mhz"] for t in row["turns"]]
            cells.append(f"{condition} {' '.join(f'{v:.3f}' for v in values)} @{clocks}")
        bench = " ".join(f"{t['bench'] or 1:.3f}" for t in row["turns"])
        print(row["key"].split(",")[1][:28], f"bench {bench} |", " | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), help="KEY=SOLUTION")
    parser.add_argument("--deadline-s", type=float, default=480.0, help="stop reading after this long, keep the file")
    parser.add_argument("--analyse", metavar="JSON")
    args = parser.parse_args()
    if args.analyse:
        analyse(args.analyse)
        return
    if not args.out:
        parser.error("--out is required to measure")
    run(args.problems, args.turns, args.idle_s, args.out, time.monotonic() + args.deadline_s)


if __name__ == "__main__":
    main()

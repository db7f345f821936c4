"""The ceiling of cuBLASLt tuning on a GPU: every config that passes cublasLtMatmulAlgoCheck, screened.

    python bench/cublaslt_ceiling.py --set all --out bench/results/cublaslt_ceiling_<gpu>_<date>.json.gz \\
        [--enum-s 2] [--max-configs 2500] [--neighbours 40] [--nvmath] [--shard 0/1] [--deadline-s S] [--start N]

Per problem (the 53 of ``problem_sets``: Llama-shaped bf16 ``F.linear``, qkv 4096->6144, o 4096->4096, gate_up
4096->28672, down 14336->4096, 5120->13824 at M in 1..8192, lm_head 4096->128256 up to M = 512, and what the
embedded workload records; ``--set fp8``: the 16 tensorwise e4m3 ``_scaled_mm`` of its projections): the candidate
order is torch's default, the cuBLASLt heuristic's list (128 requested), with ``--neighbours N`` the valid configs
one axis away from each of its results (``pipeline.kernels.space``), then the enumeration: algorithm ids x tiles x
stages x cluster shapes x custom options (all the caps allow) x swizzle x {no split, split-K in 2..32 x each
reduction scheme}, drawn at random without replacement, round-robin over ids, each through
``cublasLtMatmulAlgoCheck`` under torch's 32 MiB workspace, until ``--enum-s`` or ``--max-configs``
(``LtGemm.sample``, the product's enumeration). The size of the whole space is recorded, so the dataset says what
share of it was seen.

The pool, the screen, the floor filter and the numerics check are the product's own (``pool.pool_of``,
``CublasLtBackend.screen`` and ``numerically_sound``), so the ceiling measures the same physics. Screening is
the product's batched screen (``measure.screen_batch``): configs enqueued back to back behind a GPU spin long
enough to cover the host's enqueueing, each timed by events over one pass through the rotating operand copies
(>= 2, >= 3x L2), so thousands of configs cost little more than their kernels. Times under the measured floor
are harness errors (``screened_us`` None, the reason in ``errors``, counted in ``below_floor``). Finalists: the
best 16 screened plus the tier finalists (``pipeline.backends.selection``; the heuristic's list is a tier, as in
the product; recorded as ``tiers``), numerics-checked, then the full harness (CUDA-graph replays, 7 interleaved
rounds with torch's default) on fresh operand buffers. The ceiling is the best confirmed finalist.

In the same run, per problem, the product's own search (``CublasLtBackend.tune_one``) is timed twice: on the
heuristic's list alone (``cheap``) and on its default pool, the heuristic's list and the nearest valid configs
one axis away from each of its results (``product``); both without the shipping margin, ``shipped`` with it.
With ``--nvmath``, nvmath's ``Matmul.autotune`` pick joins the ceiling's final rounds (same buffers, same
interleaving), so ours, the ceiling, nvmath and torch's default are compared in one run. The product's winner
joins those rounds too (``product.same_round_us``, ``ours_of_ceiling``): its own search confirms it in rounds of
its own, minutes apart, whose default alone moves by several percent on small problems, so ours against the
ceiling is judged only within one set of rounds. The ceiling is the fastest of many finalists' medians in
those rounds, so it is also the luckiest (the winner's curse): ``judged`` times the default, the ceiling's
winner and ours again, in ``JUDGE_ROUNDS`` interleaved rounds on buffers of their own, after the ceiling was
chosen; ``judged.ours_of_ceiling`` is the unbiased figure. The product's screen (``product.screen_us``), its
finalists (screen and final times, ``product.finalists``) and where the ceiling's winner ranked in its screen
(``product.ceiling_winner_screen_rank``) are recorded; ``--finalists`` and ``--product-neighbours`` set its knobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gzip
import json
import time
from pathlib import Path

import numpy as np
import torch
from ceiling_replay import summarize  # bench/ is the script's directory, first on sys.path
from nvmath.bindings import cublasLt as lt
from nvmath.linalg.advanced import Matmul, MatmulPlanPreferences

from pipeline.api import (
    DEFAULT,
    TENSORWISE_E4M3,
    TIERS,
    BelowFloor,
    CublasLtBackend,
    GemmProblem,
    LtGemm,
    OperandSet,
    TimingSettings,
    TuneSettings,
    check_numerics,
    device_info,
    finalists,
    interleaved,
    new_record,
    poison,
    pool_of,
    read_config,
    reference,
    rotating_operands,
    torch_views,
)

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
FP8_TOKENS = (1, 8, 512, 2048)  # decode and prefill


def linear(name: str, tokens: int, k: int, n_out: int) -> tuple[str, GemmProblem]:
    """A bf16 ``F.linear`` without bias in the BLAS frame (``tn``), labelled as the README's tables label it."""
    return f"{name} M={tokens}", GemmProblem("gemm", "T", "N", n_out, tokens, k, k, k, n_out)


def fp8_linear(name: str, tokens: int, k: int, n_out: int) -> tuple[str, GemmProblem]:
    """The tensorwise e4m3 ``_scaled_mm`` of a linear layer, bf16 out, keyed as the recorder keys it."""
    return f"fp8 {name} M={tokens}", GemmProblem(
        "scaled_gemm", "T", "N", n_out, tokens, k, k, k, n_out, **TENSORWISE_E4M3
    )


def problem_sets() -> dict[str, list[tuple[str, GemmProblem]]]:
    llama = [linear(n, t, k, o) for n, (k, o) in LINEARS.items() for t in TOKENS]
    llama += [linear("lm_head", t, 4096, 128256) for t in LM_HEAD_TOKENS]
    workload = [linear(n, t, k, o) for n, (k, o) in LINEARS.items() if n != "5120->13824" for t in WORKLOAD_TOKENS]
    workload += [linear("lm_head", t, 4096, 128256) for t in (1, 4)]
    seen = {p for _, p in llama}
    extra = [(label, p) for label, p in workload if p not in seen]
    fp8 = [fp8_linear(n, t, k, o) for n, (k, o) in LINEARS.items() if n != "5120->13824" for t in FP8_TOKENS]
    smoke = [llama[1], llama[10], llama[-1]]
    return {"llama": llama, "workload": extra, "all": llama + extra, "smoke": smoke, "fp8": fp8}


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


FIELDS = ("AlgoId", "Tile", "Stages", "SplitK", "ReductionScheme", "Swizzle", "CustomOption", "ClusterShape")
TOP = 16
JUDGE_ROUNDS = 15
SHIPPING_MARGIN = TuneSettings().margin


def product_search(backend: CublasLtBackend, problem, settings: TuneSettings) -> dict:
    """The product's own search (``CublasLtBackend.tune_one``), timed as a whole; its speedup is its best
    confirmed finalist against the default, without the shipping margin (``shipped`` applies it)."""
    start = time.monotonic()
    result = backend.tune_one(problem, settings)
    seconds = time.monotonic() - start
    finals = [c.final_us for c in result.candidates if c.name != DEFAULT and c.final_us and not c.error]
    speedup = result.default_us / min([*finals, result.default_us])
    return {
        "speedup": speedup,
        "shipped": speedup if speedup >= 1 + SHIPPING_MARGIN else 1.0,
        "winner": result.winner,
        "default_us": result.default_us,
        "seconds": seconds,
        "screened": sum(c.screen_us is not None for c in result.candidates),
        "screen_us": {c.name: round(c.screen_us, 3) for c in result.candidates if c.screen_us is not None},
        "finalists": {
            c.name: [c.screen_us, c.final_us] for c in result.candidates if c.final_us is not None and c.name != DEFAULT
        },
    }


NVMATH = "nvmath autotune"  # its pick's name among the contenders (it may also be a finalist of ours)


def nvmath_contender(problem, gemm: LtGemm, ops, ref, contenders: dict) -> dict:
    """nvmath's ``Matmul.autotune`` pick (``nvmath_pick``) added to the contenders of the final
    comparison, so it is judged in the same interleaved rounds as the ceiling's finalists."""
    try:
        record, tuning_s, count = nvmath_pick(problem, ops)
        if not gemm.check(record):
            return {
                "error": "its algorithm does not pass AlgoCheck under the BLAS-frame descriptors",
                "tuning_s": tuning_s,
            }
        launcher = gemm.launcher(record)
        check_numerics(problem, launcher, ops, ref)
    except Exception as err:  # reported in the row, the ceiling goes on
        return {"error": f"{type(err).__name__}: {err}"}
    contenders[NVMATH] = launcher
    return {"winner": read_config(record)["SolutionNameMin"], "tuning_s": tuning_s, "candidates": count}


def nvmath_result(problem, final: dict, default_us: float, limits) -> dict:
    """nvmath's pick against torch's default in the final rounds: raw, and as shipped (the same margin)."""
    us = final[NVMATH].median
    try:
        limits.check(problem, us, NVMATH)
    except BelowFloor as err:
        return {"error": str(err), "final_us": us}
    speedup = default_us / us
    return {"final_us": us, "speedup": speedup, "shipped": speedup if speedup >= 1 + SHIPPING_MARGIN else 1.0}


def run_problem(label: str, problem, backend: CublasLtBackend, timing: TimingSettings, args) -> dict:
    device, limits = backend.device, backend.limits
    cheap = product_search(
        backend, problem, TuneSettings(margin=0.0, neighbours=0, enumerate_budget=0, finalists=args.finalists)
    )
    product = product_search(
        backend, problem, TuneSettings(margin=0.0, finalists=args.finalists, neighbours=args.product_neighbours)
    )
    workspace = torch.empty(32 << 20, dtype=torch.uint8, device=device)
    gemm = LtGemm(problem, backend.handle, workspace)
    start = time.monotonic()  # the product's pool, over the whole space the ceiling samples
    heuristic = gemm.heuristic(128)
    near = gemm.space.neighbours(heuristic, keep=args.neighbours, tries=args.neighbours) if args.neighbours else []
    enumerated, space = gemm.space.sample(args.max_configs, seed=0, seconds=args.enum_s)
    pool = pool_of(problem, gemm, heuristic, near + enumerated, start)
    names, launchers = pool.names, [pool.launchers[n] for n in pool.names]
    configs = [None, *([pool.configs[n][f] for f in FIELDS] for n in names[1:])]
    enum_s = pool.build_s
    sets = rotating_operands(problem, device, timing)
    poison(sets)
    start = time.monotonic()  # the product's screen, without its time budget
    candidates = backend.screen(problem, pool, sets)
    screen_s = time.monotonic() - start
    screened = [candidates[n].screen_us for n in names]  # None: refused, or under the floor (its error says)
    errors = {n: c.error for n, c in candidates.items() if c.error}
    best = sorted((i for i in range(1, len(screened)) if screened[i] is not None), key=lambda i: screened[i])[:TOP]
    tiers = (pool.heuristic_end, *TIERS)  # the heuristic's list is a tier, as in the product
    chosen = sorted(set(best) | set(finalists([None, *screened[1:]], 4, tiers)), key=lambda i: screened[i])
    ref = reference(problem, sets[0])
    checked = backend.numerically_sound(problem, pool, [candidates[names[i]] for i in chosen], sets, ref, len(chosen))
    sound = [names.index(c.name) for c in checked]
    errors |= {names[i]: candidates[names[i]].error for i in chosen if candidates[names[i]].error}
    contenders = {names[i]: launchers[i] for i in [0, *sound]}
    ours = product["winner"]
    if ours in names and ours not in contenders:  # checked by the product's own search
        contenders[ours] = launchers[names.index(ours)]
    nvmath = nvmath_contender(problem, gemm, sets[0], ref, contenders) if args.nvmath else None
    del sets
    start = time.monotonic()
    fresh = rotating_operands(problem, device, dataclasses.replace(timing, seed=timing.seed + 1))
    final = interleaved(problem, contenders, fresh, timing)
    final_s = time.monotonic() - start
    del fresh
    judged = judge(problem, contenders, ours, final, timing, limits)
    gemm.close()
    default_us = final[DEFAULT].median
    finals = {names[i]: final[names[i]].median for i in sound}
    for name, us in list(finals.items()):
        try:
            limits.check(problem, us, name)
        except BelowFloor as err:
            errors[name] = str(err)
            del finals[name]
    winner = min(finals, key=finals.get, default=None)
    if nvmath and "error" not in nvmath:
        nvmath |= nvmath_result(problem, final, default_us, limits)
    ceiling_us = min(default_us, finals[winner]) if winner else default_us
    product["same_round_us"] = final[ours].median if ours in final else None  # DEFAULT is in final too
    if product["same_round_us"]:
        product["same_round_speedup"] = default_us / product["same_round_us"]
    ranked = sorted(product["screen_us"], key=product["screen_us"].get)
    product["ceiling_winner_screen_rank"] = ranked.index(winner) + 1 if winner in ranked else None
    row = {
        "label": label,
        "default_us": default_us,
        "ceiling_us": ceiling_us,
        "ceiling_speedup": default_us / ceiling_us,
        "ours_of_ceiling": ceiling_us / product["same_round_us"] if product["same_round_us"] else None,
        "judged": judged,
        "winner": winner,
        "floor_us": problem.floor_us(),
        "measured_floor_us": limits.floor_us(problem),
        "pool": len(names),
        "tiers": list(tiers),
        "heuristic": len(heuristic),
        "neighbours": len(near),
        **space,
        "below_floor": sum(1 for c in candidates.values() if (c.error or "").startswith(BelowFloor.__name__)),
        "seconds": {"enumerate": enum_s, "screen": screen_s, "final": final_s},
        "cheap": cheap,
        "product": product,
        **({"nvmath": nvmath} if nvmath else {}),
        "fields": list(FIELDS),
        "configs": configs,  # configs[i] is what screened_us[i] timed; 0: default
        "screened_us": [None if t is None else round(t, 3) for t in screened],
        "finalists": {
            names[i]: {"index": i, "screened_us": screened[i], "final_us": finals.get(names[i])} for i in sound
        },
        "errors": errors,
    }
    print(
        f"{label:22s} pool {len(names):5d} of {space['space']:>9d} (checked {space['checked']})  default "
        f"{default_us:9.2f}  ceiling {ceiling_us:9.2f}  x{row['ceiling_speedup']:.3f}  eff "
        f"{row['floor_us'] / default_us:.2f}->{row['floor_us'] / ceiling_us:.2f}  "
        f"{enum_s:4.1f}+{screen_s:4.1f}+{final_s:4.1f} s | heuristic-only x{cheap['speedup']:.3f} "
        f"{cheap['seconds']:.1f} s | product x{product['speedup']:.3f} {product['seconds']:.1f} s"
        + (
            f" (same rounds x{product['same_round_speedup']:.3f}, {row['ours_of_ceiling']:.1%} of the ceiling)"
            if row["ours_of_ceiling"]
            else ""
        )
        + (f" | judged apart: {judged['ours_of_ceiling']:.1%}" if judged else "")
        + (f" | nvmath x{nvmath.get('speedup', float('nan')):.3f}" if nvmath else ""),
        flush=True,
    )
    return row


def judge(problem, contenders: dict, ours: str, final: dict, timing: TimingSettings, limits) -> dict | None:
    """The default, the ceiling's winner and ours, timed again after the ceiling was chosen: ``JUDGE_ROUNDS``
    interleaved rounds on buffers of their own (seed + 2), so neither is the luckiest of many medians."""
    timed = {n: final[n].median for n in contenders if n != NVMATH}
    best = min(timed, key=timed.get)
    names = list(dict.fromkeys([DEFAULT, best, ours if ours in contenders else DEFAULT]))
    fresh = rotating_operands(problem, torch.device("cuda", 0), dataclasses.replace(timing, seed=timing.seed + 2))
    again = interleaved(problem, {n: contenders[n] for n in names}, fresh, timing, rounds=JUDGE_ROUNDS)
    del fresh
    try:
        for name in names:
            limits.check(problem, again[name].median, name)
    except BelowFloor:
        return None
    us = {n: again[n].median for n in names}
    ours_us = us[ours] if ours in us else us[DEFAULT]
    return {
        "ceiling": best,
        "rounds": JUDGE_ROUNDS,
        "default_us": us[DEFAULT],
        "ceiling_us": us[best],
        "ours_us": ours_us,
        "ceiling_speedup": us[DEFAULT] / us[best],
        "ours_speedup": us[DEFAULT] / ours_us,
        "ours_of_ceiling": us[best] / ours_us,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="all")
    parser.add_argument("--out", required=True)
    parser.add_argument("--enum-s", type=float, default=2.0)
    parser.add_argument("--max-configs", type=int, default=2500)
    parser.add_argument("--shard", default="0/1")
    parser.add_argument(
        "--finalists",
        type=int,
        default=TuneSettings().finalists,
        help="the product's finalists (TuneSettings.finalists)",
    )
    parser.add_argument(
        "--product-neighbours",
        type=int,
        default=TuneSettings().neighbours,
        help="the product's neighbours per heuristic result (TuneSettings.neighbours)",
    )
    parser.add_argument(
        "--neighbours",
        type=int,
        default=0,
        help="also try up to N configs one axis away from each heuristic result, before the draws "
        "(0: as the 2026-11-22 dataset was made)",
    )
    parser.add_argument(
        "--nvmath", action="store_true", help="also judge nvmath's Matmul.autotune pick in the ceiling's final rounds"
    )
    parser.add_argument("--deadline-s", type=float, default=1e9, help="stop starting problems after this")
    parser.add_argument(
        "--start",
        type=int,
        default=0,
        help="skip the first N problems (a run cut by its "
        "deadline goes on; bench/ceiling_replay.py --merge joins the parts)",
    )
    args = parser.parse_args()
    index, count = (int(x) for x in args.shard.split("/"))
    problems = problem_sets()[args.set][index::count][args.start :]
    started = time.monotonic()
    device = torch.device("cuda", 0)
    backend = CublasLtBackend(0)
    limits = backend.limits
    timing, rows = TimingSettings(), []
    for label, problem in problems:
        if time.monotonic() - started > args.deadline_s:
            break
        rows.append(run_problem(label, problem, backend, timing, args))
        torch.cuda.empty_cache()
        write(args.out, rows, limits, args, started, device)
    return 0


def write(out: str, rows: list, limits, args, started: float, device) -> None:
    """The dataset so far (rewritten after every problem: a time-out leaves what was measured)."""
    data = {
        "date": datetime.date.today().isoformat(),
        "device": device_info(device),
        "versions": {"torch": torch.__version__, "cublasLt": lt.get_version()},
        "limits": {"bandwidth_Bps": limits.bandwidth, "flops": {f"{d}/{c}": v for (d, c), v in limits.flops.items()}},
        "settings": {
            k: getattr(args, k)
            for k in (
                "enum_s",
                "max_configs",
                "shard",
                "neighbours",
                "start",
                "nvmath",
                "finalists",
                "product_neighbours",
            )
        },
        "wall_s": time.monotonic() - started,
        "summary": summarize(rows),
        "problems": rows,
    }
    with gzip.open(out + ".tmp", "wt") as f:
        json.dump(data, f, separators=(",", ":"))
    Path(out + ".tmp").replace(out)


if __name__ == "__main__":
    raise SystemExit(main())

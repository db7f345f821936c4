"""The ceiling of cuBLASLt tuning on a GPU: every config that passes cublasLtMatmulAlgoCheck, screened.

    python bench/cublaslt_ceiling.py --set all --out bench/results/cublaslt_ceiling_<gpu>_<date>.json.gz \\
        [--enum-s 2] [--screen-s 4] [--max-configs 2500] [--shard 0/1]

Per problem (the 53 of ``bench/cublaslt_search.py``): the candidate order is torch's default, the cuBLASLt
heuristic's list (128 requested), with ``--neighbours N`` the valid configs one axis away from each of its
results (``pipeline.backends.space``), then the enumeration: algorithm ids x tiles x stages x cluster shapes x
custom options (all the caps allow) x swizzle x {no split, split-K in 2..32 x each reduction scheme}, drawn
at random without replacement, round-robin over ids, each through ``cublasLtMatmulAlgoCheck`` under torch's
32 MiB workspace, until ``--enum-s`` or ``--max-configs``. The size of the whole space is recorded, so the
dataset says what share of it was seen.

Screening is batched: configs are enqueued back to back behind a GPU spin long enough to cover the host's
enqueueing, each timed by events over one pass through the rotating operand copies (>= 2, >= 3x L2), so
thousands of configs cost little more than their kernels. Times under the measured floor are recorded as
harness errors. Finalists: the best 16 screened plus the tier finalists (``pipeline.backends.selection``),
numerics-checked, then the full harness (CUDA-graph replays, 7 interleaved rounds with torch's default)
on fresh operand buffers. The ceiling is the best confirmed finalist.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gzip
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from cublaslt_search import problem_sets
from nvmath.bindings import cublasLt as lt

from pipeline.backends import selection
from pipeline.backends.base import DEFAULT
from pipeline.backends.cublaslt import (
    CONFIG_FIELDS,
    LtGemm,
    _buffer,
    _cap,
    _cap_int,
    new_record,
    read_config,
)
from pipeline.backends.measure import (
    BelowFloor,
    NumericsError,
    TimingSettings,
    check_numerics,
    device_info,
    interleaved,
    measure_limits,
    poison,
    rotating_operands,
)
from pipeline.backends.space import decode, neighbours
from pipeline.backends.space import size as space_size
from pipeline.backends.torch_gemm import reference, torch_launcher
from pipeline.stages.validate import floor_us
from pipeline.stats import geomean

SPLITS = (2, 3, 4, 5, 6, 8, 12, 16, 32)
FIELDS = ("AlgoId", "Tile", "Stages", "SplitK", "ReductionScheme", "Swizzle", "CustomOption", "ClusterShape")
TOP = 16


def _axes(gemm: LtGemm, algo_id: int) -> tuple[object, list[list]] | None:
    base = new_record()
    try:
        lt.matmul_algo_init(gemm.handle, gemm.compute, gemm.scale, *gemm.types, algo_id, base.ctypes.data)
    except lt.cuBLASLtError:
        return None
    caps = lt.MatmulAlgoCapAttribute
    tiles = [int(t) for t in _cap(base, caps.TILE_IDS)] or [0]
    stages = [int(s) for s in _cap(base, caps.STAGES_IDS)] or [0]
    cluster_cap = getattr(caps, "CLUSTER_SHAPE_IDS", None)
    try:
        clusters = ([int(c) for c in _cap(base, cluster_cap)] if cluster_cap is not None else []) or [0]
    except lt.cuBLASLtError:
        clusters = [0]
    customs = list(range(_cap_int(base, caps.CUSTOM_OPTION_MAX) + 1))
    swizzles = [0, 1] if _cap_int(base, caps.CTA_SWIZZLING_SUPPORT) else [0]
    red_mask = _cap_int(base, caps.REDUCTION_SCHEME_MASK)
    reductions = [bit for bit in (1, 2, 4) if red_mask & bit] or [0]
    splits = [(1, 0)] + ([(s, r) for s in SPLITS for r in reductions] if _cap_int(base, caps.SPLITK_SUPPORT) else [])
    return base, [tiles, stages, splits, swizzles, customs, clusters]


def _record(base, algo_id: int, combo) -> object:
    tile, stage, (split, red), swizzle, custom, cluster = combo
    record = base.copy()
    values = {"Tile": tile, "Stages": stage, "SplitK": split, "ReductionScheme": red, "Swizzle": swizzle,
              "CustomOption": custom, "ClusterShape": cluster}
    for key, value in values.items():
        attr = CONFIG_FIELDS[key]
        if key == "ClusterShape" and not value:
            continue
        buf = _buffer(lt.get_matmul_algo_config_attribute_dtype(attr), value)
        lt.matmul_algo_config_set_attribute(record.ctypes.data, attr, buf.ctypes.data, buf.nbytes)
    return record


def enumerate_space(gemm: LtGemm, seconds: float, cap: int, seed: int) -> tuple[list, dict]:
    """Valid records drawn at random from the whole space, round-robin over ids; and the space's size."""
    ids = lt.matmul_algo_get_ids(gemm.handle, gemm.compute, gemm.scale, *gemm.types, 128)
    rng, streams, size = random.Random(seed), [], 0
    for algo_id in ids:
        axes = _axes(gemm, algo_id)
        if axes is None:
            continue
        base, lists = axes
        total = space_size(lists)
        size += total
        order = rng.sample(range(total), min(total, cap * 4))  # more than enough draws for one id
        streams.append((algo_id, base, lists, iter(order)))
    found, checked, deadline = [], 0, time.monotonic() + seconds
    while streams and len(found) < cap and time.monotonic() < deadline:
        for stream in list(streams):
            algo_id, base, lists, order = stream
            index = next(order, None)
            if index is None:
                streams.remove(stream)
                continue
            record = _record(base, algo_id, decode(index, lists))
            checked += 1
            if gemm.check(record):
                found.append(record)
    return found, {"space": size, "checked": checked, "ids": list(map(int, ids))}


def neighbourhood(gemm: LtGemm, records: list, per_config: int) -> list:
    """Valid configs one axis away from each of ``records`` (the heuristic's), nearest values first, up to
    ``per_config`` tried around each: the way into families random draws miss (nvjet, algorithm 66)."""
    found = []
    for record in records:
        config = read_config(record)
        axes = _axes(gemm, config["AlgoId"])
        if axes is None:
            continue
        base, lists = axes
        combo = (config["Tile"], config["Stages"], (config["SplitK"], config["ReductionScheme"]), config["Swizzle"],
                 config["CustomOption"], config["ClusterShape"])
        for tried, near in enumerate(neighbours(combo, lists)):
            if tried >= per_config:
                break
            candidate = _record(base, config["AlgoId"], near)
            if gemm.check(candidate):
                found.append(candidate)
    return found


def screen_batch(launchers: list, sets: list, limits, problem, spin_us: float = 20000.0) -> list[float | None]:
    """One event-timed pass over the operand copies per launcher, enqueued in chunks behind a GPU spin that
    covers the host's enqueueing (its length learnt from the previous chunk)."""
    times: list[float | None] = [None] * len(launchers)
    cycles_per_us = 1980  # H100/H200 boost clock in MHz: a spin that runs at a lower clock only lasts longer
    chunk, i = 16, 0
    while i < len(launchers):
        part = range(i, min(i + chunk, len(launchers)))
        torch.cuda._sleep(int(spin_us * cycles_per_us))
        host = time.perf_counter()
        events = []
        for j in part:
            launchers[j](sets[-1])  # kernel loading, outside the timed pass
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for ops in sets:
                launchers[j](ops)
            end.record()
            events.append((j, start, end))
        host_us = (time.perf_counter() - host) * 1e6
        torch.cuda.synchronize()
        for j, start, end in events:
            us = start.elapsed_time(end) * 1000.0 / len(sets)
            try:
                limits.check(problem, us, "screen")
                times[j] = us
            except BelowFloor:
                times[j] = -us  # recorded, never a finalist
        spin_us = max(500.0, 1.5 * host_us)
        i += chunk
    return times


def confirm(problem, names: list, launchers: list, indices: list[int], timing: TimingSettings, device,
            limits) -> dict[str, float]:
    """The full harness on fresh buffers: torch's default (index 0) and ``indices``, interleaved; medians of
    those that are numerically sound and above the floor."""
    sets = rotating_operands(problem, device, timing)
    ref = reference(problem, sets[0])
    sound = []
    for i in indices:
        try:
            check_numerics(problem, launchers[i], sets[0], ref)
            sound.append(i)
        except (NumericsError, lt.cuBLASLtError, RuntimeError):
            pass
    del sets, ref
    fresh = rotating_operands(problem, device, dataclasses.replace(timing, seed=timing.seed + 1))
    final = interleaved(problem, {names[i]: launchers[i] for i in [0, *sound]}, fresh, timing)
    out = {}
    for name, stats in final.items():
        try:
            limits.check(problem, stats.median, name)
            out[name] = stats.median
        except BelowFloor:
            pass
    return out


def cheap_search(problem, gemm: LtGemm, limits, timing: TimingSettings, device) -> dict:
    """The search the dataset points to: the heuristic's list only, one batched screen, its tier finalists
    confirmed against the default; timed as a whole."""
    start = time.monotonic()
    records = gemm.heuristic(128)
    names = [DEFAULT, *(read_config(r)["SolutionNameMin"] for r in records)]
    launchers = [torch_launcher(problem), *(gemm.launcher(r) for r in records)]
    sets = rotating_operands(problem, device, timing)
    poison(sets)
    screened = screen_batch(launchers, sets, limits, problem)
    del sets
    valid = [t if t is not None and t > 0 else None for t in screened]
    final = confirm(problem, names, launchers, selection.finalists([None, *valid[1:]], 4), timing, device, limits)
    best = min((us for name, us in final.items() if name != DEFAULT), default=final[DEFAULT])
    return {"speedup": final[DEFAULT] / min(best, final[DEFAULT]), "default_us": final[DEFAULT],
            "seconds": time.monotonic() - start, "screened": len(names)}


def run_problem(label: str, problem, handle, limits, timing: TimingSettings, args) -> dict:
    device = torch.device("cuda", 0)
    workspace = torch.empty(32 << 20, dtype=torch.uint8, device=device)
    gemm = LtGemm(problem, handle, workspace)
    cheap = cheap_search(problem, gemm, limits, timing, device)
    start = time.monotonic()
    heuristic = gemm.heuristic(128)
    near = neighbourhood(gemm, heuristic, args.neighbours) if args.neighbours else []
    enumerated, space = enumerate_space(gemm, args.enum_s, args.max_configs, seed=0)
    names, configs, launchers = [DEFAULT], [None], [torch_launcher(problem)]
    seen = {DEFAULT}
    for record in heuristic + near + enumerated:
        config = read_config(record)
        if config["SolutionNameMin"] in seen:
            continue
        seen.add(config["SolutionNameMin"])
        names.append(config["SolutionNameMin"])
        configs.append([config[f] for f in FIELDS])
        launchers.append(gemm.launcher(record))
    enum_s = time.monotonic() - start
    sets = rotating_operands(problem, device, timing)
    poison(sets)
    start = time.monotonic()
    screened = screen_batch(launchers, sets, limits, problem)
    screen_s = time.monotonic() - start
    valid = [t if t is not None and t > 0 else None for t in screened]
    best = sorted((i for i in range(1, len(valid)) if valid[i] is not None), key=lambda i: valid[i])[:TOP]
    chosen = sorted(set(best) | set(selection.finalists([None, *valid[1:]], 4)), key=lambda i: valid[i])
    ref = reference(problem, sets[0])
    sound, errors = [], {}
    for i in chosen:
        try:
            check_numerics(problem, launchers[i], sets[0], ref)
            sound.append(i)
        except (NumericsError, lt.cuBLASLtError, RuntimeError) as err:
            errors[names[i]] = f"{type(err).__name__}: {err}"
    del sets
    start = time.monotonic()
    fresh = rotating_operands(problem, device, dataclasses.replace(timing, seed=timing.seed + 1))
    final = interleaved(problem, {names[i]: launchers[i] for i in [0, *sound]}, fresh, timing)
    final_s = time.monotonic() - start
    del fresh
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
    ceiling_us = min(default_us, finals[winner]) if winner else default_us
    row = {"label": label, "default_us": default_us, "ceiling_us": ceiling_us,
           "ceiling_speedup": default_us / ceiling_us,
           "winner": winner, "floor_us": floor_us(problem), "measured_floor_us": limits.floor_us(problem),
           "pool": len(names), "heuristic": len(heuristic), "neighbours": len(near), **space,
           "below_floor": sum(1 for t in screened if t is not None and t < 0),
           "seconds": {"enumerate": enum_s, "screen": screen_s, "final": final_s}, "cheap": cheap,
           "fields": list(FIELDS), "configs": configs,  # configs[i] is what screened_us[i] timed; 0: default
           "screened_us": [None if t is None else round(t, 3) for t in screened],
           "finalists": {names[i]: {"index": i, "screened_us": screened[i], "final_us": finals.get(names[i])}
                         for i in sound},
           "errors": errors}
    print(f"{label:22s} pool {len(names):5d} of {space['space']:>9d} (checked {space['checked']})  default "
          f"{default_us:9.2f}  ceiling {ceiling_us:9.2f}  x{row['ceiling_speedup']:.3f}  eff "
          f"{row['floor_us'] / default_us:.2f}->{row['floor_us'] / ceiling_us:.2f}  "
          f"{enum_s:4.1f}+{screen_s:4.1f}+{final_s:4.1f} s | cheap x{cheap['speedup']:.3f} {cheap['seconds']:.1f} s",
          flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="all")
    parser.add_argument("--out", required=True)
    parser.add_argument("--enum-s", type=float, default=2.0)
    parser.add_argument("--max-configs", type=int, default=2500)
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--neighbours", type=int, default=0,
                        help="also try up to N configs one axis away from each heuristic result, before the draws "
                             "(0: as the 2026-11-22 dataset was made)")
    parser.add_argument("--deadline-s", type=float, default=1e9, help="stop starting problems after this")
    args = parser.parse_args()
    index, count = (int(x) for x in args.shard.split("/"))
    problems = problem_sets()[args.set][index::count]
    started = time.monotonic()
    device = torch.device("cuda", 0)
    limits = measure_limits(device)
    handle, timing, rows = lt.create(), TimingSettings(), []
    for label, problem in problems:
        if time.monotonic() - started > args.deadline_s:
            break
        rows.append(run_problem(label, problem, handle, limits, timing, args))
        torch.cuda.empty_cache()
        write(args.out, rows, limits, args, started, device)
    return 0


def write(out: str, rows: list, limits, args, started: float, device) -> None:
    """The dataset so far (rewritten after every problem: a time-out leaves what was measured)."""
    speedups = [r["ceiling_speedup"] for r in rows]
    data = {"date": datetime.date.today().isoformat(), "device": device_info(device),
            "versions": {"torch": torch.__version__, "cublasLt": lt.get_version()},
            "limits": {"bandwidth_Bps": limits.bandwidth,
                       "flops": {f"{d}/{c}": v for (d, c), v in limits.flops.items()}},
            "settings": {k: getattr(args, k) for k in ("enum_s", "max_configs", "shard", "neighbours")},
            "wall_s": time.monotonic() - started,
            "summary": {"problems": len(rows), "ceiling_geomean": geomean(speedups) if rows else None,
                        "cheap_geomean": geomean([r["cheap"]["speedup"] for r in rows]) if rows else None,
                        "cheap_s": sum(r["cheap"]["seconds"] for r in rows),
                        "exhaustive_s": sum(sum(r["seconds"].values()) for r in rows),
                        "ceiling_min": min(speedups, default=None),
                        "eff_default": geomean([r["floor_us"] / r["default_us"] for r in rows]) if rows else None,
                        "eff_ceiling": geomean([r["floor_us"] / r["ceiling_us"] for r in rows]) if rows else None},
            "problems": rows}
    with gzip.open(out + ".tmp", "wt") as f:
        json.dump(data, f, separators=(",", ":"))
    Path(out + ".tmp").replace(out)


if __name__ == "__main__":
    raise SystemExit(main())

"""What a decode GEMM of B bytes can reach in one launch, against #36's HBM limit (the bandwidth of a 1 GiB
device copy or read): a tuned streaming read of B bytes, in the harness of ``decode_hbm.py`` (CUDA graphs of
48 calls over rotating buffers together more than 3x the L2, medians of interleaved replays). A kernel that
moves B bytes cannot start, ramp up and drain faster than a kernel that only reads them, so the read's
fraction is what "fraction of the HBM limit" can mean at that size.

``measure`` also probes, on the small projections (Llama-3-8B and Qwen2-7B q/k/v and o, T = 1, 4, 8; the
Llama ones as FP8 too), whether a wider config space or split-K reduced in the same launch
(``floor_kernels.gemm_fixup``) beats the product's config space (``triton_gemm.configs``): every config is
screened, the best three of each family and torch's default are timed in 15 interleaved rounds, and each is
checked against the fp32 reference. ``--families`` picks the families (``rows``: ``floor_kernels.gemv_rows``,
T tokens multiplied by each weight tile elementwise; ``swap``: the product's ``swapped`` kernel, the skinny tile
with the weights on the MMA's M side, over configs beyond its space; ``swapped``: the product's swapped configs
alone; ``persist``: that tile on a persistent grid, ``floor_kernels.swapped_persistent`` and ``swapped_flat``;
``longk``: the swapped tile over 512- and 1024-long K tiles; ``wholek``: one-token configs whose K tile is the
whole row; ``literal``: ``floor_kernels.gemv_literal`` and ``gemv_sized``, a one-token kernel with its sizes
literals or arguments; ``inductor``: max-autotune's own compile of the call; ``narrow``: the swapped tile 16 or 32
columns wide, ``narrow_configs``; ``rowslit``: ``rows`` compiled for one frame,
``floor_kernels.gemv_rows_literal``), ``--gemms`` and ``--tokens``
the GEMMs (``SMALL``, ``LARGE`` and ``UNFUSED``); ``--evict`` times the product's best three configs again with its
kernel's loads given Inductor's eviction policies and stripped of any (``with_policies``); ``--constant-k`` its
best three one-token configs compiled for the call's ``K`` (``with_constant_k``); ``--early-scales`` its best
three FP8 configs with the scales loaded before the K loop (``with_early_scales``); ``--literal-sizes`` its best
three ``gemm`` configs at 2-16 tokens with every size and stride a constant (``with_literal_sizes``; the swapped
tile takes them so since 2026-11-27); each of these times only configs of the kernels its variant changes.
``analyse`` (CPU) puts ``decode_hbm.py``'s rows against the floors.

    python bench/decode_floor.py measure --out FLOORS.json [--dtypes bf16 fp8] [--sizes B ...] [--programs P ...]
        [--no-floors] [--tma] [--families F ...] [--gemms MODEL:GEMM ...] [--tokens T ...] [--evict]
        [--constant-k] [--early-scales] [--literal-sizes]
    python bench/decode_floor.py analyse FLOORS.json DECODE_HBM.json [--out ANALYSIS.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

SIZES = (16_801_792, 25_202_688, 33_595_392, 50_380_800, 117_497_856)  # FP8 o/qkv, bf16 o, qkv, down
PROGRAMS = (528, 1056, 2112, 4224)
SMALL = (("llama3-8b", "qkv", 6144, 4096), ("llama3-8b", "o", 4096, 4096), ("qwen2-7b", "qkv", 4608, 3584),
         ("qwen2-7b", "o", 3584, 3584))  # fmt: skip
LARGE = (("llama3-8b", "gate_up", 28672, 4096), ("llama3-8b", "down", 4096, 14336),
         ("llama3-8b", "lm_head", 128256, 4096), ("qwen2-7b", "gate_up", 37888, 3584),
         ("qwen2-7b", "down", 3584, 18944), ("qwen2-7b", "lm_head", 152064, 3584))  # fmt: skip
UNFUSED = (("llama3-8b", "gate", 14336, 4096), ("qwen2-7b", "gate", 18944, 3584))  # gate or up, as HF models run them
FP8_MODELS = ("llama3-8b",)
FAMILIES = (
    *("product", "wider", "fixup", "tma", "rows", "swap", "swapped", "persist", "swapfix", "longk", "wholek"),
    *("literal", "inductor", "narrow", "rowslit"),
)
FINALIST_PREFIXES = (
    *("triton_", "wider:", "fixup:", "swapfix:", "tma:", "rows:", "swap:", "persist", "flat", "longk:", "wholek:"),
    *("literal:", "sized:", "inductor", "narrow:", "rowslit:"),
)


def scale_args(ops, out) -> tuple:
    """(scaled, X's scale, Y's scale) as the floor kernels take them: torch's ``scale_b`` scales X (the BLAS B),
    its ``scale_a`` Y; unscaled, ``out`` stands in for both pointers, which the kernel then never reads."""
    scaled = ops.scale_a is not None
    return (True, ops.scale_b, ops.scale_a) if scaled else (False, out, out)


def floor_at(floors: list[dict], size: float) -> float:
    """The read's fraction at ``size`` bytes: log-linear between the measured sizes, flat beyond them."""
    points = sorted((f["bytes"], f["read_frac"]) for f in floors)
    if size <= points[0][0]:
        return points[0][1]
    for (b0, v0), (b1, v1) in itertools.pairwise(points):
        if size <= b1:
            return v0 + (math.log(size / b0) / math.log(b1 / b0)) * (v1 - v0)
    return points[-1][1]


def analyse(floors: list[dict], decode_rows: list[dict]) -> dict:
    """Per ``decode_hbm`` row the read floor at its bytes and each method over it; geomeans per model and all."""
    from pipeline.stats import geomean

    methods = list(decode_rows[0]["hbm"])
    rows = []
    for r in decode_rows:
        floor = floor_at(floors, r["bytes"])
        rows.append({
            "model": r["model"], "gemm": r["gemm"], "tokens": r["tokens"], "bytes": r["bytes"],
            "read_floor": round(floor, 4), "of_floor": {m: round(r["hbm"][m] / floor, 4) for m in methods},
        })  # fmt: skip
    groups = {"all": rows} | {m: [r for r in rows if r["model"] == m] for m in dict.fromkeys(r["model"] for r in rows)}
    summary = {
        name: {
            "gemms": len(group),
            "read_floor": round(geomean(r["read_floor"] for r in group), 4),
            "of_floor": {m: round(geomean(r["of_floor"][m] for r in group), 4) for m in methods},
        }
        for name, group in groups.items()
    }
    return {"geomean": summary, "rows": rows}


def timed(candidates: dict, sets: list, rounds: int) -> dict[str, float]:
    """Median microseconds per call of each candidate, its calls captured in a CUDA graph over ``sets``
    (``measure.GraphTimer``), replays interleaved (forward, then backward) over ``rounds``; a candidate that
    fails to compile or capture is left out, as Triton's autotuner scores such a config infinite time."""
    from pipeline.backends.measure import GraphTimer, TimingSettings

    timers = {}
    for name, launch in candidates.items():
        try:
            timers[name] = GraphTimer(launch, sets, TimingSettings())
        except Exception:  # any compile or launch failure
            continue
    samples = {name: [] for name in timers}
    names = list(timers)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name].append(timers[name].sample())
    return {name: statistics.median(v) for name, v in samples.items()}


def read_floor(size: int, device, limit: float, programs=PROGRAMS) -> dict:
    """The best streaming read of ``size`` bytes (``floor_kernels.read`` over block sizes, program counts and
    warps), a copy of ``size`` bytes and one of half as many, over rotating buffers together more than 3x the
    L2; each as a fraction of ``limit`` (bytes/s) by the bytes it moves."""
    import floor_kernels as fk  # bench/ is the script's path
    import torch
    import triton

    from pipeline.backends.measure import TimingSettings, copies_of, l2_bytes

    copies = copies_of(size, l2_bytes(device), TimingSettings().l2_factor)
    srcs = [torch.empty(size, dtype=torch.uint8, device=device).random_() for _ in range(copies)]
    dsts = [torch.empty_like(s) for s in srcs]
    sums = torch.empty(1 << 16, dtype=torch.int32, device=device)
    half, words = size // 2, size // 4
    candidates = {"copy": lambda i: dsts[i].copy_(srcs[i]), "copy_half": lambda i: dsts[i][:half].copy_(srcs[i][:half])}
    for block in (1024, 2048, 4096):
        for count in programs:
            per = triton.cdiv(triton.cdiv(words, count), block) * block
            for warps in (4, 8):
                candidates[f"read_b{block}_p{count}_w{warps}"] = lambda i, b=block, p=per, w=warps: fk.read[
                    (triton.cdiv(words, p),)
                ](srcs[i].view(torch.int32), sums, words, b, p, num_warps=w)
    us = timed(candidates, list(range(copies)), 7)
    read_us, read_config = min((t, n) for n, t in us.items() if n.startswith("read"))
    return {
        "bytes": size, "copy_us": us["copy"], "copy_frac": 2 * size / limit / us["copy"] * 1e6,
        "copy_half_frac": size / limit / us["copy_half"] * 1e6, "read_us": read_us, "read_config": read_config,
        "read_frac": size / limit / read_us * 1e6,
    }  # fmt: skip


def measure(args: argparse.Namespace) -> dict:
    import floor_kernels as fk  # bench/ is the script's path
    import torch
    import triton

    from pipeline.backends.measure import (
        TimingSettings,
        bandwidth,
        device_info,
        poison,
        relative_error,
        rotating_operands,
    )
    from pipeline.kernels import triton_gemm as tg
    from pipeline.kernels.torch_gemm import reference, torch_launcher, torch_views
    from pipeline.problem import TENSORWISE_E4M3, GemmProblem

    def fixup(problem: GemmProblem, c: tg.TritonConfig):
        state = {}

        def launch(ops) -> None:
            x, y, out = torch_views(problem, ops)
            (rows, k), cols = x.shape, y.shape[1]
            if not state:
                tiles = triton.cdiv(rows, c.block_r) * triton.cdiv(cols, c.block_c)
                state["part"] = torch.empty((c.split_k, rows, cols), device=x.device, dtype=torch.float32)
                state["count"] = torch.zeros(tiles, device=x.device, dtype=torch.int32)
            scaled, sx, sy = scale_args(ops, out)
            k_per = triton.cdiv(triton.cdiv(k, c.split_k), c.block_k) * c.block_k
            kernel = fk.swapped_fixup if c.swapped else fk.gemv_fixup if c.block_r == 1 else fk.gemm_fixup
            grid = (triton.cdiv(rows, c.block_r) * triton.cdiv(cols, c.block_c), c.split_k)
            kernel[grid](x, y, out, state["part"], state["count"], sx, sy, rows, cols, k, k_per, *x.stride(),
                         *y.stride(), *out.stride(), scaled, c.split_k, c.block_r, c.block_c, c.block_k,
                         num_warps=c.num_warps, num_stages=c.num_stages)  # fmt: skip

        return launch

    def tma(problem: GemmProblem, c: tg.TritonConfig):
        from triton.tools.tensor_descriptor import TensorDescriptor

        def launch(ops) -> None:
            x, y, out = torch_views(problem, ops)
            (rows, k), cols = x.shape, y.shape[1]
            w = y.t()  # [C, K], K contiguous: the weight as F.linear holds it
            scaled, sx, sy = scale_args(ops, out)
            w_desc = TensorDescriptor.from_tensor(w, [c.block_c, c.block_k])
            grid = (triton.cdiv(cols, c.block_c),)
            if c.block_r == 1:
                fk.gemv_tma[grid](x, w_desc, out, sx, sy, cols, k, scaled, c.block_c, c.block_k,
                                  num_warps=c.num_warps, num_stages=c.num_stages)  # fmt: skip
            else:
                x_desc = TensorDescriptor.from_tensor(x, [c.block_r, c.block_k])
                fk.skinny_tma[grid](x_desc, w_desc, out, sx, sy, rows, cols, k, out.stride(0), scaled, c.block_r,
                                    c.block_c, c.block_k, num_warps=c.num_warps, num_stages=c.num_stages)  # fmt: skip

        return launch

    def rows(problem: GemmProblem, c: tg.TritonConfig, kernel=None):
        kernel = kernel or fk.gemv_rows

        def launch(ops) -> None:
            x, y, out = torch_views(problem, ops)
            (r, k), cols = x.shape, y.shape[1]
            scaled, sx, sy = scale_args(ops, out)
            kernel[(triton.cdiv(cols, c.block_c),)](
                x, y, out, sx, sy, r, cols, k, *x.stride(), *y.stride(), *out.stride(), scaled, c.block_r,
                c.block_c, c.block_k, num_warps=c.num_warps, num_stages=c.num_stages)  # fmt: skip

        return launch

    def literal(problem: GemmProblem, c: tg.TritonConfig, kernel: str):
        fn = fk.gemv_literal if kernel == "literal" else fk.gemv_sized

        def launch(ops) -> None:
            x, y, out = torch_views(problem, ops)
            scaled, sx, sy = scale_args(ops, out)
            cols, k = y.shape[1], x.shape[1]
            fn[(triton.cdiv(cols, c.block_c),)](x, y, out, sx, sy, cols, k, scaled, c.block_c, c.block_k,
                                                num_warps=c.num_warps, num_stages=c.num_stages)  # fmt: skip

        return launch

    def inductor(problem: GemmProblem):
        # max-autotune's own kernel for the call, in this harness: its output is a buffer of its own (the
        # relative error below is then not its figure: ``inductor`` is left out of the numerics)
        import torch.nn.functional as F

        torch._dynamo.reset()
        if problem.op == "scaled_gemm":
            compiled = torch.compile(lambda x, w, sx, sw: torch._scaled_mm(x, w, sx, sw, out_dtype=torch.bfloat16),
                                     mode="max-autotune-no-cudagraphs", dynamic=False)  # fmt: skip

            def launch(ops) -> None:
                x, y, _ = torch_views(problem, ops)
                compiled(x, y, ops.scale_b, ops.scale_a)
        else:
            compiled = torch.compile(F.linear, mode="max-autotune-no-cudagraphs", dynamic=False)

            def launch(ops) -> None:
                x, y, _ = torch_views(problem, ops)
                compiled(x, y.t())

        return launch

    def persist(problem: GemmProblem, c: tg.TritonConfig, programs: int, flat: bool):
        kernel = fk.swapped_flat if flat else fk.swapped_persistent

        def launch(ops) -> None:
            x, y, out = torch_views(problem, ops)
            (r, k), cols = x.shape, y.shape[1]
            scaled, sx, sy = scale_args(ops, out)
            kernel[(programs,)](x, y, out, sx, sy, r, cols, k, *x.stride(), *y.stride(), *out.stride(), scaled,
                                c.block_r, c.block_c, c.block_k, programs, num_warps=c.num_warps,
                                num_stages=c.num_stages)  # fmt: skip

        return launch

    device = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    limit = bandwidth(device)
    record = {"date": time.strftime("%Y-%m-%d"), "device": device_info(device), "triton": triton.__version__,
              "copy_bandwidth_bytes_per_s": limit, "args": vars(args), "floors": [], "rows": []}  # fmt: skip
    for size in [] if args.no_floors else args.sizes:
        record["floors"].append(read_floor(size, device, limit, args.programs))
        print(record["floors"][-1], flush=True)
    source = Path(tg.__file__).with_name("triton_kernels.py").read_text()
    variants = {}  # the product's kernels as --evict and --constant-k change them, each loaded once
    if args.evict:
        for label, policies in (("plain", False), ("evict", True)):
            variants[label] = load_kernels(with_policies(with_policies(source, "gemv", policies), "gemm", policies))
    if args.constant_k:
        variants["kconst"] = load_kernels(with_constant_k(source))
    if args.literal_sizes:
        variants["sized"] = load_kernels(source, "sized_kernels")
        variants["literal"] = load_kernels(with_literal_sizes(source), "literal_kernels")
    if args.early_scales:
        variants["late"] = load_kernels(source, "late_kernels")
        variants["early"] = load_kernels(with_early_scales(source))
    # (two variants, the GEMMs they apply to, the kernels the variant rewrites): the product's best three configs
    # run by those kernels timed again in each (another kernel's configs would run the same code in both)
    paired = []
    if args.evict:  # its kernel's loads with and without policies
        paired.append((("plain", "evict"), lambda dtype, tokens: True, {"gemv", "gemm"}))
    if args.early_scales:  # FP8's scales loaded after or before the K loop
        paired.append((("late", "early"), lambda dtype, tokens: dtype == "fp8", {"gemm", "swapped", "gemv"}))
    if args.literal_sizes:  # 2-16 tokens, gemm's sizes arguments or literals (swapped takes them so already)
        paired.append((("sized", "literal"), lambda dtype, tokens: tokens > 1, {"gemm"}))
    families = set(args.families) | ({"tma"} if args.tma else set())
    shapes = [s for s in SMALL + LARGE + UNFUSED if f"{s[0]}:{s[1]}" in args.gemms] if args.gemms else SMALL
    for dtype in args.dtypes:
        for model, name, n_out, k in shapes:
            if dtype == "fp8" and model not in FP8_MODELS:
                continue
            for tokens in args.tokens:
                op, fields = ("scaled_gemm", TENSORWISE_E4M3) if dtype == "fp8" else ("gemm", {})
                problem = GemmProblem(op, "T", "N", n_out, tokens, k, k, k, n_out, **fields)
                sets = rotating_operands(problem, device, TimingSettings())
                ref = reference(problem, sets[0])
                product = tg.configs(problem, sms)
                offered = set(product)
                wider = [c for c in wider_configs(problem) if c not in offered]
                swapped = [c for c in swap_configs(problem) if c not in offered]
                candidates = {"default": torch_launcher(problem)}
                if "product" in families:
                    candidates |= {c.name: tg.launcher(problem, c) for c in product}
                if "wider" in families:
                    candidates |= {"wider:" + c.name: tg.launcher(problem, c) for c in wider}
                if "fixup" in families:
                    candidates |= {"fixup:" + c.name: fixup(problem, c) for c in fixup_configs(problem)}
                if "swapfix" in families:
                    candidates |= {"swapfix:" + c.name: fixup(problem, c) for c in swapfix_configs(problem, sms)}
                if "tma" in families:
                    candidates |= {"tma:" + c.name: tma(problem, c) for c in tma_configs(problem)}
                if "swap" in families:
                    candidates |= {"swap:" + c.name: tg.launcher(problem, c) for c in swapped}
                if "literal" in families:
                    for c in literal_configs(problem):
                        for kernel in ("literal", "sized"):
                            candidates[f"{kernel}:{c.name}"] = literal(problem, c, kernel)
                if "inductor" in families and tokens == 1:
                    candidates["inductor"] = inductor(problem)
                if "wholek" in families:
                    candidates |= {"wholek:" + c.name: tg.launcher(problem, c) for c in wholek_configs(problem)}
                if "longk" in families:
                    candidates |= {"longk:" + c.name: tg.launcher(problem, c) for c in longk_configs(problem)}
                if "swapped" in families:  # the product's swapped configs alone
                    candidates |= {c.name: tg.launcher(problem, c) for c in tg._swapped_configs(problem, sms)}
                if "persist" in families:
                    for c, programs, flat in persist_configs(problem, sms):
                        label = f"{'flat' if flat else 'persist'}{programs}:{c.name}"
                        candidates[label] = persist(problem, c, programs, flat)
                if "narrow" in families:
                    candidates |= {"narrow:" + c.name: tg.launcher(problem, c) for c in narrow_configs(problem)}
                if "rows" in families:
                    candidates |= {"rows:" + c.name: rows(problem, c) for c in rows_configs(problem)}
                if "rowslit" in families:
                    candidates |= {
                        "rowslit:" + c.name: rows(problem, c, fk.gemv_rows_literal) for c in rows_configs(problem)
                    }
                screened = timed(candidates, sets, 3)
                ranked = sorted(screened, key=screened.get)
                finalists = ["default"]
                for family in FINALIST_PREFIXES:  # the product's space, ...
                    finalists += [n for n in ranked if n.startswith(family)][:3]
                for labels, applies, kernels in paired:
                    for n in best_three(ranked, kernels) if applies(dtype, tokens) else []:
                        c = tg.config_from_name(n)
                        for label in labels:
                            candidates[f"{label}:{c.name}"] = variant_launcher(problem, c, variants[label])
                            finalists.append(f"{label}:{c.name}")
                if args.constant_k and tokens == 1:  # the product's best three one-token configs, K a constant
                    for n in [n for n in ranked if n.startswith("triton_") and tg.config_from_name(n).block_r == 1][:3]:
                        c = tg.config_from_name(n)
                        candidates["kconst:" + c.name] = variant_launcher(problem, c, variants["kconst"])
                        finalists += [n, "kconst:" + c.name]
                finalists = list(dict.fromkeys(finalists))
                errors = {}
                for n in finalists:  # recorded, not refused: each on a poisoned output against the fp32 reference
                    if n == "inductor":
                        continue
                    poison(sets[:1])
                    candidates[n](sets[0])
                    errors[n] = relative_error(problem, sets[0], ref)
                final = timed({n: candidates[n] for n in finalists}, sets, 15)
                touched = problem.touched_bytes()
                record["rows"].append({
                    "model": model, "gemm": name, "dtype": dtype, "tokens": tokens, "bytes": touched,
                    "fraction": {n: touched / limit / final[n] * 1e6 for n in finalists},
                    "relative_error": errors, "configs": {"product": len(product), "wider": len(wider)},
                })  # fmt: skip
                print(model, name, dtype, tokens, {n: round(v, 3) for n, v in record["rows"][-1]["fraction"].items()})
                del sets
    return record


def wider_configs(problem) -> list:
    """Configs beyond the product's space: one-token ``gemv`` with pipelined loads (2-3 stages), 2048-long K
    tiles and one or two columns a program (as a reduction kernel of Inductor's tiles a one-row product; one
    column won at one token on 2026-11-26 and is in the product's space since, so it drops out of this list);
    skinny tiles 16 and 32 wide, K tiles to 512, one warp."""
    from pipeline.kernels.triton_gemm import SHARED_BYTES, TritonConfig

    k, operand = problem.k, 1 if problem.a_type.startswith("float8") else 2
    if problem.n == 1:
        return [
            TritonConfig(1, c, bk, split, 1, w, st)
            for c in (1, 2, 4, 8, 16, 32) for bk in (512, 1024, 2048) for split in (1, 2)
            for w in (4, 8) for st in (2, 3)
            if bk <= k and k // split >= bk and c * bk >= w * 32 * 8
        ]  # fmt: skip
    return [
        TritonConfig(16, c, bk, split, 8, w, st)
        for c in (16, 32) for bk in (128, 256, 512) for split in (1, 2, 4) for w in (1, 2, 4) for st in (3, 5)
        if k // split >= bk and st * (16 + c) * bk * operand <= SHARED_BYTES and w * 64 <= 32 * c
    ]  # fmt: skip


def tma_configs(problem) -> list:
    """Configs of ``floor_kernels``' tensor-descriptor kernels (K a multiple of the K tile, no split): the
    one-token kernel at T = 1, the skinny tile above, their stages within the shared memory."""
    from pipeline.kernels.triton_gemm import SHARED_BYTES, TritonConfig

    k, operand = problem.k, 1 if problem.a_type.startswith("float8") else 2
    if problem.n == 1:
        return [
            TritonConfig(1, c, bk, 1, 1, w, st)
            for c in (4, 8, 16) for bk in (512, 1024, 2048) for w in (4, 8) for st in (2, 3, 4)
            if k % bk == 0 and st * c * bk * operand <= SHARED_BYTES and c * bk >= w * 32 * 8
        ]  # fmt: skip
    return [
        TritonConfig(16, c, bk, 1, 1, w, st)
        for c in (16, 32, 64) for bk in (128, 256, 512) for w in (2, 4) for st in (3, 4, 6)
        if k % bk == 0 and st * (16 + c) * bk * operand <= SHARED_BYTES and w * 64 <= 32 * c
    ]  # fmt: skip


def with_policies(source: str, kernel: str, policies: bool) -> str:
    """``source`` (``triton_kernels.py``'s text) with ``kernel``'s loads of X and Y given Inductor's policies
    (weights ``evict_first``, activation ``evict_last``; docs/triton.md) or stripped of any; the rest as it is."""
    import re

    parts = source.split("@triton.jit\n")
    at = _kernel_at(parts, kernel)
    text = re.sub(r', eviction_policy="evict_\w+"', "", parts[at])
    for operand, policy in (("yp", "evict_first"), ("xp", "evict_last")) if policies else ():
        text = text.replace(f"tl.load({operand})", f'tl.load({operand}, eviction_policy="{policy}")')
        text = text.replace(f"tl.load({operand}, mask=", f'tl.load({operand}, eviction_policy="{policy}", mask=')
    parts[at] = text
    return "@triton.jit\n".join(parts)


def with_constant_k(source: str) -> str:
    """``source`` (``triton_kernels.py``'s text) with ``gemv`` compiled for one ``K``: ``K`` and ``K_PER``
    compile-time constants and an unsplit program's K slice starting at 0, so its loop's trip count and masks
    are known when it compiles (Inductor's kernels are specialised on every size)."""
    parts = source.split("@triton.jit\n")
    at = _kernel_at(parts, "gemv")
    text = parts[at]
    for old, new in (("R, C, K, K_PER,", "R, C, K: tl.constexpr, K_PER: tl.constexpr,"),
                     ("    k0 = pk * K_PER\n", "    k0 = pk * K_PER if SPLIT > 1 else 0\n")):  # fmt: skip
        if old not in text:
            raise ValueError(f"gemv no longer has {old.strip()!r}: with_constant_k needs updating")
        text = text.replace(old, new, 1)
    parts[at] = text
    return "@triton.jit\n".join(parts)


def with_early_scales(source: str) -> str:
    """``source`` (``triton_kernels.py``'s text) with each kernel's tensorwise scales loaded before its K loop
    instead of after it: two dependent global loads off the end of every program, where a launch of one wave
    (the swapped tile's 64-96 programs on the small projections) waits for the last program's."""
    parts = source.split("@triton.jit\n")
    for kernel in ("gemm", "swapped", "gemv"):
        at = _kernel_at(parts, kernel)
        text = parts[at]
        old = " *= tl.load(scale_x) * tl.load(scale_y)\n"
        loop = "    for k in range(k0, k_end, BK):\n"
        if text.count(old) != 1 or text.count(loop) != 1:
            raise ValueError(f"{kernel} no longer loads its scales after one K loop: with_early_scales needs updating")
        text = text.replace(old, " *= scale\n")
        text = text.replace(loop, "    if SCALED:\n        scale = tl.load(scale_x) * tl.load(scale_y)\n" + loop)
        parts[at] = text
    return "@triton.jit\n".join(parts)


def with_literal_sizes(source: str) -> str:
    """``source`` (``triton_kernels.py``'s text) with ``gemm``'s sizes and strides compile-time constants (the
    product's ``gemv_literal`` and ``swapped`` take theirs so since the probe measured it on ``swapped``;
    Inductor's kernels take every size so)."""
    parts = source.split("@triton.jit\n")
    sizes = "R, C, K, K_PER,"
    strides = "sxb, sxr, sxk, syb, syk, syc, sob, sor, soc,"
    at = _kernel_at(parts, "gemm")
    text = parts[at]
    if text.count(sizes) != 1 or text.count(strides) != 1:
        raise ValueError(f"gemm no longer takes {sizes} {strides}: with_literal_sizes needs updating")
    for names in (sizes, strides):
        text = text.replace(names, ", ".join(f"{n}: tl.constexpr" for n in names.rstrip(",").split(", ")) + ",")
    parts[at] = text
    return "@triton.jit\n".join(parts)


def _kernel_at(parts: list[str], kernel: str) -> int:
    """The index of ``kernel``'s definition among the ``@triton.jit``-separated parts of a kernels file."""
    found = [i for i, part in enumerate(parts) if part.startswith(f"def {kernel}(")]
    if len(found) != 1:
        raise ValueError(f"{kernel}: {len(found)} Triton kernels of that name in triton_kernels.py, not one")
    return found[0]


def load_kernels(source: str, name: str = "variant_kernels"):
    """A variant of ``triton_kernels.py``'s text (or the text itself) as a module ``name`` of its own, in a file
    of its own (Triton reads a kernel's source from its file): JIT functions that hold no compiled kernel yet."""
    import importlib.util
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="variant-")) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variant_launcher(problem, config, kernels):
    """``triton_gemm.launcher`` with its kernels (its family's and the reduction) taken from ``kernels`` (a
    module of ``load_kernels``), launched by the product's ``Runner``."""
    from pipeline.kernels import triton_gemm as tg
    from pipeline.kernels.torch_gemm import torch_views

    runner = tg.Runner(config, problem, kernels)

    def launch(ops) -> None:
        x, y, out = torch_views(problem, ops)
        scaled = ops.scale_a is not None
        runner.run(x, y, out, ops.bias, ops.scale_b if scaled else None, ops.scale_a if scaled else None)

    return launch


def best_three(ranked: list[str], kernels: set[str]) -> list[str]:
    """The product's best three configs (of ``ranked``) that ``kernels`` run, to time again in two variants of
    those kernels."""
    from pipeline.kernels.triton_gemm import config_from_name

    return [n for n in ranked if n.startswith("triton_") and config_from_name(n).kernel in kernels][:3]


def rows_configs(problem) -> list:
    """Configs of ``floor_kernels.gemv_rows`` at T > 1 (K a multiple of the K tile, no split): every token in one
    row tile of the next power of two, 1-16 columns a program (two stages for one column, as the product's), a
    weight tile of 2-16 elements a thread and an accumulator of at most 64 a thread."""
    from pipeline.kernels.triton_gemm import TritonConfig

    if problem.n == 1:
        return []
    br = 1 << (problem.n - 1).bit_length()
    return [
        TritonConfig(br, c, bk, 1, 1, w, st)
        for c in (1, 2, 4, 8, 16) for bk in (256, 512, 1024) for w in (2, 4, 8) for st in ((2,) if c == 1 else (1,))
        if problem.k % bk == 0 and 2 * 32 * w <= c * bk <= 16 * 32 * w and br * c * bk <= 64 * 32 * w
    ]  # fmt: skip


def swap_configs(problem) -> list:
    """Configs of the product's ``swapped`` kernel at T = 2-16 (the probe that found it ran a copy of it, which
    the product's kernel replaced; those in the product's space since drop out of ``--families swap``): 64 or
    128 weight columns a program (one warpgroup per 64), K tiles of 64-256 in 3-6 stages within the shared
    memory, K split 1-4 ways (each slice whole K tiles)."""
    from pipeline.kernels.triton_gemm import SHARED_BYTES, TritonConfig
    from pipeline.problem import dtype_bytes

    k, operand = problem.k, dtype_bytes(problem.a_type)
    if not 1 < problem.n <= 16:
        return []
    return [
        TritonConfig(16, c, bk, s, 1, c // 16, st, swapped=True)
        for c in (64, 128) for bk in (64, 128, 256) for s in (1, 2, 4) for st in (3, 4, 6)
        if k % (s * bk) == 0 and st * (16 + c) * bk * operand <= SHARED_BYTES
        and (operand == 1 or bk >= 64) and (operand == 2 or bk >= 128)
    ]  # fmt: skip


def literal_configs(problem) -> list:
    """One-token configs of ``floor_kernels.gemv_literal`` and ``gemv_sized`` (K and the column count literals
    in the first, arguments in the second): the product's ``literal`` configs since it adopted the kernel
    (``triton_gemm.literal_configs``: one row a program, as Inductor's ``XBLOCK`` mostly picks, K slices of 512-4096
    as its ``R0_BLOCK``, no longer than K's next power of two, 4-16 warps, 2-32 weights a thread, one stage),
    named as plain configs: the probe's kernels take their tiles, not the product's."""
    from pipeline.kernels.triton_gemm import literal_configs as product_configs

    if problem.n != 1:
        return []
    return [dataclasses.replace(c, literal=False) for c in product_configs(problem)]


def wholek_configs(problem) -> list:
    """One-token ``gemv`` configs whose K tile holds the whole row (the next power of two at or above ``K``,
    masked past it: one loop trip), as Inductor's reduction kernel tiles Qwen2-7B's gate/up (``R0_BLOCK`` 4096
    over K = 3584, 8 warps); one or two columns, 4-16 warps, 1 or 2 stages, 4-32 elements a thread."""
    from pipeline.kernels.triton_gemm import TritonConfig

    bk = 1 << (problem.k - 1).bit_length()
    if problem.n != 1 or bk > 8192:
        return []
    return [
        TritonConfig(1, c, bk, 1, 1, w, st)
        for c in (1, 2) for w in (4, 8, 16) for st in (1, 2)
        if 4 * 32 * w <= c * bk <= 32 * 32 * w
    ]  # fmt: skip


def longk_configs(problem) -> list:
    """Configs of the product's ``swapped`` kernel at T = 2-16 with K tiles of 512 and 1024 (the product's and
    ``swap_configs`` stop at 256): each weight column read in runs of 0.5-2 KB a stage instead of 128-512 bytes,
    nearer a plain read's long sequential runs; 64 or 128 columns, 2-5 stages within the shared memory, no split."""
    from pipeline.kernels.triton_gemm import SHARED_BYTES, TritonConfig
    from pipeline.problem import dtype_bytes

    k, operand = problem.k, dtype_bytes(problem.a_type)
    if not 1 < problem.n <= 16:
        return []
    return [
        TritonConfig(16, c, bk, 1, 1, c // 16, st, swapped=True)
        for c in (64, 128) for bk in (512, 1024) for st in (2, 3, 4, 5)
        if k % bk == 0 and st * (16 + c) * bk * operand <= SHARED_BYTES
    ]  # fmt: skip


def narrow_configs(problem) -> list:
    """Configs of the product's ``swapped`` kernel at T = 2-16 with 16 or 32 weight columns a program (its space
    has 64 and 128, a Hopper warpgroup MMA's M side): an MMA of one or two warps per program instead, two to four
    times the programs, each over the whole of K (no split) in K tiles of 256-512 bytes, 4 or 6 stages."""
    from pipeline.kernels.triton_gemm import SHARED_BYTES, TritonConfig
    from pipeline.problem import dtype_bytes

    k, operand = problem.k, dtype_bytes(problem.a_type)
    if not 1 < problem.n <= 16:
        return []
    return [
        TritonConfig(16, c, bk, 1, 1, w, st, swapped=True)
        for c in (16, 32) for w in (1, 2, 4) for bk in (128, 256, 512) for st in (4, 6)
        if w * 16 <= c * 2 and k % bk == 0 and st * (16 + c) * bk * operand <= SHARED_BYTES
        and bk * operand in (256, 512)
    ]  # fmt: skip


def unsplit_swapped(problem, sms: int) -> list:
    """The product's swapped tiles for ``problem`` (``triton_gemm._swapped_configs``: 64 or 128 weight columns,
    K tiles of 128-256 in 4 or 6 stages within the shared memory) that split nothing, where K is a whole number
    of their K tiles: the base of the probes that change how the tile is scheduled or split."""
    from pipeline.kernels.triton_gemm import _swapped_configs

    if not 1 < problem.n <= 16:
        return []
    return [c for c in _swapped_configs(problem, sms) if c.split_k == 1 and problem.k % c.block_k == 0]


def persist_configs(problem, sms: int) -> list:
    """(config, programs, flat) of ``floor_kernels``' persistent swapped kernels at T = 2-16: the product's
    unsplit swapped tiles (``unsplit_swapped``) on one or two programs an SM, where the tiles outnumber them."""
    return [
        (c, p, flat)
        for c in unsplit_swapped(problem, sms)
        for p in (sms, 2 * sms)
        if p < -(-problem.m // c.block_c)
        for flat in (False, True)
    ]


def fixup_configs(problem) -> list:
    """Split-K configs for ``floor_kernels``' one-launch reduction (split 2 and 4, the sizes the product splits)."""
    from pipeline.kernels.triton_gemm import TritonConfig

    k = problem.k
    if problem.n == 1:
        return [
            TritonConfig(1, c, bk, s, 1, 4, 1) for c in (4, 8, 16) for bk in (512, 1024) for s in (2, 4) if k // s >= bk
        ]
    return [
        TritonConfig(16, c, bk, s, 8, w, 4)
        for c in (16, 32, 64) for bk in (128, 256) for s in (2, 4) for w in (2, 4)
        if k // s >= bk and w * 64 <= 32 * c
    ]  # fmt: skip


def swapfix_configs(problem, sms: int) -> list:
    """Split-K configs of ``floor_kernels.swapped_fixup`` at T = 2-16: the product's unsplit swapped tiles
    (``unsplit_swapped``), K split 2-4 ways into slices of whole K tiles, at least two each (the last slice may
    be shorter)."""
    return [
        dataclasses.replace(c, split_k=s)
        for c in unsplit_swapped(problem, sms)
        for s in (2, 3, 4)
        if problem.k // c.block_k >= 2 * s
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--out", required=True)
    run.add_argument("--dtypes", nargs="+", default=["bf16", "fp8"], choices=["bf16", "fp8"])
    run.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    run.add_argument("--programs", nargs="+", type=int, default=list(PROGRAMS))
    run.add_argument("--tma", action="store_true", help="also the tensor-descriptor (TMA) kernels (tma_configs)")
    run.add_argument("--no-floors", action="store_true", help="the config probe alone")
    run.add_argument("--tokens", nargs="+", type=int, default=[1, 4, 8])
    gemms = [f"{m}:{g}" for m, g, *_ in SMALL + LARGE + UNFUSED]
    run.add_argument("--gemms", nargs="+", choices=gemms, help="default: SMALL")
    run.add_argument("--families", nargs="+", default=["product", "wider", "fixup"], choices=FAMILIES)
    run.add_argument(
        "--literal-sizes",
        action="store_true",
        help="at 2-16 tokens, the product's best three gemm configs again, sizes and strides compile-time constants",
    )
    run.add_argument(
        "--early-scales",
        action="store_true",
        help="on FP8, the product's best three configs again with their scales loaded before or after the K loop",
    )
    run.add_argument(
        "--constant-k",
        action="store_true",
        help="at one token, the product's best three gemv configs again compiled for the call's K (with_constant_k)",
    )
    run.add_argument(
        "--evict",
        action="store_true",
        help="the product's best three configs again, with Inductor's load policies (weights evict_first, "
        "activation evict_last) and without",
    )
    check = sub.add_parser("analyse")
    check.add_argument("floors")
    check.add_argument("decode_hbm")
    check.add_argument("--run", type=int, default=-1, help="which run's floors, in a file of several (default: last)")
    check.add_argument("--out")
    args = parser.parse_args()
    from pipeline.atomic import claim_output_file
    from pipeline.errors import INPUT, BadInput

    try:  # before anything is measured or read
        if args.out:
            claim_output_file(args.out, [] if args.command == "measure" else [args.floors, args.decode_hbm], force=True)
    except BadInput as err:
        print(f"decode_floor: {err}", file=sys.stderr)
        return INPUT
    if args.command == "measure":
        from pipeline.atomic import atomic_write_json

        atomic_write_json(args.out, measure(args))
        return 0
    with open(args.floors) as f:
        floors = json.load(f)
    floors = floors.get("runs", [floors])[args.run]["floors"]  # one run's: its sweep alike at every size
    with open(args.decode_hbm) as f:
        report = analyse(floors, json.load(f)["rows"])
    text = json.dumps(report, indent=1)
    if args.out:
        from pipeline.atomic import atomic_write_text

        atomic_write_text(args.out, text + "\n")
    print(json.dumps(report["geomean"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

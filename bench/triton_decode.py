"""Decode GEMMs (Llama-3-8B and Qwen2-7B projections at T tokens, and Llama-3-8B's as tensorwise-scaled FP8
``_scaled_mm``) through torch's default path and through the
project's Triton kernels (``pipeline/kernels/triton_gemm.py``), each as a fraction of the HBM limit: the bytes
the call must move over the bandwidth a device copy reaches in the same run. Every config the source offers is
screened; the best three are timed in interleaved rounds against the default on rotating buffers (the
product's harness, ``pipeline/backends/measure.py``); every timed config is checked against the fp32 reference.

    python bench/triton_decode.py --out bench/results/triton_decode_<gpu>_<date>.json [--tokens 1 4 8]
"""

from __future__ import annotations

import argparse
import datetime
import json
import time

import torch
import triton

from pipeline.atomic import atomic_write_json
from pipeline.backends.measure import (
    TimingSettings,
    bandwidth,
    check_numerics,
    device_info,
    interleaved,
    rotating_operands,
    screen_passes,
)
from pipeline.kernels import triton_gemm as tg
from pipeline.kernels.torch_gemm import reference, torch_launcher
from pipeline.problem import TENSORWISE_E4M3, GemmProblem
from pipeline.stats import geomean

MODELS = {  # projection -> (output features, input features)
    "llama3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                  "lm_head": (128256, 4096)},
    "qwen2-7b": {"qkv": (4608, 3584), "o": (3584, 3584), "gate_up": (37888, 3584), "down": (3584, 18944),
                 "lm_head": (152064, 3584)},
}  # fmt: skip
MODELS["llama3-8b-fp8"] = MODELS["llama3-8b"]  # the same projections as tensorwise-scaled e4m3 _scaled_mm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    timing = TimingSettings()
    limit = bandwidth(device)
    rows = []
    for model in args.models:
        for name, (n_out, k) in MODELS[model].items():
            for tokens in args.tokens:
                fp8 = model.endswith("-fp8")
                op, fields = ("scaled_gemm", TENSORWISE_E4M3) if fp8 else ("gemm", {})
                problem = GemmProblem(op, "T", "N", n_out, tokens, k, k, k, n_out, **fields)
                sets = rotating_operands(problem, device, timing)
                ref = reference(problem, sets[0])
                offered = tg.configs(problem, sms)
                launchers = {c.name: tg.launcher(problem, c) for c in offered}
                start = time.monotonic()
                screened = screen_passes(list(launchers.values()), sets, 2, None)
                compile_screen_s = time.monotonic() - start
                ok = {n: us for n, us in zip(launchers, screened, strict=True) if isinstance(us, float)}
                best = sorted(ok, key=ok.get)[:3]
                if not best:
                    print(f"{model} {name} T={tokens}: no Triton config ran ({len(offered)} offered)", flush=True)
                    continue
                errors = {n: check_numerics(problem, launchers[n], sets[0], ref) for n in best}
                final = interleaved(problem, {"default": torch_launcher(problem), **{n: launchers[n] for n in best}},
                                    sets, timing)  # fmt: skip
                default_us = final["default"].median
                winner = min(best, key=lambda n: final[n].median)
                triton_us = final[winner].median
                fraction = problem.touched_bytes() / limit * 1e6
                rows.append({
                    "model": model, "gemm": name, "tokens": tokens, "problem": problem.to_dict(),
                    "bytes": problem.touched_bytes(), "default_us": default_us, "triton_us": triton_us,
                    "triton_config": winner, "configs_offered": len(offered), "configs_ran": len(ok),
                    "compile_and_screen_s": round(compile_screen_s, 1), "numerics": errors,
                    "hbm_default": fraction / default_us, "hbm_triton": fraction / triton_us,
                    "speedup": default_us / triton_us,
                })  # fmt: skip
                r = rows[-1]
                print(f"{model:9} {name:8} T={tokens}: default {default_us:8.1f} us ({r['hbm_default']:.3f}) "
                      f"triton {triton_us:8.1f} us ({r['hbm_triton']:.3f}) x{r['speedup']:.3f} {winner}",
                      flush=True)  # fmt: skip
                del sets
                _write(args.out, device, limit, rows)
    print(json.dumps(_write(args.out, device, limit, rows)["geomean_hbm_fraction"]))


def _write(out: str, device: torch.device, bandwidth: float, rows: list[dict]) -> dict:
    """The record so far (written after every GEMM: a run cut short keeps what it measured)."""
    geo = {k: geomean(r[k] for r in rows) for k in ("hbm_default", "hbm_triton")}
    best_of = geomean(max(r["hbm_default"], r["hbm_triton"]) for r in rows)
    return write_record(
        out, device, bandwidth, {"geomean_hbm_fraction": {**geo, "better_of_the_two": best_of}, "rows": rows}
    )


def write_record(out: str, device: torch.device, bandwidth: float, fields: dict) -> dict:
    """A result file of these benchmarks (this one's and ``decode_hbm.py``'s): the date, the device, torch's and
    Triton's versions and the copy bandwidth the fractions are of, then ``fields``; written atomically."""
    record = {
        "date": datetime.date.today().isoformat(),
        "device": device_info(device),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_bandwidth_bytes_per_s": bandwidth,
        **fields,
    }
    atomic_write_json(out, record)
    return record


if __name__ == "__main__":
    main()

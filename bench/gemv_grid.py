"""One token (T = 1, bf16): a grid of the ``gemv`` kernel's configs against torch's default, and the config
Inductor's max-autotune picks for the same call (#36: max-autotune beat the product by 2-3% on Qwen2-7B's
qkv, gate/up and lm_head at T = 1).

For each projection, every config of ``grid`` is screened (3 interleaved rounds of ``decode_floor.timed``: CUDA
graphs over rotating weights), the best six are timed against the default in 15 rounds; fractions are of the
bandwidth a device copy reaches in the same run (``measure.bandwidth``). max-autotune compiles the same
``F.linear`` in a fresh Inductor cache; its autotuned reduction config (``*.best_config``) is recorded.

    python bench/gemv_grid.py --out bench/results/gemv_grid_<gpu>_<date>.json [--shapes NAME=MxK ...]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import tempfile
import time
from pathlib import Path

SHAPES = {"qwen2-7b o": (3584, 3584), "qwen2-7b qkv": (4608, 3584), "qwen2-7b gate_up": (37888, 3584),
          "llama3-8b o": (4096, 4096)}  # fmt: skip


def grid() -> list:
    """One-token configs: 1, 2 or 4 columns a program, 512-4096-long K tiles, 2-16 warps, 1-3 stages, 2 to 16
    weights a thread (the product's one-column ``gemv`` configs, offered until the literal kernel replaced them,
    were among them) and at most 8,192 a program."""
    from pipeline.kernels.triton_gemm import TritonConfig

    return [
        TritonConfig(1, c, bk, 1, 1, w, st)
        for c in (1, 2, 4) for bk in (512, 1024, 2048, 4096) for w in (2, 4, 8, 16) for st in (1, 2, 3)
        if 2 * w * 32 <= c * bk <= min(8192, 16 * w * 32)
    ]  # fmt: skip


def inductor_pick(cache: str, compile_call) -> list[dict]:
    """The reduction configs Inductor's autotuner settled on while ``compile_call`` ran (new ``*.best_config``)."""
    before = set(glob.glob(f"{cache}/**/*.best_config", recursive=True))
    compile_call()
    found = sorted(set(glob.glob(f"{cache}/**/*.best_config", recursive=True)) - before)
    picks = [json.loads(Path(f).read_text()) for f in found]
    return [{k: v for k, v in pick.items() if k.isupper() or k.startswith("num_")} for pick in picks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", help="NAME=MxK (default: four of the Qwen2-7B and Llama-3-8B ones)")
    args = parser.parse_args()
    cache = os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
    import torch
    import torch.nn.functional as F
    from decode_floor import timed  # bench/ is the script's path
    from triton_decode import write_record

    from pipeline.backends.measure import TimingSettings, bandwidth, rotating_operands
    from pipeline.kernels import triton_gemm as tg
    from pipeline.kernels.torch_gemm import torch_launcher, torch_views
    from pipeline.problem import GemmProblem

    shapes = SHAPES
    if args.shapes:
        shapes = {s.split("=")[0]: tuple(int(v) for v in s.split("=")[1].split("x")) for s in args.shapes}

    def project(x, w):  # a Python frame for dynamo to compile (F.linear itself is a builtin)
        return F.linear(x, w)

    device = torch.device("cuda", 0)
    limit = bandwidth(device)
    rows = []
    for name, (m, k) in shapes.items():
        problem = GemmProblem("gemm", "T", "N", m, 1, k, k, k, m)
        sets = rotating_operands(problem, device, TimingSettings())
        x, y, _ = torch_views(problem, sets[0])
        torch._dynamo.reset()
        linear = torch.compile(project, mode="max-autotune-no-cudagraphs", dynamic=False)

        def compile_call(linear=linear, x=x, y=y) -> None:
            linear(x, y.t())
            torch.cuda.synchronize()

        picked = inductor_pick(cache, compile_call)
        configs = grid()
        candidates = {"default": torch_launcher(problem)} | {c.name: tg.launcher(problem, c) for c in configs}
        start = time.monotonic()
        screened = timed(candidates, sets, 3)
        best = sorted((n for n in screened if n != "default"), key=screened.get)[:6]
        final = timed({n: candidates[n] for n in ["default", *best]}, sets, 15)
        fraction = {n: round(problem.touched_bytes() / limit / final[n] * 1e6, 4) for n in final}
        rows.append({"gemm": name, "m": m, "k": k, "configs": len(configs), "fraction": fraction,
                     "inductor_pick": picked, "seconds": round(time.monotonic() - start, 1)})  # fmt: skip
        print(name, fraction, picked, flush=True)
        del sets
        write_record(args.out, device, limit, {"rows": rows})


if __name__ == "__main__":
    main()

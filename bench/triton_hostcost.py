"""The runtime's host cost per F.linear call on a Triton row against the same call on a cuBLASLt row and on
torch alone (a problem small enough to be host-bound: 8x256x256 bf16; 9 rounds of 5000 calls, the three arms
interleaved in a rotating order, medians of the issue time per call).

    python3 bench/triton_hostcost.py --out bench/results/triton_hostcost_<gpu>_<date>.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

import pipeline.runtime as rt
from pipeline.backends import triton_gemm as tg
from pipeline.backends.cublaslt import LtGemm, lt
from pipeline.backends.cublaslt_algo import read_config
from pipeline.backends.measure import device_info
from pipeline.formats.tunableop import TunableOpEntry, write_file
from pipeline.problem import GemmProblem
from pipeline.runtime.frame import gemm_key

CALLS, ROUNDS = 5000, 9


def results(problem: GemmProblem, solution: str) -> Path:
    path = Path(tempfile.mkdtemp()) / "tunableop_results.csv"
    write_file(path, {"PT_VERSION": torch.__version__.split("+")[0]}, [TunableOpEntry.from_problem(problem, solution)])
    return path


def per_call(x: torch.Tensor, w: torch.Tensor) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        F.linear(x, w)
    issued = time.perf_counter() - start
    torch.cuda.synchronize()
    return issued / CALLS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    x = torch.randn(8, 256, device="cuda").bfloat16()
    w = torch.randn(256, 256, device="cuda").bfloat16()
    key = gemm_key("gemm", "bfloat16", "float32", x.shape, x.stride(), w.t().shape, w.t().stride())
    problem = GemmProblem(key[0], key[3], key[4], *key[5:8], *key[8:11])
    gemm = LtGemm(problem, lt.create(), torch.empty(32 << 20, dtype=torch.uint8, device="cuda"))
    files = {
        "cublaslt row": results(problem, read_config(gemm.heuristic(1)[0])["SolutionNameMin"]),
        "triton row": results(
            problem, tg.configs(problem, torch.cuda.get_device_properties(0).multi_processor_count)[0].name
        ),
    }
    gemm.close()
    arms: dict[str, list[float]] = {"torch": [], **{name: [] for name in files}}
    checks = {}
    for r in range(ROUNDS + 1):
        order = list(arms)[r % 3 :] + list(arms)[: r % 3]
        for name in order:
            if name == "torch":
                value = per_call(x, w)
            else:
                rt.install(files[name])
                try:
                    value = per_call(x, w)
                    checks[name] = rt.installed().status()["tuned_calls"]
                finally:
                    rt.uninstall()
            if r:  # the first round warms every arm up (the Triton kernel compiles there)
                arms[name].append(value)
    medians = {name: statistics.median(v) for name, v in arms.items()}
    record = {
        "date": datetime.date.today().isoformat(),
        "device": device_info(torch.device("cuda", 0)),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "problem": problem.to_dict(),
        "calls_per_round": CALLS,
        "rounds": ROUNDS,
        "median_us_per_call": medians,
        "over_torch_us": {name: medians[name] - medians["torch"] for name in files},
        "samples_us": arms,
        "tuned_calls": checks,
    }
    Path(args.out).write_text(json.dumps(record, indent=1))
    print(json.dumps({k: record[k] for k in ("median_us_per_call", "over_torch_us")}, indent=1))


if __name__ == "__main__":
    main()

"""The runtime's host cost per F.linear call, another tree's runtime against this one's, A/B interleaved in one
process: torch alone, old tuned, new tuned, and the fallback path of each (a problem small enough to be
host-bound; 9 rounds of 5000 calls, medians).

    mkdir -p /tmp/old && git archive REV pipeline | tar -x -C /tmp/old && mv /tmp/old/pipeline /tmp/old/pipeline_old
    python3 bench/hostcost_ab.py /tmp/old > bench/results/runtime_hostcost_ab_<gpu>_<date>.json
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import pipeline_old.runtime as old
import torch
import torch.nn.functional as F

import pipeline.runtime as new
from pipeline.backends.cublaslt import LtGemm, lt
from pipeline.backends.cublaslt_algo import read_config
from pipeline.formats.tunableop import TunableOpEntry, write_file
from pipeline.problem import GemmProblem
from pipeline.runtime.frame import gemm_key

calls, rounds = 5000, 9
x, w = torch.randn(8, 256, device="cuda").bfloat16(), torch.randn(256, 256, device="cuda").bfloat16()
other = torch.randn(16, 256, device="cuda").bfloat16()
key = gemm_key("gemm", "bfloat16", "float32", x.shape, x.stride(), w.t().shape, w.t().stride())
problem = GemmProblem(key[0], key[3], key[4], *key[5:8], *key[8:11])
handle, workspace = lt.create(), torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
gemm = LtGemm(problem, handle, workspace)
solution = read_config(gemm.heuristic(1)[0])["SolutionNameMin"]
gemm.close()
csv = Path(tempfile.mkdtemp()) / "tunableop_results.csv"
write_file(csv, {"PT_VERSION": torch.__version__.split("+")[0]}, [TunableOpEntry.from_problem(problem, solution)])


def per_call(a):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        F.linear(a, w)
    issued = time.perf_counter() - start
    torch.cuda.synchronize()
    return issued / calls * 1e6


arms = {name: [] for name in ("torch", "old tuned", "new tuned", "old fallback", "new fallback", "torch other")}
for _ in range(2):
    per_call(x), per_call(other)
for r in range(rounds):
    order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
    arms["torch"].append(per_call(x))
    arms["torch other"].append(per_call(other))
    for name, rt in order:
        runtime = rt.install(csv)
        arms[f"{name} tuned"].append(per_call(x))
        arms[f"{name} fallback"].append(per_call(other))
        assert sum(runtime.status()["tuned_calls"].values()) == calls, name
        rt.uninstall()
med = {k: statistics.median(v) for k, v in arms.items()}
print(
    json.dumps(
        {
            "device": torch.cuda.get_device_name(0),
            "calls_per_sample": calls,
            "rounds": rounds,
            "median_us_per_call": med,
            "samples_us": arms,
            "tuned_extra_us": {"old": med["old tuned"] - med["torch"], "new": med["new tuned"] - med["torch"]},
            "fallback_extra_us": {
                "old": med["old fallback"] - med["torch other"],
                "new": med["new fallback"] - med["torch other"],
            },
        },
        indent=1,
    )
)

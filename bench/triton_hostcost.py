"""The runtime's host cost per F.linear call on a Triton row against the same call on a cuBLASLt row, on no
row (the runtime installed, the call's key not in its table: torch's kernel behind the runtime's dispatch) and
on torch alone (a problem small enough to be host-bound: 8x256x256 bf16; 9 rounds of 5000 calls, the arms
interleaved in a rotating order, medians of the issue time per call). ``--compiled``: each arm also through
``torch.compile`` in its default mode (no CUDA graphs: Inductor's wrapper calls ``mm.out``, which the runtime
routes), as a compiled workload without CUDA graphs issues its GEMMs.

    python3 bench/triton_hostcost.py --out bench/results/triton_hostcost_<gpu>_<date>.json [--compiled]

An ``--out`` that is a directory is refused (exit 12) before anything is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import statistics
import sys
import tempfile
from pathlib import Path

from pipeline.api import (
    INPUT,
    BadInput,
    GemmProblem,
    TunableOpEntry,
    atomic_write_json,
    claim_output_file,
    write_tunableop_results,
)

CALLS, ROUNDS = 5000, 9


def results(problem: GemmProblem, solution: str, pt_version: str) -> Path:
    path = Path(tempfile.mkdtemp()) / "tunableop_results.csv"
    write_tunableop_results(path, {"PT_VERSION": pt_version}, [TunableOpEntry.from_problem(problem, solution)])
    return path


def heuristic_row(x, w) -> tuple[GemmProblem, str]:
    """The problem of ``F.linear(x, w)`` as the runtime keys it, and cuBLASLt's heuristic's first algorithm for
    it (a row the runtime applies)."""
    import torch
    from nvmath.bindings import cublasLt as lt

    from pipeline.api import LtGemm, read_config
    from pipeline.runtime.frame import gemm_key

    key = gemm_key("gemm", "bfloat16", "float32", x.shape, x.stride(), w.t().shape, w.t().stride())
    problem = GemmProblem(key[0], key[3], key[4], *key[5:8], *key[8:11])
    gemm = LtGemm(problem, lt.create(), torch.empty(32 << 20, dtype=torch.uint8, device="cuda"))
    try:
        return problem, read_config(gemm.heuristic(1)[0])["SolutionNameMin"]
    finally:
        gemm.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--compiled", action="store_true", help="each arm in torch.compile's default mode too")
    args = parser.parse_args()
    try:
        claim_output_file(args.out, [], force=True)
    except BadInput as err:
        print(f"triton_hostcost: {err}", file=sys.stderr)
        return INPUT
    import torch  # the GPU's: after the output is claimed
    import torch.nn.functional as F
    import triton

    import pipeline.runtime as rt
    from pipeline.api import device_info, triton_configs
    from pipeline.runtime.hostcost import issue_us

    x = torch.randn(8, 256, device="cuda").bfloat16()
    w = torch.randn(256, 256, device="cuda").bfloat16()
    problem, library = heuristic_row(x, w)
    other = dataclasses.replace(problem, m=2 * problem.m, ldc=2 * problem.ldc)  # a row for no call made here
    version = torch.__version__.split("+")[0]
    files = {
        "no row": results(other, library, version),
        "cublaslt row": results(problem, library, version),
        "triton row": results(
            problem, triton_configs(problem, torch.cuda.get_device_properties(0).multi_processor_count)[0].name, version
        ),
    }
    forms = {"eager": F.linear}
    if args.compiled:
        forms["compiled"] = torch.compile(lambda a, b: F.linear(a, b))  # default mode: no CUDA graphs
    arms = [(setting, form) for form in forms for setting in ("torch", *files)]
    samples: dict[str, list[float]] = {f"{s} {f}": [] for s, f in arms}
    checks = {}
    for r in range(ROUNDS + 1):
        for setting, form in arms[r % len(arms) :] + arms[: r % len(arms)]:
            name, call = f"{setting} {form}", functools.partial(forms[form], x, w)
            if setting == "torch":
                value = issue_us(call, CALLS, torch.cuda.synchronize)
            else:
                rt.install(files[setting])
                try:
                    value = issue_us(call, CALLS, torch.cuda.synchronize)
                    status = rt.installed().status()
                    checks[name] = {"tuned": status["tuned_calls"], "fallbacks": status["fallbacks"]}
                finally:
                    rt.uninstall()
            if r:  # the first round warms every arm up (the Triton kernel and the compiled form compile there)
                samples[name].append(value)
    medians = {name: statistics.median(v) for name, v in samples.items()}
    record = {
        "date": datetime.date.today().isoformat(),
        "device": device_info(torch.device("cuda", 0)),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "problem": problem.to_dict(),
        "calls_per_round": CALLS,
        "rounds": ROUNDS,
        "median_us_per_call": medians,
        "over_torch_us": {f"{s} {f}": medians[f"{s} {f}"] - medians[f"torch {f}"] for s, f in arms if s != "torch"},
        "samples_us": samples,
        "calls": checks,
    }
    atomic_write_json(args.out, record)
    print(json.dumps({k: record[k] for k in ("median_us_per_call", "over_torch_us")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

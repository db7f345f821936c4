"""pipeline.runtime on the GPU: end-to-end tokens/s of tuned runs, and the runtime's host cost per call.

    python bench/runtime_e2e.py --run workdir/default --run workdir/mistral --reps 5 \\
        --out bench/results/runtime_e2e_<device>_<date>.json

For each run directory (a finished ``TuneWorkload`` whose bundle was accepted): its workload command from
``collect/manifest.json`` (the embedded workload twice, ``--decode-mode eager`` and ``graph``), run alternately
without and with ``python -m pipeline.runtime --bundle RUN/bundle`` (``stages.e2e.ab_test``, the same A/B as
Validate's), next to the run's GEMM-level weighted speedup. Host cost: ``F.linear`` on a problem small enough
to be host-bound, per call, torch's own kernel against the runtime's tuned path and its fallback path,
interleaved rounds, medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.atomic import atomic_write_json
from pipeline.stages.validate.e2e import ab_test

EMBEDDED = "pipeline.workloads.llama"


def commands(run: Path) -> dict[str, list[str]]:
    argv = json.loads((run / "collect" / "manifest.json").read_text())["command"]
    if EMBEDDED in argv:
        return {
            f"{run.name} decode {mode}": [*argv, "--decode-mode", mode, "--repeat", "5"] for mode in ("eager", "graph")
        }
    return {run.name: argv}


def end_to_end(run: Path, reps: int, timeout_s: float) -> list[dict]:
    summary = json.loads((run / "report" / "summary.json").read_text())
    out = []
    for name, argv in commands(run).items():
        with tempfile.TemporaryDirectory() as scratch:
            ab = ab_test(argv, run / "bundle" / "tunableop_results.csv", Path(scratch), reps, timeout_s, via="runtime")
        runtime = ab.pop("runtime", {})
        out.append(
            {
                "name": name,
                "command": argv,
                "gemm_weighted_speedup": summary["weighted_gemm_speedup"],
                "bundle_rows": summary["kept"],
                **ab,
                "tuned_calls": sum(runtime.get("tuned_calls", {}).values()),
                "tuned_problems": len(runtime.get("tuned_calls", {})),
                "fallbacks": runtime.get("fallbacks"),
            }
        )
        base, tuned = ab["baseline"]["median_tokens_per_s"], ab["tuned"]["median_tokens_per_s"]
        print(
            f"{name}: tokens/s {base:.1f} -> {tuned:.1f}"
            f" x{ab.get('tokens_speedup', 0):.3f} (spread {ab.get('noise') or 0:.1%}); GEMM-level "
            f"x{summary['weighted_gemm_speedup']:.3f}",
            flush=True,
        )
    return out


def host_cost(rounds: int, calls: int) -> dict:
    """Microseconds per ``F.linear`` call issued (host-bound: the kernel is shorter than the host's work)."""
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt
    from pipeline.formats.tunableop import TunableOpEntry, write_file
    from pipeline.kernels.cublaslt_algo import read_config
    from pipeline.kernels.lt_gemm import LtGemm, lt
    from pipeline.problem import GemmProblem
    from pipeline.runtime.frame import gemm_key

    x, w = torch.randn(8, 256, device="cuda").bfloat16(), torch.randn(256, 256, device="cuda").bfloat16()
    other = torch.randn(16, 256, device="cuda").bfloat16()  # a shape with no tuned row: the fallback path
    key = gemm_key("gemm", "bfloat16", "float32", x.shape, x.stride(), w.t().shape, w.t().stride())
    problem = GemmProblem(key[0], key[3], key[4], *key[5:8], *key[8:11])
    handle, workspace = lt.create(), torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    gemm = LtGemm(problem, handle, workspace)
    solution = read_config(gemm.heuristic(1)[0])["SolutionNameMin"]
    gemm.close()
    csv = Path(tempfile.mkdtemp()) / "tunableop_results.csv"
    write_file(csv, {"PT_VERSION": torch.__version__.split("+")[0]}, [TunableOpEntry.from_problem(problem, solution)])

    def per_call(a: torch.Tensor) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            F.linear(a, w)
        issued = time.perf_counter() - start
        torch.cuda.synchronize()
        return issued / calls * 1e6

    arms: dict[str, list[float]] = {
        "torch": [],
        "runtime tuned": [],
        "torch (other shape)": [],
        "runtime fallback (other shape)": [],
    }
    for _ in range(2):  # warm-up
        per_call(x), per_call(other)
    for r in range(rounds):
        order = [False, True] if r % 2 == 0 else [True, False]
        for installed in order:
            if installed:
                runtime = rt.install(csv)
                arms["runtime tuned"].append(per_call(x))
                arms["runtime fallback (other shape)"].append(per_call(other))
                assert sum(runtime.status()["tuned_calls"].values()) == calls
                rt.uninstall()
            else:
                arms["torch"].append(per_call(x))
                arms["torch (other shape)"].append(per_call(other))
    medians = {name: statistics.median(v) for name, v in arms.items()}
    return {
        "problem": f"F.linear bf16 x[8,256] W[256,256] ({solution})",
        "calls_per_sample": calls,
        "rounds": rounds,
        "median_us_per_call": medians,
        "samples_us": arms,
        "tuned_extra_us": medians["runtime tuned"] - medians["torch"],
        "fallback_extra_us": medians["runtime fallback (other shape)"] - medians["torch (other shape)"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, action="append", default=[], help="a finished TuneWorkload run dir")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--host-rounds", type=int, default=7)
    parser.add_argument("--host-calls", type=int, default=5000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    from pipeline.kernels.lt_gemm import lt

    props = torch.cuda.get_device_properties(0)
    result = {
        "device": {"name": props.name, "sm_count": props.multi_processor_count},
        "versions": {"torch": torch.__version__, "cublasLt": lt.get_version(), "python": sys.version.split()[0]},
        "date": datetime.date.today().isoformat(),
        "host_cost": host_cost(args.host_rounds, args.host_calls),
    }
    print(json.dumps(result["host_cost"]["median_us_per_call"], indent=1), flush=True)
    result["end_to_end"] = [row for run in args.run for row in end_to_end(run, args.reps, args.timeout)]
    atomic_write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

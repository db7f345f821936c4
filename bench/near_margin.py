"""Where the product keeps torch's default on a big decode GEMM, how close did the Triton kernels come? (#36: on
Llama-3-8B's gate/up at T = 4 and 8, `decode_hbm.py` read max-autotune 1-2% above the product, which shipped the
default; the compiled Llama's 14336x8x4096 crowned a Triton tile at x1.033 on one H100 and nothing on others.)

Per bf16 ``F.linear`` problem (``MxNxK``, TN as torch records it), the product's search (``tune_one`` with the
Triton kernels, default settings) twice, keeping the default's time, the winner, and the best Triton and library
finalists' screened and judged times; then the best three Triton finalists of the second search each read
against the default as Bench's verdict reads them (``_verdict`` at ``VERDICT_SEED``, in this process).

    python bench/near_margin.py --out bench/results/near_margin_<gpu>_<date>.json [--problems 28672x4x4096 ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from pipeline.atomic import atomic_write_json
from pipeline.backends.base import TuneSettings
from pipeline.backends.cublaslt import VERDICT_SEED, CublasLtBackend
from pipeline.backends.measure import device_info
from pipeline.kernels.triton_gemm import PREFIX
from pipeline.problem import GemmProblem

PROBLEMS = ("28672x4x4096", "28672x8x4096", "14336x8x4096", "4096x4x4096")  # gate/up fused and not; o for contrast
SEARCHES = 2
READ = 3  # Triton finalists read against the default


def finalists(result, prefix: str, count: int) -> list[dict]:
    """The best ``count`` judged candidates whose names start with ``prefix``."""
    judged = sorted((c for c in result.candidates if c.final_us is not None and c.name.startswith(prefix)),
                    key=lambda c: c.final_us)  # fmt: skip
    return [{"name": c.name, "screen_us": c.screen_us, "final_us": c.final_us, "verdict_speedup": c.verdict_speedup}
            for c in judged[:count]]  # fmt: skip


def probe(backend: CublasLtBackend, problem: GemmProblem, settings: TuneSettings) -> dict:
    searches, last = [], None
    for _ in range(SEARCHES):
        start = time.monotonic()
        last = backend.tune_one(problem, settings)
        searches.append({
            "s": round(time.monotonic() - start, 1), "default_us": last.default_us, "winner": last.winner,
            "speedup": last.speedup, "phases": last.phases,
            "triton": finalists(last, PREFIX, 6), "library": finalists(last, "Gemm_Cublaslt", 3),
        })  # fmt: skip
        print(problem.m, problem.n, problem.k, searches[-1]["winner"][:40], searches[-1]["speedup"], flush=True)
    configs = {c.name: c.config for c in last.candidates}
    verdicts = []
    for row in searches[-1]["triton"][:READ]:
        verdict = backend._verdict(problem, configs[row["name"]], row["name"], settings.workspace_bytes, VERDICT_SEED)
        verdicts.append({"name": row["name"], "default_us": verdict.default_us, "triton_us": verdict.winner_us,
                         "speedup": verdict.speedup})  # fmt: skip
    return {"searches": searches, "verdicts": verdicts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), help="MxNxK: output features, tokens, K")
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    settings = TuneSettings()
    backend = CublasLtBackend(0, triton_cache=tempfile.mkdtemp(prefix="near-margin-"))
    record = {"date": time.strftime("%Y-%m-%d"), "device": device_info(device), "margin": settings.margin,
              "problems": {}}  # fmt: skip
    for spec in args.problems:
        m, n, k = (int(v) for v in spec.split("x"))
        record["problems"][spec] = probe(backend, GemmProblem("gemm", "T", "N", m, n, k, k, k, m), settings)
        atomic_write_json(args.out, record)


if __name__ == "__main__":
    main()

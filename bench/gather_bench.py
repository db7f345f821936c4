"""Benchmark: gathering a 1,000,000-line untuned file with 2,000 distinct GEMMs (issue: <= 2 s, < 200 MB).

    python bench/gather_bench.py [--lines 1000000] [--distinct 2000] [--out bench/results/gather_<date>.json]

The file is generated (keys of every op kind and layout torch records, repeated in random order as record
mode appends them run after run), then ``pipeline.stages.gather.shapes.gather`` reads it in a fresh process, which
reports the wall time, the peak of Python allocations during the gather (tracemalloc) and the process's
peak resident memory (``VmHWM``, interpreter and imports included; not ``ru_maxrss``, which Linux carries
over from the parent through ``execve``). Each figure is the median of ``--repeats`` fresh processes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline.api import INPUT, BadInput, atomic_write_json, claim_output_file

CHILD = """
import json, re, sys, time, tracemalloc
from pipeline.api import gather
tracemalloc.start()
start = time.perf_counter()
result = gather([sys.argv[1]])
seconds = time.perf_counter() - start
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
untraced_start = time.perf_counter()
gather([sys.argv[1]])
untraced = time.perf_counter() - untraced_start
print(json.dumps({"seconds_traced": seconds, "seconds": untraced, "traced_peak_mb": peak / 2**20,
                  "max_rss_mb": int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read())[1]) / 1024,
                  "distinct": len(result.shapes), "lines": result.lines}))
"""


def keys(distinct: int, seed: int = 0) -> list[str]:
    """``distinct`` different TunableOp keys of realistic shapes and every op kind."""
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < distinct:
        n, k, m = (
            rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 512, 1024, 2048, 4096, 8192]),
            rng.choice([1024, 2048, 4096, 5120, 8192, 14336]),
            rng.choice([1024, 4096, 6144, 14336, 28672, 128256]),
        )
        kind = rng.randrange(4)
        if kind == 0:
            out.add(f"GemmTunableOp_BFloat16_TN,tn_{m}_{n}_{k}_ld_{k}_{k}_{m}")
        elif kind == 1:
            out.add(f"GemmAndBiasTunableOp_Half_TN,tn_{m}_{n}_{k}_ld_{k}_{k}_{m}")
        elif kind == 2:
            out.add(f"GemmStridedBatchedTunableOp_float_NN,nn_{m}_{n}_{k}_B_{rng.choice([8, 32])}_ld_{m}_{k}_{m}")
        else:
            out.add(
                f"ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_{m}_{n}_{k}_ld_{k}_{k}_{m}"
                f"_rw_{rng.randrange(2)}_bias_None"
            )
    return sorted(out)


def write_file(path: Path, lines: int, distinct: int) -> None:
    pool = keys(distinct)
    rng = random.Random(1)
    body = pool + [rng.choice(pool) for _ in range(lines - len(pool))]
    rng.shuffle(body)
    path.write_text("".join(line + "\n" for line in body))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--distinct", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args()
    if args.out:
        try:
            claim_output_file(args.out, [], force=True)  # refused before the minutes of measuring: a directory
        except BadInput as err:
            print(f"gather_bench: {err}", file=sys.stderr)
            return INPUT
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "untuned0.csv"
        write_file(path, args.lines, args.distinct)
        runs = []
        for _ in range(args.repeats):
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(proc.stdout))
        size_mb = path.stat().st_size / 2**20
    result = {
        "benchmark": "gather 1M-line untuned file",
        "date": datetime.date.today().isoformat(),
        "device": f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "lines": args.lines,
        "distinct": args.distinct,
        "file_mb": round(size_mb, 1),
        "seconds_median": statistics.median(r["seconds"] for r in runs),
        "traced_peak_mb_median": statistics.median(r["traced_peak_mb"] for r in runs),
        "max_rss_mb_median": statistics.median(r["max_rss_mb"] for r in runs),
        "targets": {"seconds": 2.0, "memory_mb": 200},
        "runs": runs,
    }
    wrong = [r for r in runs if r["distinct"] != args.distinct or r["lines"] != args.lines]
    if wrong:  # the gather read another file than the one written: no figure to record
        print(f"gather_bench: gathered {wrong[0]['lines']} lines, {wrong[0]['distinct']} distinct", file=sys.stderr)
        return 1
    if args.out:
        atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

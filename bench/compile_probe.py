"""What compiling Bench's Triton configs costs, and what compiling them in other processes would buy (#36: Bench
time per GEMM grows by at most 2 s). For each problem, ``SAMPLE`` of its configs (``triton_gemm.configs``, evenly
spaced) compile on a cold cache of their own three ways, each without launching (``Runner.prepare``, as the
runtime's install does):

    serial    one after the other in this process
    threadsN  N threads of this process at a time (what Bench's ``compile_all`` does, through a first launch)
    procs     N processes (spawned once per mode, their start timed apart), then this process loads each from
              the cache they filled (the load timed apart)

    python bench/compile_probe.py --out bench/results/compile_probe_<gpu>_<date>.json [--threads N ...]
        [--modes serial threads procs] [--problems ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context

PROBLEMS = {  # (op, m, tokens, k): first GEMMs of the README job's parts, where Bench pays the compile
    "qkv bf16 T=1": ("gemm", 6144, 1, 4096),
    "qkv bf16 T=4": ("gemm", 6144, 4, 4096),
    "qkv fp8 T=4": ("scaled_gemm", 6144, 4, 4096),
    "down fp8 T=4": ("scaled_gemm", 4096, 4, 14336),
    "down bf16 T=128": ("gemm", 4096, 128, 14336),
}
SAMPLE = 40  # configs a problem, evenly spaced over its list, compiled in every mode


def problem_of(spec):
    from pipeline.problem import TENSORWISE_E4M3, GemmProblem

    op, m, n, k = spec
    fields = TENSORWISE_E4M3 if op == "scaled_gemm" else {}
    return GemmProblem(op, "T", "N", m, n, k, k, k, m, **fields)


def _child_init(cache: str, parent: int) -> None:
    from pipeline.procs import die_with_parent

    die_with_parent(parent)  # a worker dies with this script, even after its kill -9
    os.environ["TRITON_CACHE_DIR"] = cache
    import torch  # noqa: F401

    import pipeline.kernels.triton_gemm  # noqa: F401


def fresh_kernels(label: str):
    """``triton_kernels.py`` loaded again as a module of its own (``decode_floor.load_kernels``): JIT functions
    with no compiled kernel held in memory, so each mode compiles (or loads from its cache) rather than finding
    the last mode's kernels."""
    from pathlib import Path

    from decode_floor import load_kernels  # bench/ is the script's path

    from pipeline.kernels import triton_gemm as tg

    return load_kernels(Path(tg.__file__).with_name("triton_kernels.py").read_text(), f"kernels_{label}")


def _prepare(spec, config_json: dict, kernels=None) -> str | None:
    from pipeline.kernels import triton_gemm as tg

    try:
        tg.Runner(tg.TritonConfig.from_json(config_json), kernels=kernels).prepare(problem_of(spec), 0)
        return None
    except Exception as err:  # a config that does not compile: counted, as Bench scores it
        return f"{type(err).__name__}: {err}"


def _child_ready(_: int) -> int:
    return os.getpid()


def measure(threads: list[int], modes: list[str], problems: list[str], sample: int) -> dict:
    import torch
    import triton

    from pipeline.backends.measure import device_info
    from pipeline.kernels import triton_gemm as tg

    device = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    record = {"date": time.strftime("%Y-%m-%d"), "device": device_info(device), "triton": triton.__version__,
              "threads": threads, "modes": modes, "sample": sample, "cpus": os.cpu_count(), "rows": []}  # fmt: skip
    for label, spec in ((p, PROBLEMS[p]) for p in problems):
        every = [c.to_json() for c in tg.configs(problem_of(spec), sms)]
        configs = every[:: max(1, len(every) // sample)][:sample] if sample else every
        row = {"problem": label, "configs": len(every), "compiled": len(configs), "seconds": {}, "failed": {}}
        for mode in [m for m in modes if m != "threads"] + [f"threads{n}" for n in threads if "threads" in modes]:
            cache = tempfile.mkdtemp(prefix=f"compile-{mode}-")
            os.environ["TRITON_CACHE_DIR"] = cache
            start = time.monotonic()
            kernels = fresh_kernels(f"{mode}{len(record['rows'])}")
            if mode == "serial":
                outcomes = [_prepare(spec, c, kernels) for c in configs]
            elif mode.startswith("threads"):
                with ThreadPoolExecutor(int(mode.removeprefix("threads"))) as pool:
                    outcomes = list(pool.map(_prepare, [spec] * len(configs), configs, [kernels] * len(configs)))
            else:
                ctx = get_context("spawn")
                workers = threads[0]
                with ProcessPoolExecutor(
                    workers, mp_context=ctx, initializer=_child_init, initargs=(cache, os.getpid())
                ) as pool:
                    list(pool.map(_child_ready, range(workers)))  # every worker up: torch and triton imported
                    row["seconds"]["procs_start"] = round(time.monotonic() - start, 2)
                    begun = time.monotonic()
                    outcomes = list(pool.map(_prepare, [spec] * len(configs), configs))
                    row["seconds"]["procs_compile"] = round(time.monotonic() - begun, 2)
                loaded = time.monotonic()
                [_prepare(spec, c, kernels) for c in configs]  # this process: each from the cache the workers filled
                row["seconds"]["procs_load"] = round(time.monotonic() - loaded, 2)
            row["seconds"][mode] = round(time.monotonic() - start, 2)
            row["failed"][mode] = sum(o is not None for o in outcomes)
        record["rows"].append(row)
        print(row, flush=True)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, nargs="+", default=[8], help="threads (or processes) at a time")
    modes = ["serial", "threads", "procs"]
    parser.add_argument("--modes", nargs="+", default=modes, choices=modes)
    parser.add_argument("--sample", type=int, default=SAMPLE, help="configs a problem (0: all)")
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS)[:3], choices=list(PROBLEMS))
    args = parser.parse_args()
    from pipeline.atomic import atomic_write_json, claim_output_file
    from pipeline.errors import INPUT, BadInput

    try:
        claim_output_file(args.out, force=True)  # before a minute of compiling
    except BadInput as err:
        print(f"compile_probe: {err}", file=sys.stderr)
        return INPUT
    atomic_write_json(args.out, measure(args.threads, args.modes, args.problems, args.sample))
    return 0


if __name__ == "__main__":
    sys.exit(main())

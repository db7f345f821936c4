"""What the runtime's dispatch costs one GEMM call on this host, measured where the bundle is applied.

    python -m pipeline.runtime.hostcost --bundle DIR --out FILE.json

Every call of an op the runtime routes passes its Python kernel, tuned or not. This times a small bf16 call the
bundle has no row for (``F.linear`` 8x264 by 136x264, or a ``bmm`` where the bundle routes no ``mm``), so that
the call is host-bound and runs torch's own kernel behind the dispatch: ``rounds`` rounds of ``calls`` calls,
torch alone and through the installed runtime in alternating order, and the median of the per-round
differences. A tuned call pays about as much (docs/triton.md, "Host-bound workloads"). The figure is for eager
code: under ``torch.compile`` without CUDA graphs a call pays about twice it, under CUDA graphs nothing after
capture. Validate's end-to-end A/B reports it with the calls that passed the runtime a run
(``stages/validate/e2e``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..atomic import atomic_write_json, claim_output_file, note_written
from ..errors import INPUT, BadInput
from ..errors import TOOL as TOOL_EXIT
from .table import MANIFEST, RESULTS, RUNTIME_RESULTS

ROUNDS, CALLS = 9, 2000
SHAPES = ((8, 264, 136), (8, 520, 264), (8, 136, 520))  # (rows, k, n): a few, in case a bundle has one of them


def measure(
    bundle: str | Path,
    *,
    device: str = "cuda",
    rounds: int = ROUNDS,
    calls: int = CALLS,
    executor=None,
    dispatch_key: str = "CUDA",
) -> dict:
    """The host cost per call of the runtime installed from ``bundle``, over torch alone (``over_us``, the median
    of per-round differences), with each arm's samples; ``skipped`` where no call can be timed for it.
    ``executor``/``dispatch_key`` exist for tests (the CPU double under ``tests/``)."""
    import torch

    import pipeline.runtime as rt

    runtime = rt.install(bundle, executor=executor, dispatch_key=dispatch_key)
    router = runtime.router
    if router is None:  # TunableOp applies every row (torch >= 2.14, no Triton row): nothing is dispatched
        return {"skipped": runtime.consumer, "routed_ops": []}
    samples: dict[str, list[float]] = {"torch": [], "runtime": []}
    try:
        ops = router.routed_ops()
        call = _call(ops, router.table.solutions, device)
        if isinstance(call, str):
            return {"skipped": call, "routed_ops": ops}
        what, run = call
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        router.unregister()  # torch alone; the plans stay built, so toggling the kernels costs no start-up
        for r in range(rounds + 1):  # round 0 warms both up, unrecorded
            for arm in ("torch", "runtime") if r % 2 else ("runtime", "torch"):
                if arm == "runtime":
                    router.register()
                value = issue_us(run, calls, sync)
                if arm == "runtime":
                    router.unregister()
                if r:
                    samples[arm].append(value)
        router.register()  # as rt.install left it, for its uninstall
        status = runtime.status()
    finally:
        rt.uninstall()
    differences = [b - a for a, b in zip(samples["torch"], samples["runtime"], strict=True)]
    return {
        "call": what,
        "routed_ops": ops,
        "rounds": rounds,
        "calls_per_round": calls,
        "torch_us": statistics.median(samples["torch"]),
        "runtime_us": statistics.median(samples["runtime"]),
        "over_us": statistics.median(differences),
        "samples_us": samples,
        "fallbacks": dict(status["fallbacks"]),
        "tuned_calls": sum(status["tuned_calls"].values()),
    }


def issue_us(call: Callable[[], object], calls: int, sync: Callable[[], object]) -> float:
    """Microseconds of host time per ``call()``, issuing ``calls`` of them between two ``sync()``s (the queue
    empty before, its drain not counted after)."""
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    issued = time.perf_counter() - start
    sync()
    return issued / calls * 1e6


def _call(ops: list[str], solutions: dict, device: str):
    """``(what, call)``: a host-bound call of a routed op whose key has no row, or why there is none."""
    import torch
    import torch.nn.functional as F

    from .frame import gemm_key

    bf16 = {"device": device, "dtype": torch.bfloat16}
    if "mm" in ops or "addmm" in ops:
        op, what = "gemm", "F.linear x[{0},{1}] w[{2},{1}] bf16"

        def operands(rows: int, k: int, n: int) -> tuple:
            return torch.randn(rows, k, **bf16), torch.randn(n, k, **bf16).t()  # F.linear(x, w) runs mm(x, w.t())

        def product(x, y):
            return F.linear(x, y.t())
    elif "bmm" in ops:
        op, what, product = "gemm_strided_batched", "torch.bmm [4,{0},{1}] x [4,{1},{2}] bf16", torch.bmm

        def operands(rows: int, k: int, n: int) -> tuple:
            return torch.randn(4, rows, k, **bf16), torch.randn(4, k, n, **bf16)
    else:
        return (
            f"the bundle routes {', '.join(ops) or 'no op'}: no mm or bmm call to time (an FP8-only bundle is not "
            "measured)"
        )
    for rows, k, n in SHAPES:
        x, y = operands(rows, k, n)
        if gemm_key(op, "bfloat16", "float32", x.shape, x.stride(), y.shape, y.stride()) not in solutions:
            return what.format(rows, k, n), lambda x=x, y=y: product(x, y)
    return "every probe shape has a row in this bundle"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--force", action="store_true", help="replace an --out that gemm-tune did not write")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args(argv)
    bundle = args.bundle.absolute()
    read = [bundle, *(bundle / name for name in (RESULTS, RUNTIME_RESULTS, MANIFEST))] if bundle.is_dir() else [bundle]
    try:
        claim_output_file(args.out, read, args.force)  # before anything is measured
    except BadInput as err:
        print(f"gemm-tune runtime host cost: {err}", file=sys.stderr)
        return INPUT
    try:
        record = measure(bundle, rounds=args.rounds, calls=args.calls)
    except (ImportError, RuntimeError, OSError, ValueError) as err:  # no GPU/torch/nvmath, a bad bundle, other GPU
        print(f"gemm-tune runtime host cost: cannot measure {args.bundle}: {err}", file=sys.stderr)
        return TOOL_EXIT
    atomic_write_json(args.out, record)
    note_written(args.out)
    if "skipped" in record:
        print(f"gemm-tune runtime host cost: not measured: {record['skipped']}", file=sys.stderr)
    else:
        print(
            f"gemm-tune runtime host cost: {record['over_us']:+.1f} us a call over torch's {record['torch_us']:.1f} us "
            f"({record['call']}, eager, median of {record['rounds']} rounds)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

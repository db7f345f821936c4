"""The runtime's host cost per call, another tree's runtime (``pipeline_old``) against this one's, A/B interleaved
in one process, on problems small enough to be host-bound (bf16 x[8,256] W[256,256]):

* ``tuned``: ``F.linear`` on the shape the table has a cuBLASLt row for,
* ``no row``: ``F.linear`` on x[16,256], which the table has no row for (torch's kernel behind the runtime),
* ``bmm``: ``torch.bmm`` [8,8,64] x [8,64,64], an op the table has no row of at all,

each eager and through ``torch.compile`` in its default mode (no CUDA graphs: Inductor's wrapper calls the
``.out`` overloads the runtime routes), against torch alone. Each round installs the old and the new runtime
in turn (their order alternating) and measures torch alone between them; ``paired_new_minus_old_us`` is the
per-round difference, whose median is the figure that resists the host's round-to-round drift.

    mkdir -p /tmp/old && git archive REV pipeline | tar -x -C /tmp/old && mv /tmp/old/pipeline /tmp/old/pipeline_old
    python3 bench/hostcost_ab.py /tmp/old REV --out bench/results/runtime_hostcost_ab_<gpu>_<date>.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

from pipeline.atomic import atomic_write_json, claim_output_file
from pipeline.errors import INPUT, BadInput

CALLS, ROUNDS = 3000, 25
FORMS = ("eager", "compiled")
CASES = ("tuned", "no row", "bmm")


def summary(samples: dict[str, list[float]]) -> dict:
    """Medians per arm, each runtime's cost over torch alone (medians), and the paired new - old differences
    per round with their median, per case and form (arms named ``"<setting> <case> <form>"``)."""
    medians = {name: statistics.median(values) for name, values in samples.items()}
    over, paired = {}, {}
    for case in CASES:
        for form in FORMS:
            arm = f"{case} {form}"
            if f"torch {arm}" not in samples:
                continue
            over[arm] = {side: medians[f"{side} {arm}"] - medians[f"torch {arm}"] for side in ("old", "new")}
            rounds = [n - o for n, o in zip(samples[f"new {arm}"], samples[f"old {arm}"], strict=True)]
            paired[arm] = {"rounds": rounds, "median": statistics.median(rounds)}
    return {"median_us_per_call": medians, "over_torch_us": over, "paired_new_minus_old_us": paired}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old_tree", help="a directory holding the other tree's package as pipeline_old")
    parser.add_argument("old_rev", help="the revision the other tree was taken from (recorded)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        claim_output_file(args.out, [], force=True)
    except BadInput as err:
        print(f"hostcost_ab: {err}", file=sys.stderr)
        return INPUT
    sys.path.insert(0, str(Path(args.old_tree).absolute()))
    import pipeline_old.runtime as old
    import torch
    import torch.nn.functional as F
    from triton_hostcost import heuristic_row, results  # bench/ is the script's path

    import pipeline.runtime as new
    from pipeline.backends.measure import device_info
    from pipeline.runtime.hostcost import issue_us

    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    x, w, other = torch.randn(8, 256, **bf16), torch.randn(256, 256, **bf16), torch.randn(16, 256, **bf16)
    a, b = torch.randn(8, 8, 64, **bf16), torch.randn(8, 64, 64, **bf16)
    csv = results(*heuristic_row(x, w), torch.__version__.split("+")[0])

    calls = {
        "tuned eager": lambda: F.linear(x, w),
        "no row eager": lambda: F.linear(other, w),
        "bmm eager": lambda: torch.bmm(a, b),
    }
    compiled = {  # default mode; one function per case, so that no case recompiles another's
        "tuned": torch.compile(lambda p, q: F.linear(p, q)),
        "no row": torch.compile(lambda p, q: F.linear(p, q)),
        "bmm": torch.compile(lambda p, q: torch.bmm(p, q)),
    }
    calls["tuned compiled"] = lambda: compiled["tuned"](x, w)
    calls["no row compiled"] = lambda: compiled["no row"](other, w)
    calls["bmm compiled"] = lambda: compiled["bmm"](a, b)

    samples: dict[str, list[float]] = {f"{s} {arm}": [] for s in ("torch", "old", "new") for arm in calls}
    routed = {}
    for r in range(ROUNDS + 1):  # round 0 warms every arm up (compiles), unrecorded
        sides = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        arms = list(calls)[r % len(calls) :] + list(calls)[: r % len(calls)]
        for setting, runtime in [("torch", None), sides[0], ("torch", None), sides[1]]:
            installed = runtime.install(csv) if runtime else None
            try:
                for arm in arms:
                    value = issue_us(calls[arm], CALLS, torch.cuda.synchronize)
                    if r:  # torch alone: two samples a round, one before each runtime
                        samples[f"{setting} {arm}"].append(value)
                if installed:
                    status = installed.status()
                    routed[setting] = {k: status.get(k) for k in ("routed_ops", "tuned_calls", "fallbacks")}
            finally:
                if runtime:
                    runtime.uninstall()
    record = {
        "date": datetime.date.today().isoformat(),
        "device": device_info(torch.device("cuda", 0)),
        "torch": torch.__version__,
        "old_rev": args.old_rev,
        "calls_per_sample": CALLS,
        "rounds": ROUNDS,
        **summary(samples),
        "samples_us": samples,
        "last_round_status": routed,
    }
    atomic_write_json(args.out, record)
    print(json.dumps({k: record[k] for k in ("over_torch_us",)}, indent=1))
    print(json.dumps({k: v["median"] for k, v in record["paired_new_minus_old_us"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

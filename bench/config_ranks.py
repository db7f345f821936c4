"""Which of the Triton configs Bench compiled came near winning: from runs' ``bench/results.json`` (CPU, no GPU).

For each GEMM Bench tuned with the Triton kernels, every Triton config's screening time over the best Triton
config's, and the best Triton config's over the best library candidate's. For each rule that would drop configs
(``RULES``), the worst loss it would have caused (the best config it keeps over the best of all) and how many
configs it keeps: a rule with no loss on many GEMMs saves Bench their compile time (docs/triton.md, "What
Bench compiles").

    python bench/config_ranks.py workdir/RUN [workdir/RUN ...] --out bench/results/config_ranks_<gpu>_<date>.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RULES = {  # name: (which GEMMs by tokens, whether a config is kept)
    "one token, gemv alone": (lambda n: n == 1, lambda c: c.family == "gemv"),
    "one token, skinny alone": (lambda n: n == 1, lambda c: c.family == "skinny"),
    "one token, literal alone": (lambda n: n == 1, lambda c: c.family == "literal"),
    "one token, no eight-column literal": (lambda n: n == 1, lambda c: c.family != "literal" or c.block_c == 1),
    "2-16 tokens, swapped alone": (lambda n: 1 < n <= 16, lambda c: c.family == "swapped"),
    "2-16 tokens, no 3-stage skinny": (lambda n: 1 < n <= 16, lambda c: c.family != "skinny" or c.num_stages > 3),
    "more tokens, K tiles of 64": (lambda n: n > 16, lambda c: c.block_k == 64),
    "more tokens, K tiles of 64, 4 stages": (lambda n: n > 16, lambda c: c.block_k == 64 and c.num_stages == 4),
}


def gemms(results: list[dict]) -> list[dict]:
    """Per GEMM with screened Triton configs: its tokens, the Triton configs' screening times, the library's best."""
    from pipeline.api import TRITON_PREFIX as PREFIX

    found = []
    for r in results:
        timed = [c for c in r["candidates"] if c.get("screen_us")]
        own = {c["name"]: c["screen_us"] for c in timed if c["name"].startswith(PREFIX)}
        library = [c["screen_us"] for c in timed if not c["name"].startswith("triton")]
        if own and library:
            p = r["problem"]
            found.append({"gemm": f"{p['op']} {p['m']}x{p['n']}x{p['k']} {p['a_type']}", "tokens": p["n"],
                          "triton_us": own, "library_us": min(library)})  # fmt: skip
    return found


def ranks(rows: list[dict]) -> dict:
    """Each rule's worst loss and kept configs over the GEMMs it applies to; each GEMM's best family and figures."""
    from pipeline.api import triton_config_from_name as config_from_name

    rules = {}
    for name, (applies, keeps) in RULES.items():
        worst, kept, total, count = 1.0, 0, 0, 0
        for row in (r for r in rows if applies(r["tokens"])):
            times = row["triton_us"]
            best = min(times.values())
            left = [t for n, t in times.items() if keeps(config_from_name(n))]
            worst = max(worst, min(left) / best if left else float("inf"))
            kept, total, count = kept + len(left), total + len(times), count + 1
        rules[name] = {"gemms": count, "worst_loss": round(worst, 4), "configs_kept": kept, "configs": total}
    per_gemm = []
    for r in rows:
        best = min(r["triton_us"], key=r["triton_us"].get)
        per_gemm.append({
            "gemm": r["gemm"], "configs": len(r["triton_us"]), "best": best,
            "best_family": config_from_name(best).family,
            "triton_over_library": round(r["triton_us"][best] / r["library_us"], 4),
        })  # fmt: skip
    return {"rules": rules, "gemms": per_gemm}


def read_runs(runs: list[Path]) -> list[dict]:
    """``gemms`` of every run directory's ``bench/results.json``; ``BadInput`` naming the file (and line) that is
    missing, not JSON, or not Bench's results."""
    from pipeline.api import BadInput, load_json

    rows = []
    for run in runs:
        path = run / "bench" / "results.json"
        if not path.is_file():
            raise BadInput(f"{path}: no such file; give run directories of TuneWorkload (workdir/<run-name>)")
        try:
            rows += gemms(load_json(path, "Bench results JSON"))
        except (KeyError, TypeError, AttributeError) as err:
            raise BadInput(f"{path}: not Bench's results ({type(err).__name__}: {err})") from None
    return rows


def main() -> int:
    from pipeline.api import INPUT, BadInput, atomic_write_json, claim_output_file

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    try:
        claim_output_file(args.out, [run / "bench" / "results.json" for run in args.runs], force=True)
        report = {"runs": [r.name for r in args.runs], **ranks(read_runs(args.runs))}  # names: paths are the machine's
    except BadInput as err:
        print(f"config_ranks: {err}", file=sys.stderr)
        return INPUT
    atomic_write_json(args.out, report)
    print(json.dumps(report["rules"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

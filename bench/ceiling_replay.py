"""Replay searches offline on the ceiling dataset of ``bench/cublaslt_ceiling.py`` (CPU, no GPU needed).

    python bench/ceiling_replay.py bench/results/cublaslt_ceiling_h100_2026-11-22.json.gz

A strategy is a set of candidate indices per problem (a prefix of the recorded candidate order: torch's
default, the heuristic's list, the enumeration). Its finalists are chosen from the *recorded* screen with
``pipeline.backends.selection.finalists``; a finalist counts at its confirmed (full-harness) time where the
run measured it, else at its screened time (the dataset's median confirmed/screened ratio is 1.0003, so the
proxy is unbiased). The replayed speedup is the default's confirmed time over the best of those.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.backends.selection import finalists

Strategy = Callable[[dict], int]  # problem row -> how many candidates (a prefix of the order) it screens
STRATEGIES: dict[str, Strategy] = {  # a dataset made with --neighbours has them right after the heuristic's
    "heuristic list only": lambda r: 1 + r["heuristic"],
    "heuristic + its neighbours": lambda r: 1 + r["heuristic"] + r.get("neighbours", 0),
    "heuristic + neighbours + 96 drawn (the pipeline's pool size)": lambda r: 1 + r["heuristic"]
    + r.get("neighbours", 0) + 96,
    "heuristic + neighbours + 512 drawn": lambda r: 1 + r["heuristic"] + r.get("neighbours", 0) + 512,
    "everything screened (the ceiling's pool)": lambda r: len(r["screened_us"]),
}


def load(path: str | Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def confirmed_speedup(row: dict, prefix: int, per_tier: int = 4) -> float:
    """The replayed result of screening the first ``prefix`` candidates of ``row``."""
    screened = [t if t is not None and t > 0 else None for t in row["screened_us"][:prefix]]
    final = {f["index"]: f["final_us"] for f in row["finalists"].values() if f["final_us"]}
    chosen = finalists([None, *screened[1:]], per_tier)
    best = min((final.get(i, screened[i]) for i in chosen), default=row["default_us"])
    return row["default_us"] / min(best, row["default_us"])


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def replay(data: dict) -> dict[str, dict]:
    rows = data["problems"]
    out = {}
    for name, strategy in STRATEGIES.items():
        speedups = [confirmed_speedup(r, min(strategy(r), len(r["screened_us"]))) for r in rows]
        screened = sum(min(strategy(r), len(r["screened_us"])) for r in rows)
        out[name] = {"geomean": geomean(speedups), "min": min(speedups), "screened": screened,
                     "per_problem": speedups}
    return out


def screen_bias(data: dict) -> dict[str, float]:
    """Confirmed over screened time: every finalist, and each problem's winner (the winner's curse)."""
    ratios = [f["final_us"] / f["screened_us"] for r in data["problems"] for f in r["finalists"].values()
              if f["final_us"] and f["screened_us"] and f["screened_us"] > 0]
    winners = [r["finalists"][r["winner"]] for r in data["problems"] if r["winner"]]
    won = [f["final_us"] / f["screened_us"] for f in winners if f["screened_us"] and f["screened_us"] > 0]
    return {"finalists_median": statistics.median(ratios), "winners_median": statistics.median(won),
            "finalists": len(ratios)}


def main(path: str) -> int:
    data = load(path)
    s = data["summary"]
    print(f"ceiling (measured): x{s['ceiling_geomean']:.4f}; cheap search (measured in the same run): "
          f"x{s['cheap_geomean']:.4f} in {s['cheap_s']:.1f} s against {s['exhaustive_s']:.0f} s\n")
    print("| strategy (replayed) | geomean | min | candidates screened |")
    print("|---|---|---|---|")
    for name, r in replay(data).items():
        print(f"| {name} | x{r['geomean']:.4f} | x{r['min']:.3f} | {r['screened']} |")
    print(f"\nconfirmed / screened: {screen_bias(data)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

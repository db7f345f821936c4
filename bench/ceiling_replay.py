"""Replay searches offline on the ceiling dataset of ``bench/cublaslt_ceiling.py`` (CPU, no GPU needed).

    python bench/ceiling_replay.py bench/results/cublaslt_ceiling_full_h100_2026-11-23.json.gz
    python bench/ceiling_replay.py --merge OUT.json.gz PART1.json.gz PART2.json.gz   # runs split by --start
    python bench/ceiling_replay.py --table DATASET.json.gz                             # per problem, markdown

A strategy is a set of candidate indices per problem (a prefix of the recorded candidate order: torch's
default, the heuristic's list, the enumeration). Its finalists are chosen from the *recorded* screen with
``pipeline.backends.selection.finalists`` under the tiers the run confirmed its finalists with (a row's
``tiers``; before they were recorded, ``selection.TIERS``); a finalist counts at its confirmed (full-harness)
time where the run measured it, else at its screened time (the dataset's median confirmed/screened ratio is
1.0003, but a proxy chosen for being fastest is lucky: replay a rule only on a run that confirmed its
tiers). The replayed speedup is the default's confirmed time over the best of those.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.api import TIERS, finalists, geomean

Strategy = Callable[[dict], int]  # problem row -> how many candidates (a prefix of the order) it screens
STRATEGIES: dict[str, Strategy] = {  # a dataset made with --neighbours has them right after the heuristic's
    "heuristic list only": lambda r: 1 + r["heuristic"],
    "heuristic + its neighbours": lambda r: 1 + r["heuristic"] + r.get("neighbours", 0),
    "heuristic + neighbours + 96 drawn (the pipeline's pool size)": lambda r: (
        1 + r["heuristic"] + r.get("neighbours", 0) + 96
    ),
    "heuristic + neighbours + 512 drawn": lambda r: 1 + r["heuristic"] + r.get("neighbours", 0) + 512,
    "everything screened (the ceiling's pool)": lambda r: len(r["screened_us"]),
}


def load(path: str | Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def confirmed_speedup(row: dict, prefix: int, per_tier: int = 4) -> float:
    """The replayed result of screening the first ``prefix`` candidates of ``row``."""
    return speedup_of(row, list(range(prefix)), per_tier)


def speedup_of(row: dict, indices: list[int], per_tier: int = 4) -> float:
    """The replayed result of screening the candidates ``indices`` (0, torch's default, first) of ``row``."""
    screened = [row["screened_us"][i] if (row["screened_us"][i] or 0) > 0 else None for i in indices]
    final = {f["index"]: f["final_us"] for f in row["finalists"].values() if f["final_us"]}
    chosen = finalists([None, *screened[1:]], per_tier, row.get("tiers", TIERS))  # the run's own rule
    best = min((final.get(indices[i], screened[i]) for i in chosen), default=row["default_us"])
    return row["default_us"] / min(best, row["default_us"])


def _axes_apart(a: list, b: list) -> int:
    """How many of the space's axes two configs (``FIELDS`` order) differ on; split-K and its reduction are one."""
    return sum(
        (
            a[0] != b[0],
            a[1] != b[1],
            a[2] != b[2],
            (a[3], a[4]) != (b[3], b[4]),
            a[5] != b[5],
            a[6] != b[6],
            a[7] != b[7],
        )
    )


def neighbour_pool(row: dict, keep: int) -> list[int]:
    """The product's pool replayed (``TuneSettings.neighbours``): the default, the heuristic's list, and per
    heuristic result the first ``keep`` recorded neighbours one axis away from it, in the order the run
    found them (nearest first)."""
    heuristic = list(range(1, 1 + row["heuristic"]))
    configs, kept, pool = row["configs"], dict.fromkeys(heuristic, 0), [0, *heuristic]
    for j in range(1 + row["heuristic"], 1 + row["heuristic"] + row.get("neighbours", 0)):
        if j >= len(configs):
            break
        source = next((i for i in heuristic if _axes_apart(configs[i], configs[j]) == 1), None)
        if source is not None and kept[source] < keep:
            kept[source] += 1
            pool.append(j)
    return pool


def summarize(rows: list[dict]) -> dict:
    """The dataset's headline figures: the ceiling, the searches measured in the same run, efficiencies."""
    measured = [r for r in rows if "product" in r]
    speedups = [r["ceiling_speedup"] for r in rows]
    return {
        "problems": len(rows),
        "ceiling_geomean": geomean(speedups),
        "cheap_geomean": geomean([r["cheap"]["speedup"] for r in rows]),
        "cheap_s": sum(r["cheap"]["seconds"] for r in rows),
        "product_geomean": geomean([r["product"]["speedup"] for r in measured]),
        "product_shipped_geomean": geomean([r["product"]["shipped"] for r in measured]),
        "product_s": sum(r["product"]["seconds"] for r in measured),
        "nvmath_geomean": geomean([r["nvmath"]["speedup"] for r in rows if "speedup" in r.get("nvmath", {})]),
        "nvmath_shipped_geomean": geomean([r["nvmath"]["shipped"] for r in rows if "shipped" in r.get("nvmath", {})]),
        "exhaustive_s": sum(sum(r["seconds"].values()) for r in rows),
        "ceiling_min": min(speedups, default=None),
        **_ours_of_ceiling([r["ours_of_ceiling"] for r in rows if r.get("ours_of_ceiling")]),
        **_ours_of_ceiling([r["judged"]["ours_of_ceiling"] for r in rows if r.get("judged")], "judged_"),
        "eff_default": geomean([r["floor_us"] / r["default_us"] for r in rows]),
        "eff_ceiling": geomean([r["floor_us"] / r["ceiling_us"] for r in rows]),
    }


def _ours_of_ceiling(ratios: list[float], prefix: str = "") -> dict:
    """The product's winner against the ceiling: timed in the ceiling's own rounds (datasets from 2026-11-23 on),
    or, ``judged_``, in rounds of their own after the ceiling was chosen (no winner's curse)."""
    if not ratios:
        return {}
    return {
        f"{prefix}ours_of_ceiling_geomean": geomean(ratios),
        f"{prefix}ours_of_ceiling_min": min(ratios),
        f"{prefix}ours_at_99pct": sum(r >= 0.99 for r in ratios),
        f"{prefix}ours_judged": len(ratios),
    }


def merge(parts: list[dict]) -> dict:
    """One dataset from runs over disjoint problem ranges of the same settings (``--start``)."""
    rows = [row for part in parts for row in part["problems"]]
    labels = [r["label"] for r in rows]
    if len(set(labels)) != len(labels):
        raise ValueError("the parts overlap: a problem appears twice")
    settings = {k: v for k, v in parts[0]["settings"].items() if k != "start"}
    if any({k: v for k, v in p["settings"].items() if k != "start"} != settings for p in parts):
        raise ValueError("the parts were made with different settings")
    return {
        **parts[0],
        "settings": settings,
        "wall_s": sum(p["wall_s"] for p in parts),
        "parts": len(parts),
        "summary": summarize(rows),
        "problems": rows,
    }


def replay(data: dict, keeps: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, dict]:
    """Each prefix strategy, and (on a dataset with neighbours) the product's pool for each ``keeps``."""
    rows = data["problems"]
    pools = {
        name: lambda r, s=strategy: list(range(min(s(r), len(r["screened_us"]))))
        for name, strategy in STRATEGIES.items()
    }
    if any(r.get("neighbours") for r in rows):
        pools |= {
            f"heuristic + its {k} nearest valid neighbours each": lambda r, k=k: neighbour_pool(r, k) for k in keeps
        }
    out = {}
    for name, pool in pools.items():
        chosen = [pool(r) for r in rows]
        speedups = [speedup_of(r, indices) for r, indices in zip(rows, chosen, strict=True)]
        out[name] = {
            "geomean": geomean(speedups),
            "min": min(speedups),
            "screened": sum(map(len, chosen)),
            "per_problem": speedups,
        }
    return out


def screen_bias(data: dict) -> dict[str, float]:
    """Confirmed over screened time: every finalist, and each problem's winner (the winner's curse)."""
    ratios = [
        f["final_us"] / f["screened_us"]
        for r in data["problems"]
        for f in r["finalists"].values()
        if f["final_us"] and f["screened_us"] and f["screened_us"] > 0
    ]
    winners = [r["finalists"][r["winner"]] for r in data["problems"] if r["winner"]]
    won = [f["final_us"] / f["screened_us"] for f in winners if f["screened_us"] and f["screened_us"] > 0]
    return {
        "finalists_median": statistics.median(ratios),
        "winners_median": statistics.median(won),
        "finalists": len(ratios),
    }


def table(data: dict) -> list[str]:
    """The per-problem table of ``bench/README.md``: each search as measured in the run, against torch's default."""

    def nvmath(row: dict) -> str:
        return f"x{row['nvmath']['speedup']:.3f}" if "speedup" in row.get("nvmath", {}) else "-"

    lines = [
        "| problem | default us | ceiling | ours, measured (its time) | heuristic list only | nvmath autotune "
        "| efficiency default -> ceiling | pool |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["problems"]:
        lines.append(
            f"| {r['label']} | {r['default_us']:.1f} | x{r['ceiling_speedup']:.3f} | "
            f"x{r['product']['speedup']:.3f} ({r['product']['seconds']:.1f} s) | x{r['cheap']['speedup']:.3f} "
            f"| {nvmath(r)} | {r['floor_us'] / r['default_us']:.2f} -> {r['floor_us'] / r['ceiling_us']:.2f} "
            f"| {r['pool']} |"
        )
    s = data["summary"]
    nv = f"x{s['nvmath_geomean']:.3f}" if s.get("nvmath_geomean") else "-"
    lines.append(
        f"| **geomean** | | **x{s['ceiling_geomean']:.3f}** | **x{s['product_geomean']:.3f}** "
        f"({s['product_s']:.0f} s) | x{s['cheap_geomean']:.3f} | {nv} | {s['eff_default']:.3f} -> "
        f"{s['eff_ceiling']:.3f} | {sum(r['pool'] for r in data['problems'])} |"
    )
    return lines


def main(path: str) -> int:
    data = load(path)
    s = data["summary"]
    print(
        f"ceiling (measured): x{s['ceiling_geomean']:.4f}; cheap search (measured in the same run): "
        f"x{s['cheap_geomean']:.4f} in {s['cheap_s']:.1f} s against {s['exhaustive_s']:.0f} s\n"
    )
    print("| strategy (replayed) | geomean | min | candidates screened |")
    print("|---|---|---|---|")
    for name, r in replay(data).items():
        print(f"| {name} | x{r['geomean']:.4f} | x{r['min']:.3f} | {r['screened']} |")
    print(f"\nconfirmed / screened: {screen_bias(data)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--table":  # --table DATASET.json.gz: the per-problem markdown table
        print("\n".join(table(load(sys.argv[2]))))
        raise SystemExit(0)
    if sys.argv[1] == "--merge":  # --merge OUT.json.gz PART.json.gz ...
        merged = merge([load(p) for p in sys.argv[3:]])
        with gzip.open(sys.argv[2] + ".tmp", "wt") as f:
            json.dump(merged, f, separators=(",", ":"))
        Path(sys.argv[2] + ".tmp").replace(sys.argv[2])
        raise SystemExit(main(sys.argv[2]))
    raise SystemExit(main(sys.argv[1]))

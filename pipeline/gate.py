"""The gate: which validated rows the bundle keeps, and whether the bundle may ship at all.

A row is kept when its tuned time beats the baseline by ``margin`` (medians of interleaved rounds);
the others are dropped and listed (a dropped row that measured slower than its baseline beyond noise is
marked as a regression, but ships nothing). Every kept row is measured a second time, on fresh operand
buffers (``confirm``); the bundle is refused when a kept row regresses there beyond the measured noise
(the interquartile spread of the two measurements), or when the GEMM-time speedup weighted by call
count (dropped rows count at baseline speed) is under ``min_speedup``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

DEFAULT = "Default"


@dataclass(frozen=True)
class GateSettings:
    margin: float = 0.02
    min_speedup: float = 1.0


def speedup(row: dict) -> float:
    return row["baseline"]["median_us"] / row["tuned"]["median_us"]


def noise(row: dict) -> float:
    """Relative spread of a measurement pair: the larger interquartile range over its median."""
    spreads = [(s["p75_us"] - s["p25_us"]) / s["median_us"] for s in (row["baseline"], row["tuned"])]
    return max(0.0, *spreads)


def regressed(pair: dict) -> bool:
    """The tuned median is slower than the baseline's by more than the pair's noise."""
    return pair["tuned"]["median_us"] > pair["baseline"]["median_us"] * (1 + noise(pair))


@dataclass
class GateResult:
    kept: list[dict] = field(default_factory=list)
    dropped: list[tuple[dict, str]] = field(default_factory=list)
    regressions: list[tuple[dict, str]] = field(default_factory=list)
    weighted_speedup: float = 1.0
    passed: bool = True
    message: str = ""

    def to_json(self) -> dict:
        return {"passed": self.passed, "message": self.message, "weighted_speedup": self.weighted_speedup,
                "kept": [r["key"] for r in self.kept],
                "dropped": [{"key": r["key"], "reason": why} for r, why in self.dropped],
                "regressions": [{"key": r["key"], "detail": why} for r, why in self.regressions]}


def gate(rows: Sequence[dict], settings: GateSettings) -> GateResult:
    result = GateResult()
    base_total = tuned_total = 0.0
    for row in rows:
        base, tuned, count = row["baseline"]["median_us"], row["tuned"]["median_us"], row.get("count", 1)
        if row["solution"] == DEFAULT:
            result.dropped.append((row, "the default already is the best: nothing to ship"))
        elif base / tuned >= 1 + settings.margin:
            result.kept.append(row)
            confirm = row.get("confirm")
            if confirm and regressed(confirm):
                result.regressions.append((row, f"confirmation {confirm['tuned']['median_us']:.1f} us vs baseline "
                                                f"{confirm['baseline']['median_us']:.1f} us, beyond the "
                                                f"{noise(confirm):.1%} measured noise"))
        else:
            why = f"x{base / tuned:.3f} does not beat the baseline by {settings.margin:.0%}"
            result.dropped.append((row, why + (" (regressed beyond noise)" if regressed(row) else "")))
        kept = row in result.kept
        base_total += count * base
        tuned_total += count * (tuned if kept else base)
    result.weighted_speedup = base_total / tuned_total if tuned_total else 1.0
    problems = []
    if result.weighted_speedup < settings.min_speedup:
        problems.append(f"weighted GEMM speedup x{result.weighted_speedup:.3f} is under the required "
                        f"x{settings.min_speedup:.3f}")
    if result.regressions:
        problems.append(f"{len(result.regressions)} kept rows regress beyond noise when measured again: "
                        + "; ".join(f"{r['key']} ({why})" for r, why in result.regressions))
    result.passed = not problems
    result.message = ("bundle refused: " + " and ".join(problems)) if problems else (
        f"bundle accepted: {len(result.kept)} rows kept, weighted GEMM speedup x{result.weighted_speedup:.3f}")
    return result

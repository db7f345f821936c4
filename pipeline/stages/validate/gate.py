"""The gate: which validated rows the bundle keeps, and whether the bundle may ship at all.

A row is kept when its tuned time beats the baseline by ``margin`` (medians of interleaved rounds) and a
second measurement on fresh operand buffers (``confirm``) does not find it slower, or, where its first pair
fell short of the margin but not of the baseline by more than it (``validate.second_look``), when both pairs
are faster than the baseline and pooled (``measured.pooled``) beat the margin; the others are dropped and
listed (a dropped row that measured slower beyond noise is marked, but ships nothing). The
bundle is refused when a row that passed the margin regresses in its confirmation beyond the measured
noise, or when the weighted GEMM speedup is under ``min_speedup``. That speedup is the workload's GEMM time
before over after: each row weighs its ``time_share`` of the workload's baseline GEMM time (collection
measured it), the share no row covers (GEMMs not tuned) stays at baseline speed, dropped rows count at
baseline speed and kept rows at their confirmed speed. Rows without a time share weigh their calls x the
baseline time measured here. The noise of a confirmed row is the widest of the
interquartile spreads, the disagreement between the two baseline measurements and a floor (0.5%).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...backends.base import DEFAULT
from ...defaults import GATE_MARGIN
from ...errors import Refused
from .measured import MeasuredRow, pooled


class GateRefused(Refused):
    """The validated bundle did not pass the gate."""


@dataclass(frozen=True)
class GateSettings:
    margin: float = GATE_MARGIN
    min_speedup: float = 1.0
    noise_floor: float = 0.005


def confirm_noise(row: MeasuredRow, floor: float) -> float:
    """Noise of a row measured twice: the interquartile spreads of both pairs, how far the two measurements
    of the unchanged baseline disagree, and ``floor`` (clock and timer jitter)."""
    assert row.confirm is not None
    drift = abs(row.baseline.median / row.confirm.baseline.median - 1)
    return max(floor, row.noise, row.confirm.noise, drift)


def weights(rows: Sequence[MeasuredRow]) -> tuple[list[float], float, str]:
    """Each row's share of the workload's baseline GEMM time, the share no row covers, and what they rest on."""
    shares = [row.time_share for row in rows]
    if rows and all(share is not None for share in shares):
        return shares, max(0.0, 1.0 - sum(shares)), "time share"  # type: ignore[arg-type]
    costs = [row.calls * row.baseline.median for row in rows]
    total = sum(costs) or 1.0
    return [cost / total for cost in costs], 0.0, "calls x baseline time"


@dataclass
class GateResult:
    kept: list[MeasuredRow] = field(default_factory=list)
    dropped: list[tuple[MeasuredRow, str]] = field(default_factory=list)
    regressions: list[tuple[MeasuredRow, str]] = field(default_factory=list)
    weighted_speedup: float = 1.0
    weight_basis: str = "time share"
    passed: bool = True
    message: str = ""

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "message": self.message,
            "weighted_speedup": self.weighted_speedup,
            "weight_basis": self.weight_basis,
            "kept": [r.key for r in self.kept],
            "dropped": [{"key": r.key, "reason": why} for r, why in self.dropped],
            "regressions": [{"key": r.key, "detail": why} for r, why in self.regressions],
        }


def gate(rows: Sequence[MeasuredRow], settings: GateSettings) -> GateResult:
    result = GateResult()
    shares, tuned_total, result.weight_basis = weights(rows)
    for row, share in zip(rows, shares, strict=True):
        pair, confirm, kept = row.measured, row.confirm, False
        both = pooled(pair.speedup, confirm.speedup if confirm else None)
        if row.solution == DEFAULT:
            result.dropped.append((row, "the default already is the best: nothing to ship"))
        elif pair.speedup >= 1 + settings.margin and (not confirm or confirm.speedup >= 1.0):
            result.kept.append(row)
            pair, kept = confirm or pair, True
        elif pair.speedup >= 1 + settings.margin:
            spread = confirm_noise(row, settings.noise_floor)
            detail = f"confirmation {confirm.tuned.median:.1f} us vs baseline {confirm.baseline.median:.1f} us"
            if confirm.regressed(spread):
                result.regressions.append((row, f"{detail}, beyond the {spread:.1%} measured noise"))
            result.dropped.append((row, f"x{pair.speedup:.3f} not confirmed: {detail}"))
        elif confirm and min(pair.speedup, confirm.speedup) >= 1.0 and both >= 1 + settings.margin:
            result.kept.append(row)  # the first pair fell short; both pairs together clear the margin
            pair, kept = confirm, True
        else:
            why = f"x{pair.speedup:.3f} does not beat the baseline by {settings.margin:.0%}"
            if confirm:
                why = f"x{both:.3f} over both pairs does not beat the baseline by {settings.margin:.0%}"
            result.dropped.append((row, why + (" (regressed beyond noise)" if pair.regressed() else "")))
        tuned_total += share * (1 / pair.speedup if kept else 1.0)
    # nothing kept is exactly x1 (a sum of float shares is not); a bundle never fails the bar by rounding
    result.weighted_speedup = 1.0 / tuned_total if tuned_total and result.kept else 1.0
    problems = []
    if result.weighted_speedup < settings.min_speedup * (1 - 1e-9):
        problems.append(
            f"weighted GEMM speedup x{result.weighted_speedup:.3f} is under the required x{settings.min_speedup:.3f}"
        )
    if result.regressions:
        problems.append(
            f"{len(result.regressions)} kept rows regress beyond noise when measured again: "
            + "; ".join(f"{r.key} ({why})" for r, why in result.regressions)
        )
    result.passed = not problems
    result.message = (
        ("bundle refused: " + " and ".join(problems))
        if problems
        else (f"bundle accepted: {len(result.kept)} rows kept, weighted GEMM speedup x{result.weighted_speedup:.3f}")
    )
    return result

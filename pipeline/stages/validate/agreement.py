"""Does Bench predict what ships? Bench's speedup for each winner it named beside the speedup Validate
measured for the same row, and how far the two agree.

Bench's figure is the reading it reports: the winner timed alone against torch's default on operands no
earlier reading used, after its verdict crowned it (``backends/cublaslt.py``, ``_decide``). Validate's figure
is its estimate from every pair it measured of the row: the first pair, and for a row whose first pair came
within the margin of the baseline or beat it the confirmation on other operands too (the gate keeps such a row
at its confirmed speed), pooled as the geometric mean of the two speedups (``measured.pooled``); one pair is
as much a draw as one verdict (on the H100 a first pair strayed 3% from its own confirmation where the
confirmation agreed with Bench: docs/cublaslt.md section 3). A row agrees when the two speedups differ by at
most ``band`` (2% by default, of the predicted one). The confirmation against the first pair says how far any
prediction can agree. Each row also gives torch's default's time as Bench read it and as Validate's first pair
did: where the two disagree, it shows whether the default moved or the winner did. Rows Bench did not name
(the default, a ``--results`` file, a re-timed winner of an earlier stack whose prediction is gone) have no
prediction and are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from ...backends.base import DEFAULT, ProblemResult
from ...formats.tunableop import parse_key
from ...problem import GemmProblem
from .measured import MeasuredRow, pooled

BAND = 0.02


class Prediction(NamedTuple):
    """Bench's figure for a winner: its speedup, and torch's default's time in the same reading (us)."""

    speedup: float
    default_us: float


def predictions(results: Iterable[ProblemResult]) -> dict[tuple[GemmProblem, str], Prediction]:
    """Bench's prediction for each winner it named, by (problem, solution)."""
    return {
        (r.problem, r.winner): Prediction(r.speedup, r.default_us)
        for r in results
        if r.has_winner and r.speedup and r.default_us
    }


def compared_row(key: str, solution: str, predicted: float, first: float, confirmed: float | None, noise: float,
                 band: float = BAND, default_us: tuple[float, float] | None = None) -> dict:  # fmt: skip
    """One predicted row's figures and whether they agree; ``default_us``: torch's default as Bench read it and
    as Validate's first pair did."""
    validated = pooled(first, confirmed)
    row = {
        "key": key,
        "solution": solution,
        "predicted": predicted,
        "validated": validated,
        "first": first,
        "confirmed": confirmed,
        "noise": noise,
        "agrees": abs(validated / predicted - 1) <= band,
    }
    if default_us is not None:
        row["default_us"] = {"bench": default_us[0], "validate": default_us[1]}
    return row


def agreement(
    rows: Sequence[MeasuredRow], predicted: Mapping[tuple[GemmProblem, str], Prediction], band: float = BAND
) -> dict:
    """Per predicted row its figures and whether they agree; over them the fraction that agrees and the worst
    validated speedup (None where Bench predicted no row)."""
    compared = []
    for row in rows:
        if row.solution == DEFAULT:
            continue
        forecast = predicted.get((parse_key(*row.key.split(",", 1)), row.solution))
        if forecast is None:
            continue
        confirmed = row.confirm.speedup if row.confirm else None
        defaults = (forecast.default_us, row.baseline.median)
        compared.append(
            compared_row(row.key, row.solution, forecast.speedup, row.speedup, confirmed, row.noise, band, defaults)
        )
    return summarize(compared, band)


def summarize(compared: Sequence[Mapping], band: float = BAND) -> dict:
    """``agreement``'s figures over rows of ``compared_row``."""
    repeated = [r for r in compared if r["confirmed"] is not None]
    worst = min(compared, key=lambda r: r["validated"], default=None)
    return {
        "band": band,
        "predicted_rows": len(compared),
        "agreeing_fraction": sum(r["agrees"] for r in compared) / len(compared) if compared else None,
        "worst_validated": worst["validated"] if worst else None,
        "self_agreeing": [sum(abs(r["confirmed"] / r["first"] - 1) <= band for r in repeated), len(repeated)],
        "worst_key": worst["key"] if worst else None,
        "rows": list(compared),
    }


def upgraded(summary: Mapping) -> dict:
    """A summary written before the figure pooled Validate's pairs (its rows' ``validated`` is the first pair's,
    and they have no ``first``), recomputed from the figures it recorded."""
    if all("first" in r for r in summary["rows"]):
        return dict(summary)
    band = summary.get("band", BAND)
    rows = [
        compared_row(r["key"], r["solution"], r["predicted"], r["validated"], r["confirmed"], r["noise"], band)
        for r in summary["rows"]
    ]  # written before rows kept the default's times
    return summarize(rows, band)


def line(summary: Mapping) -> str:
    """One sentence of ``agreement``'s figures for the report."""
    if not summary["predicted_rows"]:
        return "Bench predicted no row of this bundle (no winner of its own was validated)"
    text = (
        f"Bench's prediction: {summary['predicted_rows']} winners, {summary['agreeing_fraction']:.0%} within "
        f"{summary['band']:.0%} of the validated speedup; worst validated x{summary['worst_validated']:.3f}"
    )
    same, repeated = summary.get("self_agreeing") or (0, 0)
    if repeated:
        text += f"; Validate's confirmation within {summary['band']:.0%} of its first pair on {same} of {repeated}"
    return text

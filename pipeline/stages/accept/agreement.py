"""Does Bench predict what ships? Bench's speedup for each winner it named beside the speedup Validate
measured for the same row (baseline against the tuned artifact, its first pair), and how far the two agree.

Bench's figure is its verdict: the winner re-timed alone against torch's default on operands no earlier
measurement used (``backends/cublaslt.py``). A row agrees when the two speedups differ by at most ``band``
(2% by default, of the predicted one). Validate's own repeat (the confirmation pair of a row that passed the
margin, on other operands) against its first pair says how far any prediction can agree. Rows Bench did
not name (the default, a ``--results`` file, a re-timed winner of an earlier stack whose prediction is
gone) have no prediction and are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ...backends.base import DEFAULT, ProblemResult
from ...formats.tunableop import parse_key
from ...problem import GemmProblem
from .measured import MeasuredRow

BAND = 0.02


def predictions(results: Iterable[ProblemResult]) -> dict[tuple[GemmProblem, str], float]:
    """Bench's predicted speedup of each winner it named, by (problem, solution)."""
    return {(r.problem, r.winner): r.speedup for r in results if r.has_winner and r.speedup}


def agreement(
    rows: Sequence[MeasuredRow], predicted: Mapping[tuple[GemmProblem, str], float], band: float = BAND
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
        compared.append(
            {
                "key": row.key,
                "solution": row.solution,
                "predicted": forecast,
                "validated": row.speedup,
                "confirmed": row.confirm.speedup if row.confirm else None,
                "noise": row.noise,
                "agrees": abs(row.speedup / forecast - 1) <= band,
            }
        )
    repeated = [r for r in compared if r["confirmed"] is not None]
    worst = min(compared, key=lambda r: r["validated"], default=None)
    return {
        "band": band,
        "predicted_rows": len(compared),
        "agreeing_fraction": sum(r["agrees"] for r in compared) / len(compared) if compared else None,
        "worst_validated": worst["validated"] if worst else None,
        "self_agreeing": [sum(abs(r["confirmed"] / r["validated"] - 1) <= band for r in repeated), len(repeated)],
        "worst_key": worst["key"] if worst else None,
        "rows": compared,
    }


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

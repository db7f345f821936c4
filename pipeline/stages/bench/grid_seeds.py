"""Bench over an M grid in two passes (``--m-grid``, docs/serving.md): the anchors first, the token counts the
workload ran (but those ``--grid-budget`` seeds: ``grid_budget.BudgetFit``) and the powers of two, each searched in
full; then every other grid point, whose search starts by
re-timing the winner of its weight's nearest crowned anchor at or above it (the bucket that point would otherwise
fall into), as ``base.tune`` re-times a cached winner: where that winner still beats torch's default by the margin
there, no search runs; where it does not (or the library refuses it at that size), the point is searched in full.
A point with no crowned anchor above is searched in full at once: a winner from below held at none of 197 such
points over two vLLM-sized grids, and each cost its 0.7 s verdict (docs/decisions.md). Seeding saves the search,
not the verdicts, which are most of a search's time: on the vLLM-sized Qwen2-7B FP8 grid a seeded count took
3.0 s against 4.1 s searched (docs/serving.md, "What seeding saves").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from ...backends.base import ProblemResult
from ...problem import GemmProblem
from .tune import problem_id, result_path

Tuner = Callable[[list[GemmProblem], dict[str, dict], dict[str, str]], None]  # problems, previous, sources


def is_anchor(problem: GemmProblem, searched: Collection[GemmProblem]) -> bool:
    """Searched in full: a problem ``searched`` names (the workload ran it and no budget seeds it), one outside
    any family, or a power-of-two token count."""
    n = problem.n
    return problem in searched or problem.token_family() is None or not isinstance(n, int) or n & (n - 1) == 0


def seeds(rest: Sequence[GemmProblem], anchors: Sequence[GemmProblem], out_dir: Path) -> tuple[dict, dict]:
    """For each of ``rest``, the winner of its family's nearest anchor at or above it that Bench crowned in
    ``out_dir``, as a previous result of that problem, and where it came from (by problem id); one with no such
    anchor has none (the module's docstring: a winner from below does not hold)."""
    crowned: dict[GemmProblem, list[tuple[int, dict]]] = {}
    for anchor in anchors:
        path = result_path(out_dir, anchor)
        family = anchor.token_family()
        if family is None or not path.exists():
            continue
        data = json.loads(path.read_text())
        if ProblemResult.from_json(data).has_winner:
            crowned.setdefault(family, []).append((anchor.n, data))  # type: ignore[arg-type]
    previous, sources = {}, {}
    for problem in rest:
        found = crowned.get(problem.token_family(), [])  # type: ignore[arg-type]
        above = [(m, d) for m, d in found if m >= problem.n]  # type: ignore[operator]
        if not above:
            continue
        n, data = min(above, key=lambda item: item[0])
        previous[problem_id(problem)] = {**data, "problem": problem.to_dict()}
        sources[problem_id(problem)] = f"grid point M = {n}"
    return previous, sources


def tune_in_two_passes(
    problems: Sequence[GemmProblem],
    searched: Collection[GemmProblem],
    out_dir: Path,
    tune: Tuner,
    previous: dict[str, dict],
    sources: dict[str, str],
) -> None:
    """Tune the anchors, then the rest seeded from them; a winner from the cache or an earlier stack
    (``previous``) is re-timed first as ever, before any neighbour's."""
    anchors = [p for p in problems if is_anchor(p, searched)]
    rest = [p for p in problems if not is_anchor(p, searched)]
    tune(anchors, previous, sources)
    if rest:
        seeded, seeded_from = seeds(rest, anchors, out_dir)
        tune(rest, {**seeded, **previous}, {**seeded_from, **sources})

"""What ``--triton`` did in a run (docs/triton.md): how many GEMMs this project's Triton kernels served, why
they did not serve the others, which configs won at Bench and with what numerics; or, where the backend has
no Triton candidates (every AMD backend, TunableOp), why no Triton row is offered. Pure functions over Bench's
results; the summary goes into ``bench/summary.json`` and the report prints its lines."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ...backends.base import ProblemResult
from ...formats.tunableop import format_key
from ...kernels.triton_gemm import NOT_SERVED, PREFIX, SOURCE

ROCM = (
    "no Triton row is offered on ROCm: this project's Triton kernels are timed and checked on NVIDIA GPUs only "
    "(nothing of theirs can be measured on AMD hardware here), so ROCm keeps the vendor path"
)


def summary(results: Sequence[ProblemResult], backend: str, amd: bool) -> dict:
    """``bench/summary.json``'s ``triton`` part for a run asked for ``--triton`` with ``backend``."""
    if amd:
        return {"offered": False, "why": ROCM}
    if backend != "cublaslt":
        return {"offered": False, "why": f"--backend {backend} has no Triton candidates (the cublaslt search does)"}
    served, not_served, winners = 0, Counter(), []
    for result in results:
        names = [c.name for c in result.candidates]
        if any(name.startswith(PREFIX) for name in names):
            served += 1
        for c in result.candidates:
            if c.name == SOURCE and (c.error or "").startswith(NOT_SERVED):
                not_served[c.error.removeprefix(NOT_SERVED)] += 1
        if result.winner.startswith(PREFIX) and result.record is not None:
            winners.append(
                {
                    "key": ",".join(format_key(result.problem)),
                    "solution": result.winner,
                    "speedup": result.speedup,
                    "numerics": result.record.solution.get("numerics"),
                }
            )
    return {
        "offered": True,
        "problems": len(results),
        "served": served,
        "not_served": dict(not_served.most_common()),
        "winners": winners,
    }


def lines(facts: dict | None, kept: Iterable[str]) -> list[str]:
    """The report's lines for ``facts`` (``summary``'s), with the rows the gate kept."""
    if not facts:
        return []
    if not facts["offered"]:
        return [f"Triton kernels: {facts['why']}"]
    kept = set(kept)
    won = facts["winners"]
    shipped = [w for w in won if w["key"] in kept]
    out = [
        f"Triton kernels: served {facts['served']} of {facts['problems']} GEMMs, won {len(won)} at Bench, "
        f"{len(shipped)} kept by the gate"
    ]
    out += [f"Triton kernels do not serve {count}: {why}" for why, count in facts["not_served"].items()]
    for w in won:
        figures = w.get("numerics") or {}
        out.append(
            f"Triton winner {w['solution']} for {w['key']}: x{w['speedup']:.3f} at Bench, "
            f"{'kept' if w['key'] in kept else 'not kept'}; largest element error "
            f"{figures.get('max_element_error', float('nan')):.2g}, "
            f"{100 * figures.get('beyond_fraction', 0.0):.3f}% of elements beyond {figures.get('tolerance')}"
        )
    return out

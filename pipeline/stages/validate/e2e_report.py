"""The end-to-end A/B's words in the report (``e2e.ab_test``'s outcome, docs/run-output.md): its summary line,
what its interval can resolve and, where it cannot, how many alternations its spread needs, where its noise
lives, and the gate's words where the runtime's host time outweighs the GPU time its rows save."""

from __future__ import annotations

from ...runtime import coverage_line
from ...stats import pairs_to_resolve
from . import e2e_runtime
from .e2e import RESOLVE, TUNABLEOP_AND_RUNTIME, figure, paired_ratios, within_noise


def budget_line(e2e: dict) -> str:
    """Where the A/B measured no gain beyond its noise and the runtime's host time a run is no less than the GPU
    time it saves (``e2e_runtime.host_budget``), why and what to do instead."""
    budget = e2e.get("host_budget")
    if not budget or not budget["host_bound_risk"]:
        return ""
    measured = figure(e2e)
    if measured and measured[1] > 1 + measured[2]:
        return ""
    return (
        f"; the runtime's dispatch costs {budget['host_us_per_run'] / 1e3:.2f} ms of host time a run against "
        f"{budget['gpu_saved_us_per_run'] / 1e3:.2f} ms of GPU time its rows save: where the GPU waits on the host "
        "(eager decode) this bundle cannot pay through pipeline.runtime; run the workload with CUDA graphs "
        "(torch.compile mode reduce-overhead, or a server's graph decode) and the runtime with --graphs-only, "
        "which leaves every eager call to torch at no cost, or let TunableOp apply the rows (torch >= 2.14) "
        "rather than ship it for an eager run"
    )


def summary_line(e2e: dict) -> str:
    """One line for the report: tokens/s baseline -> tuned with the noise, or the wall-time ratio."""
    if "skipped" in e2e:
        return f"not measured: {e2e['skipped']}"
    if not e2e:
        return "not measured"
    side = f", side by side on {len(e2e['parallel_gpus'])} GPUs" if e2e.get("parallel_gpus") else ""
    lanes = [f"x{v['speedup']:.3f} on GPU {g}" for g, v in (e2e.get("by_gpu") or {}).items() if v["speedup"]]
    side += f" ({', '.join(lanes)})" if lanes else ""
    how = f"medians of {e2e['reps']} alternating runs{side}" + (
        {
            "runtime": ", tuned through pipeline.runtime",
            TUNABLEOP_AND_RUNTIME: ", tuned by TunableOp and, for the Triton rows, pipeline.runtime",
        }.get(e2e.get("via"), "")
    )
    if e2e.get("tokens_speedup"):
        noise = e2e.get("noise")
        verdict = " (within noise)" if within_noise(e2e) else ""
        line = (
            f"tokens/s {e2e['baseline']['median_tokens_per_s']:.1f} -> {e2e['tuned']['median_tokens_per_s']:.1f}, "
            f"x{e2e['tokens_speedup']:.3f}"
            + (" the pairs' median" if e2e.get("interval") else "")
            + verdict
            + (f", run-to-run spread {noise:.1%}" if noise is not None else "")
            + f" ({how})"
        )
    else:
        line = f"wall x{e2e['wall_speedup']:.3f} ({how})"
    if e2e.get("runtime_startup_s") is not None:
        steady = e2e.get("steady_wall_speedup")
        line += (
            f"; the runtime's fixed start-up (install, plans) {e2e['runtime_startup_s']:.2f} s per run of "
            f"{e2e['tuned']['median_wall_s']:.1f} s" + (f", steady state wall x{steady:.3f}" if steady else "")
        )
    p99 = [e2e.get(arm, {}).get("median_p99_ms") for arm in ("baseline", "tuned")]
    if None not in p99:
        line += f"; p99 step latency {p99[0]:.2f} -> {p99[1]:.2f} ms"
    if e2e.get("decode_speedup"):
        bounds = e2e.get("decode_interval")
        line += f"; decode steps alone x{e2e['decode_speedup']:.3f}" + (
            f" (paired, 95% x{bounds[0]:.3f}-x{bounds[1]:.3f})" if bounds else ""
        )
    line += resolution_line(e2e) + e2e_runtime.dispatch_line(e2e) + budget_line(e2e)
    return line + coverage_line(e2e.get("coverage"))


def resolution_line(e2e: dict) -> str:
    """What the A/B can tell: the interval of its paired ratio, and plainly where it cannot resolve a 3% effect."""
    bounds = e2e.get("interval")
    if not bounds:
        return ""
    said = f"; paired ratio x{bounds[0]:.3f}-x{bounds[1]:.3f} (95% interval)"
    if not e2e.get("resolved"):
        said += f": cannot resolve a {RESOLVE:.0%} effect after {e2e['reps']} alternations" + noise_hint(e2e)
        needed = pairs_needed(e2e)
        if needed is not None:
            said += f"; at this spread about {needed} alternations would (--e2e-max-reps)"
    return said


def pairs_needed(e2e: dict) -> int | None:
    """About how many alternations an unresolved A/B needs to resolve a ``RESOLVE`` effect, were its pairs to
    keep their spread (``stats.pairs_to_resolve``); None where it is resolved or has fewer than two pairs."""
    ratios = paired_ratios(e2e["runs"]) if e2e.get("runs") and not e2e.get("resolved") else []
    needed = pairs_to_resolve(ratios, RESOLVE) if len(ratios) >= 2 else None
    return needed if needed is not None and needed > len(ratios) else None


def noise_hint(e2e: dict) -> str:
    """Where an unresolved A/B's noise lives, where the workload printed its passes: between its runs (more
    alternations narrow the interval) or within them (more passes a run, the workload's ``--repeat``, do)."""
    within = [(e2e.get(arm) or {}).get("pass_spread") for arm in ("baseline", "tuned")]
    between = [(e2e.get(arm) or {}).get("tokens_spread") for arm in ("baseline", "tuned")]
    if None in within or None in between:
        return ""
    inside, across = max(within), max(between)  # type: ignore[type-var]
    cure = (
        "more passes a run (the workload's --repeat) narrow it"
        if inside >= across / 2
        else "more alternations narrow it, not more passes"
    )
    return f" (passes spread {inside:.1%} within a run, runs {across:.1%}: {cure})"

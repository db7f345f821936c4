"""What ``pipeline.runtime`` did in the end-to-end A/B's tuned runs, read from the status record each of their
processes wrote (``python -m pipeline.runtime --status-file``): the calls that passed it a run, those a tuned plan
ran, the coverage at token counts the collection never saw, its fixed start-up, and its host cost per call on this
machine (``runtime.hostcost``, in a child) against the GPU time its rows save (docs/triton.md, "Host-bound
workloads")."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from ... import procs
from ...runtime import with_shares

COVERAGE_SUMS = ("unseen_calls", "unseen_tuned_calls", "unseen_default_calls", "unseen_us", "unseen_tuned_us")
STATUS_RECORDS = "runtime*.json"  # the tuned runs' status records (``status_records``)
HOST_COST = "hostcost.json"  # the runtime's host cost per call, measured beside the A/B (``host_cost``)


def status_records(scratch: Path) -> list[dict]:
    """What the runtime did in each process of the tuned runs (``python -m pipeline.runtime --status-file``: the
    first process takes ``runtime.json``, later ones add their pid), in name order."""
    return [json.loads(path.read_text()) for path in sorted(Path(scratch).glob(STATUS_RECORDS))]


def calls_per_run(records: list[dict], reps: int) -> float:
    """GEMM calls of routed ops that passed the runtime in a tuned run, tuned or fallen back: the status records
    of every process of the ``reps`` tuned runs (``status_records``), summed, over ``reps``. A call made while
    capturing a CUDA graph counts once; its replays pass no Python."""
    total = 0
    for status in records:
        total += sum((status.get("tuned_calls") or {}).values()) + sum((status.get("fallbacks") or {}).values())
    return total / reps


def tuned_calls_per_run(records: list[dict], reps: int) -> dict[str, float]:
    """Calls that ran a tuned plan in a tuned run, by TunableOp key (the status records' ``"<solution> <key>"``
    counts of every process, over ``reps``)."""
    calls: dict[str, float] = {}
    for status in records:
        for name, n in (status.get("tuned_calls") or {}).items():
            key = name.split(" ", 1)[-1]
            calls[key] = calls.get(key, 0.0) + n / reps
    return calls


def coverage(records: list[dict]) -> dict | None:
    """The tuned share of the calls at keys the collection never saw, over every process of the tuned runs
    (``runtime.coverage``; None where the bundle's manifest lists no collected keys). Under ``--graphs-only`` it
    counts the captured calls alone (``graphs_only``): an eager call, a prefill's among them, is torch's own."""
    found = [status["coverage"] for status in records if status.get("coverage")]
    if not found:
        return None
    sums = with_shares({name: sum(c.get(name, 0) for c in found) for name in COVERAGE_SUMS})
    if any(status.get("graphs_only") for status in records):  # eager calls went to torch uncounted
        sums["graphs_only"] = True
    return sums


def startup_figures(records: list[dict], tuned_wall_s: float, baseline_wall_s: float) -> dict:
    """The runtime's fixed cost per run (its install and plan building, median over the tuned runs' status
    records, ``status_records``), and the wall-time speedup without it: what a long-running process (a server)
    sees."""
    costs = []
    for status in records:
        startup = status.get("startup") or {}
        costs.append(startup.get("install_s", 0.0) + startup.get("plan_build_s", 0.0))
    if not costs:
        return {}
    startup_s = statistics.median(costs)
    steady = tuned_wall_s - startup_s
    return {"runtime_startup_s": startup_s, "steady_wall_speedup": baseline_wall_s / steady if steady > 0 else None}


def host_cost(bundle_dir: Path, scratch: Path, env: dict[str, str], timeout_s: float) -> dict:
    """The runtime's host cost per call on this machine (``python -m pipeline.runtime.hostcost`` in a child,
    under the tuned arm's environment), or ``error``: a diagnostic, which never fails the A/B."""
    out = (Path(scratch) / HOST_COST).absolute()
    argv = [sys.executable, "-m", "pipeline.runtime.hostcost", "--bundle", str(Path(bundle_dir).absolute())]
    try:
        proc = procs.run([*argv, "--out", str(out), "--force"], timeout_s=timeout_s, env=env)  # its own scratch
    except subprocess.TimeoutExpired:
        return {"error": f"{' '.join(argv)} ran past {timeout_s:.0f} s"}
    if proc.returncode != 0 or not out.is_file():
        return {"error": f"{' '.join(argv)} exited with code {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    return json.loads(out.read_text())


def host_budget(e2e: dict, measured: dict[str, tuple[float, float]]) -> dict | None:
    """The runtime's host time a run against the GPU time its tuned calls save a run: each key's tuned calls a
    run (``tuned_calls_per_run``) times its baseline minus its tuned time as Validate measured them
    (``measured``: key -> (baseline us, tuned us)). A host-bound workload (eager decode: the GPU waits on the
    host) gains nothing from the GPU time and pays the host time whole, so where the host time is the larger the
    runtime cannot pay there. A call captured into a CUDA graph counts once, its replays not at all, so for a
    graph workload the GPU time saved is a floor: ``budget_line`` speaks only where the A/B measured no gain.
    Under ``--graphs-only`` every call the runtime meets is a capture's, paid once and replayed free, so there is
    no host-bound risk to name. None where the runtime's cost per call was not measured."""
    cost = e2e.get("host_cost") or {}
    if "over_us" not in cost:
        return None
    tuned = (e2e.get("tuned_calls_per_run") or {}).items()
    saved = sum(n * (measured[key][0] - measured[key][1]) for key, n in tuned if key in measured)
    host = (e2e.get("calls_per_run") or 0.0) * cost["over_us"]
    graphs_only = bool((e2e.get("runtime") or {}).get("graphs_only"))
    risk = host >= saved and not graphs_only
    return {"host_us_per_run": host, "gpu_saved_us_per_run": saved, "host_bound_risk": risk, "graphs_only": graphs_only}


def dispatch_line(e2e: dict) -> str:
    """The report's words on the runtime's dispatch: its host cost per call, the calls a run, their product."""
    cost = e2e.get("host_cost")
    if not cost:
        return ""
    if "over_us" not in cost:
        return f"; the runtime's host cost per call not measured: {cost.get('error') or cost.get('skipped')}"
    calls = e2e.get("calls_per_run") or 0.0
    return (
        f"; the runtime's dispatch: {cost['over_us']:+.1f} us a call over torch's {cost['torch_us']:.1f} us on this "
        f"host (eager; about twice under torch.compile without CUDA graphs), {calls:.0f} calls a run, "
        f"{calls * cost['over_us'] / 1e3:.1f} ms of host time a run (calls captured into a CUDA graph count once, "
        "their replays cost none; a workload whose GPU waits on its host pays it in full)"
    )

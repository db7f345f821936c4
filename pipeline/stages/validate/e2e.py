"""End-to-end A/B of the workload: baseline against tuned, alternating repetitions, medians and spread.

Who applies the bundle in the tuned runs: TunableOp (enabled, tuning off, the bundle's results file) on ROCm
and on CUDA torch >= 2.14; on CUDA torch < 2.14, whose TunableOp knows only ``Default``, ``pipeline.runtime``
(the tuned command is ``python -m pipeline.runtime --bundle DIR -- <command>``); on CUDA torch >= 2.14 with
rows of this project's Triton kernels, which no TunableOp knows (it runs ``Default`` for them), both: TunableOp
for the library's rows and the runtime for the Triton rows alone, as the package deploys them
(``TUNABLEOP_AND_RUNTIME``). Where none can run the A/B is skipped with the reason rather than reporting
noise as a result.

Each arm compiles into its own Inductor cache (``TORCHINDUCTOR_CACHE_DIR`` under the scratch folder): a
compiled workload's first run of an arm compiles as that arm would alone (Inductor benchmarks some choices,
``pad_mm`` among them, with the GEMMs it will call), and its later runs reuse that code, so repetitions of
an arm run the same kernels and the spread is the GPU's, not the compiler's.

Where the runtime applies rows, the A/B also reports what its dispatch costs the workload's host
(``e2e_runtime``): the loss a host-bound workload can take that its A/B may be too noisy to show.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from ...atomic import atomic_write_json
from ...backends.base import ToolMissing
from ...backends.slots import one_gpu_env
from ...kernels.triton_cache import CACHE_ENV
from ...runtime.table import KERNELS
from ...stats import ratio_bounds, round_order
from ..bench import registry
from ..run.made_from import file_digest
from . import e2e_runtime
from .alternations import side_by_side, timed_run
from .validate import tunableop_env

TUNABLEOP_AND_RUNTIME = "tunableop-runtime"
RESOLVE = 0.03  # the end-to-end effect the A/B must resolve: the interval of its paired ratio no wider
MORE_REPS = 4  # alternations run at most, per one asked, while the interval is wider than that
CHECKPOINT = "alternations.json"  # the finished alternations, so that a killed A/B resumes (``resumed``)


def consumer(runtime: dict, triton_rows: bool = False) -> str:
    """``tunableop`` where torch applies the bundle itself, ``runtime`` where pipeline.runtime must, and
    ``TUNABLEOP_AND_RUNTIME`` where torch applies the library's rows and the runtime the Triton rows."""
    if runtime.get("platform", "cuda") != "cuda":
        return "tunableop"
    try:
        major, minor = (int(x) for x in runtime.get("pt_version", "").split(".")[:2])
    except ValueError:
        return "unknown"
    if (major, minor) < (2, 14):
        return "runtime"
    return TUNABLEOP_AND_RUNTIME if triton_rows else "tunableop"


def has_nvmath() -> bool:
    """Whether pipeline.runtime can run here: it needs what the cuBLASLt backend needs (torch, nvmath-python),
    found without importing them."""
    try:
        registry.entry("cublaslt").check()
    except ToolMissing:
        return False
    return True


def runtime_consumer(runtime: dict, has_runtime: bool | None = None, triton_rows: bool = False) -> str | None:
    """Why the tuned bundle cannot be applied to the workload here (None when it can)."""
    who = consumer(runtime, triton_rows)
    if who == "unknown":
        return f"unknown torch version {runtime.get('pt_version')!r}"
    if who != "tunableop":
        has_runtime = has_nvmath() if has_runtime is None else has_runtime
        if not has_runtime:
            why = (
                "has no cuBLASLt solutions in TunableOp (2.14+)"
                if who == "runtime"
                else "runs torch's default for the rows of this project's Triton kernels"
            )
            return (
                f"no runtime consumer here: torch {runtime.get('pt_version')} on CUDA {why}, and "
                "pipeline.runtime, which applies them, needs nvmath-python (pip install -e '.[cuda]'); the "
                "GEMM-level figures are the result"
            )
    return None


def skip_reason(
    runtime: dict, passed: bool, has_workload: bool, has_runtime: bool | None = None, triton_rows: bool = False
) -> str | None:
    """Why the end-to-end A/B does not run (None when it does): no runtime consumer, a refused bundle, or no
    workload command."""
    reason = runtime_consumer(runtime, has_runtime, triton_rows)
    if reason is None and not passed:
        reason = "the bundle was refused"
    if reason is None and not has_workload:
        reason = "no workload to run (shapes came from --untuned files; pass --workload-cmd)"
    return reason


def runtime_flags(graphs_only: bool) -> tuple[str, ...]:
    """The options of ``python -m pipeline.runtime`` the A/B applies the bundle with, and the package prints."""
    return ("--graphs-only",) if graphs_only else ()


def runtime_command(command: list[str], bundle_dir: Path, status_file: Path, flags: Sequence[str] = ()) -> list[str]:
    """``command`` run under pipeline.runtime with the bundle applied (status written to ``status_file``;
    ``flags``: ``runtime_flags``)."""
    return [
        sys.executable,
        "-m",
        "pipeline.runtime",
        "--bundle",
        str(Path(bundle_dir).absolute()),
        "--status-file",
        str(Path(status_file).absolute()),
        *flags,
        "--",
        *command,
    ]


def _spread(values: list[float]) -> float | None:
    """(max - min) / median of repeated runs: the noise a difference must beat."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else None


def ab_test(
    command: list[str],
    bundle_csv: Path,
    scratch: Path,
    reps: int,
    timeout_s: float,
    gpus: int = 1,
    env: dict[str, str] | None = None,
    via: str = "tunableop",
    max_reps: int | None = None,
    runtime_flags: Sequence[str] = (),
    parallel_gpus: Sequence[int] = (),
) -> dict:
    """Run ``command`` ``reps`` times in each environment, alternating (A B, B A, ...), and more, up to
    ``max_reps`` (default ``MORE_REPS`` x ``reps``), until the interval of the paired ratio resolves a 3% effect
    (``resolved``); medians, spread and that interval. ``via``: ``tunableop`` points torch at the bundle's
    results, ``runtime`` runs under pipeline.runtime (with ``runtime_flags``), and ``TUNABLEOP_AND_RUNTIME`` does
    both. Given two or more ``parallel_gpus``, a round runs an alternation on each of them at once, each shown
    that GPU alone (``alternations.side_by_side``): ``reps`` rounds up to whole rounds, ``max_reps`` down."""
    base_env = {k: v for k, v in (env or os.environ).items() if not k.startswith("PYTORCH_TUNABLEOP_")}
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    status = scratch / "runtime.json"
    kernels = (scratch / KERNELS).absolute()  # the runtime compiles the Triton rows' kernels here: a package ships them

    def arms(gpu: int | None) -> dict[str, tuple[list[str], dict[str, str]]]:
        """Each arm's command and environment: on every GPU, or on ``gpu`` alone (its own TunableOp copies and
        runtime record beside the others')."""
        shown = base_env if gpu is None else one_gpu_env(gpu, base_env)
        tuned_command, tuned_env = command, shown
        if via != "runtime":
            where = scratch if gpu is None else scratch / f"gpu{gpu}"
            tuned_env = {**shown, **tunableop_env(bundle_csv, where, gpus if gpu is None else 1)}
        if via != "tunableop":
            record = status if gpu is None or gpu == parallel_gpus[0] else scratch / f"runtime.gpu{gpu}.json"
            tuned_command = runtime_command(command, Path(bundle_csv).parent, record, runtime_flags)
            tuned_env = {**tuned_env, CACHE_ENV: str(kernels)}
        found = {"baseline": (command, shown), "tuned": (tuned_command, tuned_env)}
        return {
            name: (argv, {**e, "TORCHINDUCTOR_CACHE_DIR": str((scratch / f"inductor-{name}").absolute())})
            for name, (argv, e) in found.items()
        }

    lanes = [arms(gpu) for gpu in parallel_gpus] if len(parallel_gpus) > 1 else [arms(None)]
    identity = {"baseline": command, "tuned": lanes[0]["tuned"][0], "via": via, "bundle": file_digest(bundle_csv)}
    if len(lanes) > 1:
        identity["parallel_gpus"] = list(parallel_gpus)
    runs = resumed(scratch, identity)
    if not runs["baseline"]:
        for stale in scratch.glob(e2e_runtime.STATUS_RECORDS):  # an earlier attempt's: these runs write their own
            stale.unlink()
    rep, most = len(runs["baseline"]), max(reps, max_reps if max_reps is not None else MORE_REPS * reps)
    while rep < reps or (rep + len(lanes) <= most and not resolved(runs)):  # whole rounds, never past ``most``
        for name in round_order(("baseline", "tuned"), rep // len(lanes)):
            if len(lanes) == 1:
                runs[name].append(timed_run(name, lanes[0][name], rep, timeout_s))
            else:
                figures = side_by_side(name, [lane[name] for lane in lanes], rep, timeout_s)
                runs[name] += [{**run, "gpu": gpu} for gpu, run in zip(parallel_gpus, figures, strict=True)]
        rep += len(lanes)
        atomic_write_json(scratch / CHECKPOINT, {"identity": identity, "runs": runs})
    reps = rep
    (scratch / CHECKPOINT).unlink(missing_ok=True)  # finished: the outcome holds the runs
    out: dict = {"reps": reps, "via": via, "runs": runs, **outcome(runs)}
    if len(lanes) > 1:
        out["parallel_gpus"] = list(parallel_gpus)
    if via != "tunableop" and kernels.is_dir():
        out["kernels"] = str(kernels)
    if via != "tunableop" and status.exists():
        out["runtime"] = json.loads(status.read_text())
        records = e2e_runtime.status_records(scratch)
        walls = out["tuned"]["median_wall_s"], out["baseline"]["median_wall_s"]
        out.update(e2e_runtime.startup_figures(records, *walls))
        out["calls_per_run"] = e2e_runtime.calls_per_run(records, reps)
        out["tuned_calls_per_run"] = e2e_runtime.tuned_calls_per_run(records, reps)
        out["coverage"] = e2e_runtime.coverage(records)
        out["host_cost"] = e2e_runtime.host_cost(Path(bundle_csv).parent, scratch, lanes[0]["tuned"][1], timeout_s)
    return out


def tokens_speedup(runs: dict[str, list[dict]], arms: dict) -> float:
    """Tuned tokens/s over the baseline's: the median of the paired ratios (``field_ratios``) where every
    alternation printed tokens/s, as the interval and the decode figure are taken, so the headline lies inside its
    interval; a machine that drifts during the A/B (clocks, heat) moves both runs of a pair, and the ratio of the
    two arms' medians would carry it. Else that ratio of medians (``arms``: ``outcome``'s per-arm figures)."""
    ratios = field_ratios(runs, "tokens_per_s")
    if ratios:
        return statistics.median(ratios)
    return arms["tuned"]["median_tokens_per_s"] / arms["baseline"]["median_tokens_per_s"]


def _pass_spread(runs: list[dict]) -> float | None:
    """The spread of the timed passes within a run (``_spread``), the median over ``runs`` that printed their
    passes; None where none did. Set against the spread between runs, it says where the A/B's noise lives."""
    spreads = [_spread(r["passes_tokens_per_s"]) for r in runs if len(r.get("passes_tokens_per_s") or ()) > 1]
    return statistics.median(spreads) if spreads else None


def outcome(runs: dict[str, list[dict]]) -> dict:
    """What the alternations ``runs`` measured: the paired interval and whether it resolves, per arm the medians
    and spreads, the wall-time speedup of the medians, the tokens/s speedup (``tokens_speedup``: the pairs'
    median) with the larger spread as ``noise``, each GPU's pairs side by side, and the decode steps' figures."""
    out: dict = {}
    bounds = interval(runs)
    if bounds is not None:
        out["interval"], out["resolved"] = list(bounds), bounds[1] - bounds[0] <= RESOLVE
    for name, values in runs.items():
        walls = [r["wall_s"] for r in values]
        tokens = [r["tokens_per_s"] for r in values if r["tokens_per_s"] is not None]
        p99 = [r["p99_ms"] for r in values if r.get("p99_ms") is not None]
        decode = [r["decode_tokens_per_s"] for r in values if r.get("decode_tokens_per_s")]
        out[name] = {
            "median_wall_s": statistics.median(walls),
            "wall_spread": _spread(walls),
            "median_tokens_per_s": statistics.median(tokens) if tokens else None,
            "tokens_spread": _spread(tokens) if tokens else None,
            "median_p99_ms": statistics.median(p99) if p99 else None,  # a serving workload's step latency
            "median_decode_tokens_per_s": statistics.median(decode) if decode else None,
            "pass_spread": _pass_spread(values),
        }
    out["wall_speedup"] = out["baseline"]["median_wall_s"] / out["tuned"]["median_wall_s"]
    by_gpu = per_gpu(runs)
    if by_gpu:
        out["by_gpu"] = by_gpu
    if out["baseline"]["median_tokens_per_s"] and out["tuned"]["median_tokens_per_s"]:
        out["tokens_speedup"] = tokens_speedup(runs, out)
        spreads = [s for s in (out["baseline"]["tokens_spread"], out["tuned"]["tokens_spread"]) if s is not None]
        out["noise"] = max(spreads) if spreads else None
    out.update(decode_figures(runs))
    return out


def interrupted(scratch: Path) -> dict | None:
    """What an A/B stopped before its end (a killed job) had measured: its alternations' ``outcome`` with
    ``reps`` and ``runs``, read from ``scratch``'s checkpoint, and the ``coverage`` of the status records its
    tuned runs left (the runtime's); None where it holds no finished alternation."""
    path = Path(scratch) / CHECKPOINT
    runs = json.loads(path.read_text())["runs"] if path.exists() else None
    if not runs or not runs["baseline"] or len(runs["baseline"]) != len(runs["tuned"]):
        return None
    out = {"reps": len(runs["baseline"]), "runs": runs, **outcome(runs)}
    records = e2e_runtime.status_records(Path(scratch))
    if records:
        out["coverage"] = e2e_runtime.coverage(records)
    return out


def resumed(scratch: Path, identity: dict) -> dict[str, list[dict]]:
    """The alternations an earlier, interrupted A/B of the same commands and bundle finished (``CHECKPOINT``,
    written after each): a rerun goes on from there. Anything else starts afresh."""
    path = scratch / CHECKPOINT
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("identity") == identity:
            return saved["runs"]
        path.unlink()
    return {"baseline": [], "tuned": []}


def decode_figures(runs: dict[str, list[dict]]) -> dict:
    """The decode steps' tokens/s, tuned over baseline, where every run printed it (``pipeline.workloads.serve``):
    the median of the paired ratios and their 95% interval. In a serving run whose eager prefill sets the pace,
    the decode steps show what the GEMMs changed at a fraction of the spread; the verdict stays on tokens/s."""
    ratios = field_ratios(runs, "decode_tokens_per_s")
    if ratios is None:
        return {}
    return {
        "decode_speedup": statistics.median(ratios),
        "decode_interval": list(ratio_bounds(ratios)) if len(ratios) >= 2 else None,
    }


def field_ratios(runs: dict[str, list[dict]], field: str) -> list[float] | None:
    """Per alternation, the tuned run's ``field`` (a rate) over the baseline's; None where no alternation ran or
    a run of one lacks it."""
    pairs = list(zip(runs["baseline"], runs["tuned"], strict=False))
    if pairs and all(b.get(field) and t.get(field) for b, t in pairs):
        return [t[field] / b[field] for b, t in pairs]
    return None


def paired_ratios(runs: dict[str, list[dict]]) -> list[float]:
    """Per alternation, the tuned run's tokens/s over the baseline's, or where a run printed none, the
    baseline's wall time over the tuned one's: the two runs of one alternation share the machine's state."""
    tokens = field_ratios(runs, "tokens_per_s")
    if tokens is not None:
        return tokens
    return [b["wall_s"] / t["wall_s"] for b, t in zip(runs["baseline"], runs["tuned"], strict=False)]


def per_gpu(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Side by side (``--e2e-parallel``), each GPU's own alternations: their count and the median of their paired
    ratios, keyed by the GPU's index; boards that disagree beyond noise show here. Empty where the runs name no
    GPU."""
    gpus = sorted({r["gpu"] for r in runs["baseline"] if "gpu" in r})
    out = {}
    for gpu in gpus:
        lane = {name: [r for r in values if r.get("gpu") == gpu] for name, values in runs.items()}
        ratios = paired_ratios(lane)
        out[str(gpu)] = {"pairs": len(ratios), "speedup": statistics.median(ratios) if ratios else None}
    return out


def interval(runs: dict[str, list[dict]]) -> tuple[float, float] | None:
    """The 95% interval of the paired ratio (``stats.ratio_bounds``: Student's t on the logs); None before two
    alternations."""
    ratios = paired_ratios(runs)
    return ratio_bounds(ratios) if len(ratios) >= 2 else None


def resolved(runs: dict[str, list[dict]]) -> bool:
    """Whether the A/B so far resolves a ``RESOLVE`` effect: its interval is no wider."""
    bounds = interval(runs)
    return bounds is not None and bounds[1] - bounds[0] <= RESOLVE


def figure(e2e: dict) -> tuple[str, float, float] | None:
    """What the A/B measured: (``tokens/s`` or ``wall``, the speedup, its run-to-run spread); None when it
    did not run."""
    if not e2e or "skipped" in e2e:
        return None
    if e2e.get("tokens_speedup"):
        return "tokens/s", e2e["tokens_speedup"], e2e.get("noise") or 0.0
    spreads = [e2e[arm]["wall_spread"] or 0.0 for arm in ("baseline", "tuned")]
    return "wall", e2e["wall_speedup"], max(spreads)


def within_noise(e2e: dict) -> bool:
    """Whether the A/B cannot tell the tuned run from the baseline: its paired interval holds x1.00 (where it
    has one), else the speedup is within the run-to-run spread."""
    bounds, measured = e2e.get("interval"), figure(e2e)
    if bounds:
        return bounds[0] <= 1 <= bounds[1]
    return measured is not None and abs(measured[1] - 1) <= measured[2]


def regression(e2e: dict) -> str | None:
    """Why the tuned workload counts as slower end to end, or None: slower beyond its run-to-run spread, its
    whole paired interval below x1.00 (a tight interval shows a loss the spread of single runs hides), or its
    decode steps' paired interval below x1.00 (a serving run: the steps a graph-decode bundle changes, which the
    eager prefill's spread hides in the whole run's tokens/s)."""
    measured = figure(e2e)
    if measured is None:
        return None
    what, speedup, noise = measured
    bounds, decode = e2e.get("interval"), e2e.get("decode_interval")
    if speedup >= 1 - noise and not (bounds and bounds[1] < 1):
        if decode and decode[1] < 1:
            return (
                f"the decode steps alone x{e2e['decode_speedup']:.3f}, slower with their paired ratio "
                f"x{decode[0]:.3f}-x{decode[1]:.3f} (95% interval) below x1.00 ({e2e['reps']} alternating runs; "
                f"the whole run's {what} x{speedup:.3f} cannot show it through its spread of {noise:.1%})"
            )
        return None
    how = (
        f"beyond its run-to-run spread of {noise:.1%}"
        if speedup < 1 - noise
        else f"with its paired ratio x{bounds[0]:.3f}-x{bounds[1]:.3f} (95% interval) below x1.00"
    )
    why = f"end to end {what} x{speedup:.3f}, slower {how} ({e2e['reps']} alternating runs)"
    if e2e.get("runtime_startup_s") is not None:
        steady = e2e.get("steady_wall_speedup")
        why += f"; the runtime's start-up costs {e2e['runtime_startup_s']:.2f} s per run" + (
            f" (without it: wall x{steady:.3f})" if steady else ""
        )
    return why

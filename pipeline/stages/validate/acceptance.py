"""The acceptance of a run: validate every merged row on the GPU, gate the rows, bundle what passes, A/B the
workload end to end, and report. ``Validate`` calls ``accept``; so may anything that holds a merged run.

A validation killed midway resumes (its rows are checkpointed); a refused bundle still gets its report, then
``GateRefused`` (exit 10) says why.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...atomic import atomic_write_json
from ...backends.slots import gpu_count
from ...defaults import GATE_MARGIN
from ...errors import Refused
from ...kernels.triton_gemm import PREFIX as TRITON
from ..gather.collect import embedded_command
from ..gather.shapes import ran_inside_of, read_shapes_json
from ..run import timings
from ..run.fingerprint import Stack
from ..run.layout import RunLayout
from . import bundle, e2e, e2e_runtime, held_out, report, validate
from .gate import GateRefused, GateSettings, gate
from .measured import MeasuredRow


@dataclass(frozen=True)
class AcceptanceSettings:
    """What the acceptance needs to know of the run's parameters."""

    gpus: Sequence[int] | Callable[[], Sequence[int]]  # GPUs the validation worker may take (asked when needed)
    margin: float = GATE_MARGIN
    min_speedup: float = 1.0
    rounds: int = 7
    e2e_reps: int = 3
    e2e_max_reps: int | None = None  # the most alternations while unresolved (None: e2e.ab_test's default)
    workload_timeout_s: float = 3600.0
    workload_cmd: str = ""  # the user's workload; "" with ``has_workload``: the embedded one
    has_workload: bool = True
    e2e_gpus: int = 0  # GPUs the workload sees (0: every visible one)
    embedded_args: tuple[str, ...] = ()  # the embedded workload's own options (--fp8)
    allow_e2e_regression: bool = False  # accept a bundle whose end-to-end figure regressed beyond noise
    e2e_graphs_only: bool = False  # the runtime arm routes only inside CUDA-graph captures (runtime --graphs-only)
    e2e_parallel: bool = False  # the A/B's alternations side by side, one on each of ``gpus`` (e2e.ab_test)


class EndToEndRefused(Refused):
    """The bundle passed the GEMM gate, and the workload ran slower with it end to end."""


def e2e_command(workload_cmd: str, embedded_args: tuple[str, ...] = ()) -> list[str]:
    """The workload the A/B runs: the user's shell line, or the embedded one (with its options) decoding through
    CUDA graphs (as serving engines run decode)."""
    if workload_cmd:
        return ["bash", "-c", workload_cmd]
    return [*embedded_command(), *embedded_args, "--decode-mode", "graph", "--repeat", "5"]


def _gpus(settings: AcceptanceSettings) -> Sequence[int]:
    """The GPUs Validate may use (asked when needed)."""
    return settings.gpus() if callable(settings.gpus) else settings.gpus


def accept(
    run_dir: Path,
    stack: Stack,
    settings: AcceptanceSettings,
    progress: Callable[[int, int], None] | None = None,
    status: Callable[[str], None] | None = None,
) -> dict:
    """Validate, gate, bundle, A/B and report ``run_dir``; the report's summary. Raises ``GateRefused``."""
    layout = RunLayout.of(run_dir)
    run_dir, out = layout.root, layout.validate
    say = status or (lambda _: None)
    if not (out / validate.MEASUREMENTS).exists():
        say("validating GEMMs against the baseline")
        with timings.timed(run_dir, "validate-gemms"):
            validate.run_worker(run_dir, _gpus(settings), settings.rounds, settings.margin, progress)
    measured = json.loads((out / validate.MEASUREMENTS).read_text())
    rows = [MeasuredRow.from_json(row) for row in measured["rows"]]
    ran_inside = ran_inside_of(read_shapes_json(layout.shapes)) if layout.shapes.exists() else {}
    held = held_out.verdict([MeasuredRow.from_json(row) for row in measured.get("held_out", [])], ran_inside=ran_inside)
    result = gate(rows, GateSettings(margin=settings.margin, min_speedup=settings.min_speedup))
    atomic_write_json(out / "gate.json", result.to_json())
    atomic_write_json(out / held_out.RECORD, held)
    runtime = validate.runtime_of(run_dir, measured)
    runtime_flags = e2e.runtime_flags(settings.e2e_graphs_only)
    if result.passed:
        bundle.write_bundle(
            run_dir,
            result,
            {
                "runtime": runtime,
                "fingerprint": stack.fingerprint,
                "stack": stack.facts,
                "runtime_flags": list(runtime_flags),  # as the A/B applies the bundle
            },
            split=held["split"],
        )
    triton_rows = result.passed and any(r.solution.startswith(TRITON) for r in result.kept)  # the bundle's rows
    reason = e2e.skip_reason(runtime, result.passed, settings.has_workload, triton_rows=triton_rows)
    if reason:
        outcome: dict = {"skipped": reason}
    else:
        say("end-to-end A/B of the workload")
        via = e2e.consumer(runtime, triton_rows)
        with timings.timed(run_dir, "validate-e2e"):
            command = e2e_command(settings.workload_cmd, settings.embedded_args)
            outcome = e2e.ab_test(
                command,
                layout.bundle_csv,
                out / f"e2e-{via}",
                settings.e2e_reps,
                settings.workload_timeout_s,
                gpus=settings.e2e_gpus or gpu_count("Validate's end-to-end A/B"),
                via=via,
                max_reps=settings.e2e_max_reps,
                runtime_flags=runtime_flags,
                parallel_gpus=_gpus(settings) if settings.e2e_parallel else (),
            )
    budget = host_budget_of(outcome, rows)
    if budget is not None:
        outcome["host_budget"] = budget
    slower = e2e.regression(outcome)
    if slower:
        outcome["refused"] = None if settings.allow_e2e_regression else slower
        if not settings.allow_e2e_regression:  # the bundle that made it slower does not ship
            aside = run_dir / "bundle.refused"
            shutil.rmtree(aside, ignore_errors=True)
            layout.bundle.rename(aside)
    atomic_write_json(out / "e2e.json", outcome)
    summary = report.build(run_dir)
    if not result.passed:
        raise GateRefused(f"{result.message}. Report: {summary['report']}")
    if outcome.get("refused"):
        raise EndToEndRefused(
            f"bundle refused: {slower} (--allow-e2e-regression ships it anyway; the bundle is in "
            f"{run_dir / 'bundle.refused'}). Report: {summary['report']}"
        )
    return summary


def host_budget_of(outcome: dict, rows: Sequence[MeasuredRow] | Path) -> dict | None:
    """``e2e_runtime.host_budget`` of an A/B ``outcome`` against Validate's medians of ``rows`` (or of the rows a
    run directory's measurements hold: an A/B run beside the job, as ``bench/serving.py``'s eager arm)."""
    if isinstance(rows, Path):
        path = RunLayout.of(rows).measurements
        rows = [MeasuredRow.from_json(row) for row in json.loads(path.read_text())["rows"]] if path.exists() else []
    return e2e_runtime.host_budget(outcome, {row.key: (row.baseline.median, row.tuned.median) for row in rows})

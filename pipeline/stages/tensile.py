"""``--backend tensile``: TensileLite (``Tensile/bin/Tensile <config> <out>``) on the benchmark configs
GenerateConfigs wrote, one config (one ProblemType) at a time (``shared/spec/hipblaslt-tensilelite.md`` 4).

TensileLite is found by ``--tensile-root`` or ``$TENSILE_ROOT``: the ``tensilelite`` directory of a
hipBLASLt source tree (``Tensile/bin/Tensile`` under it), or the hipBLASLt tree itself. A config
TensileLite is known to refuse is refused here first (``formats/tensile.py``). From each run's tree,
``3_LibraryLogic/*.yaml`` is collected into the stage's logic (merged into the base logic by MergeLogic)
and each size's winner, its time and kernel name, from ``2_BenchmarkData/*.csv``; the library's
heuristic pick is timed with hipblaslt-bench for comparison. TensileLite's kernels reach a workload only
once the merged logic is compiled into the device library (rebuild hipBLASLt, or point
``HIPBLASLT_TENSILE_LIBPATH`` at the rebuilt library), so every results row stays ``Default`` and the
figures of this stage are TensileLite's own benchmark, summarised in ``bench/summary.json``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..atomic import atomic_write_json, atomic_write_text
from ..backends.base import CandidateResult, ProblemResult, ToolMissing, TuneSettings
from ..backends.hipblaslt import HipblasltBackend
from ..formats.hipblaslt_bench import BenchFormatError
from ..formats.logic import LogicFormatError, dump_logic, load_logic
from ..formats.rocm import problem_type_name, to_amd
from ..formats.tensile import benchmark_winners, config_problems
from ..problem import GemmProblem
from .bench import RUNTIME, TOOL_LOGIC, pending, result_path
from .configs import tensile_reason
from .tool_run import run_into, tool_root

ENV = "TENSILE_ROOT"


@dataclass(frozen=True)
class TensileLite:
    script: Path
    version: str


def locate(explicit: str | None = None) -> TensileLite:
    """TensileLite's ``Tensile`` program and version; ``ToolMissing`` says where it looked."""
    root = tool_root(explicit, ENV, "the tensile backend needs TensileLite: pass --tensile-root DIR or set "
                                   "$TENSILE_ROOT (hipBLASLt's tensilelite directory)")
    candidates = [root / "Tensile" / "bin" / "Tensile", root / "tensilelite" / "Tensile" / "bin" / "Tensile"]
    script = next((p for p in candidates if p.is_file()), None)
    if script is None:
        raise ToolMissing(f"no TensileLite under {root}: looked for {', '.join(str(p) for p in candidates)}")
    init = script.parent.parent / "__init__.py"
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", init.read_text()) if init.exists() else None
    return TensileLite(script, found[1] if found else "unknown")


def run_config(tool: TensileLite, config: Path, out: Path, timeout_s: float) -> None:
    """Refuse a config TensileLite would refuse; else run it into ``out`` (replaced only on success)."""
    reasons = config_problems(yaml.safe_load(config.read_text()))
    if reasons:
        raise ValueError(f"{config}: TensileLite would refuse this config: " + "; ".join(reasons))
    run_into([str(tool.script), str(config.absolute())], out, timeout_s, f"TensileLite on {config.name}")


def tune_configs(problems: Sequence[GemmProblem], configs_dir: Path, out_dir: Path, tool: TensileLite,
                 bench: HipblasltBackend, settings: TuneSettings, timeout_s: float = 4 * 3600.0,
                 progress: Callable[[int, int], None] | None = None) -> None:
    """TensileLite on every config whose problems have no result yet; results and logic as documented."""
    out_dir = Path(out_dir).absolute()
    atomic_write_json(out_dir / RUNTIME, {**bench.runtime(), "backend": "tensile", "tuner": "tensile",
                                          "tensile": str(tool.script), "tensile_version": tool.version,
                                          "note": "TensileLite's kernels take effect once the merged logic is "
                                                  "compiled into the device library; its figures are "
                                                  "TensileLite's own benchmark (bench/summary.json)"})
    groups: dict[str, list[GemmProblem]] = {}
    for problem in pending(problems, out_dir):
        reason = tensile_reason(problem)
        if reason:
            atomic_write_json(result_path(out_dir, problem), ProblemResult(problem, skipped=reason).to_json())
        else:
            groups.setdefault(problem_type_name(problem), []).append(problem)
    done = len(problems) - len(pending(problems, out_dir))
    for name, group in sorted(groups.items()):
        config = configs_dir / "tensile" / f"{name}.yaml"
        out = out_dir / "tensile" / name
        error, winners = None, {}
        if not config.exists():
            error = f"no TensileLite config {config.name}: GenerateConfigs skipped this problem type"
        else:
            try:
                run_config(tool, config, out, timeout_s)
                for csv_path in sorted((out / "2_BenchmarkData").glob("*.csv")):
                    winners.update(benchmark_winners(csv_path.read_text(), str(csv_path)))
                for path in sorted((out / "3_LibraryLogic").glob("*.yaml")):
                    atomic_write_text(out_dir / TOOL_LOGIC / path.name, dump_logic(load_logic(path)))
            except (RuntimeError, ValueError, LogicFormatError) as err:
                error = str(err)
        for problem in group:
            atomic_write_json(result_path(out_dir, problem), _result(problem, winners, bench, error).to_json())
            done += 1
            if progress:
                progress(done, len(problems))


def _result(problem: GemmProblem, winners: dict, bench: HipblasltBackend, error: str | None) -> ProblemResult:
    if error:
        return ProblemResult(problem, skipped=error) if error.startswith("no TensileLite config") else (
            ProblemResult(problem, errors=[error]))
    winner = winners.get(tuple(to_amd(problem).tensile_exact))
    if winner is None:
        return ProblemResult(problem, errors=["TensileLite's 2_BenchmarkData holds no row for this size"])
    try:
        heuristic = bench.heuristic(problem)
    except (RuntimeError, BenchFormatError) as err:
        return ProblemResult(problem, errors=[f"timing the heuristic pick: {err}"])
    return ProblemResult(problem, default_us=heuristic.us, winner_us=heuristic.us,
                         candidates=[CandidateResult(winner.name, final_us=winner.time_us,
                                                     config={"Tuner": "tensile", "GFlops": winner.gflops})])

"""``--backend tensile``: TensileLite (``Tensile/bin/Tensile <config> <out>``) on the benchmark configs
GenerateConfigs wrote, one config (one ProblemType) at a time (``docs/upstream.md`` 4).

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

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...atomic import atomic_write_text
from ...backends.base import CandidateResult, ProblemResult, ToolMissing, TuneSettings
from ...backends.hipblaslt import HipblasltBackend
from ...errors import BadInput, PipelineError
from ...formats import yaml_text
from ...formats.logic import dump_logic, grid_refusals, load_logic
from ...formats.rocm import to_amd
from ...formats.tensile import benchmark_winners, config_data_types, config_problems, tree_data_types
from ...problem import GemmProblem
from ..configs.render import tensile_reason
from .config_tool import run_into, tool_root

ENV = "TENSILE_ROOT"
log = logging.getLogger("pipeline")


@dataclass(frozen=True)
class TensileLite:
    script: Path
    version: str

    @property
    def package(self) -> Path:
        return self.script.parent.parent


def locate(explicit: str | None = None) -> TensileLite:
    """TensileLite's ``Tensile`` program and version; ``ToolMissing`` says where it looked."""
    root = tool_root(
        explicit,
        ENV,
        "the tensile backend needs TensileLite: pass --tensile-root DIR or set "
        "$TENSILE_ROOT (hipBLASLt's tensilelite directory)",
    )
    candidates = [root / "Tensile" / "bin" / "Tensile", root / "tensilelite" / "Tensile" / "bin" / "Tensile"]
    script = next((p for p in candidates if p.is_file()), None)
    if script is None:
        raise ToolMissing(f"no TensileLite under {root}: looked for {', '.join(str(p) for p in candidates)}")
    init = script.parent.parent / "__init__.py"
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", init.read_text()) if init.exists() else None
    return TensileLite(script, found[1] if found else "unknown")


class TensileTool:
    """TensileLite as a ``config_tool.ConfigTool``: hipblaslt-bench times the library's heuristic pick."""

    name = "tensile"

    def __init__(
        self, gpu: int = 0, root: str | None = None, bench: str | None = None, timeout_s: float = 4 * 3600.0
    ) -> None:
        self.tool = locate(root)
        self.data_types = tree_data_types(self.tool.package)  # (file, letters) of the tree, read once
        self.bench = HipblasltBackend(gpu, bench)
        self.timeout_s = timeout_s

    def runtime(self) -> dict:
        return {
            **self.bench.runtime(),
            "backend": self.name,
            "tuner": self.name,
            "tensile": str(self.tool.script),
            "tensile_version": self.tool.version,
            "note": "TensileLite's kernels take effect once the merged logic is compiled into the device "
            "library; its figures are TensileLite's own benchmark (bench/summary.json)",
        }

    def skip_reason(self, problem: GemmProblem) -> str | None:
        return tensile_reason(problem)

    def run(self, config: Path, out: Path) -> None:
        """Refuse a config TensileLite would refuse; else run it into ``out`` (replaced only on success)."""
        data = yaml_text.load(config.read_text())
        reasons = config_problems(data) or self.unknown_types(data)
        if reasons:
            raise BadInput(f"{config}: TensileLite would refuse this config: " + "; ".join(reasons))
        run_into([str(self.tool.script), str(config.absolute())], out, self.timeout_s, f"TensileLite on {config.name}")

    def unknown_types(self, data: dict) -> list[str]:
        """The config's DataType letters this tree does not define (it would stop on a KeyError): the FP8
        letters differ by generation (formats/rocm.py), so a config for the other one is refused here."""
        if self.data_types is None:
            return []
        path, known = self.data_types
        unknown = sorted(t for t in config_data_types(data) if t.lower() not in known)
        if not unknown:
            return []
        other = "2024" if "f8n" not in known else "2025"
        return [
            f"DataType {', '.join(unknown)} is not defined by this TensileLite ({path} defines "
            f"{', '.join(sorted(known))}): generate the configs for its generation (--tensile-generation {other})"
        ]

    def winners(self, out: Path) -> dict:
        """Each size's winner from ``2_BenchmarkData``; the library logic is read too (a torn one fails here)."""
        found = {}
        for csv_path in sorted((out / "2_BenchmarkData").glob("*.csv")):
            found.update(benchmark_winners(csv_path.read_text(), str(csv_path)))
        for path in sorted((out / "3_LibraryLogic").glob("*.yaml")):
            load_logic(path)
        return found

    def result(self, problem: GemmProblem, winners: dict, settings: TuneSettings) -> ProblemResult:
        """TensileLite's winner as a candidate beside the heuristic pick; the row stays ``Default`` (the kernel
        reaches a workload only through a rebuilt library)."""
        winner = winners.get(tuple(to_amd(problem).tensile_exact))
        if winner is None:
            return ProblemResult(problem, errors=["TensileLite's 2_BenchmarkData holds no row for this size"])
        try:
            heuristic = self.bench.heuristic(problem)
        except PipelineError as err:
            return ProblemResult(problem, errors=[f"timing the heuristic pick: {err}"])
        return ProblemResult(
            problem,
            default_us=heuristic.us,
            winner_us=heuristic.us,
            candidates=[
                CandidateResult(
                    winner.name, final_us=winner.time_us, config={"Tuner": self.name, "GFlops": winner.gflops}
                )
            ],
        )

    def keep_logic(self, out: Path, logic_dir: Path, results: Sequence[ProblemResult]) -> None:
        """``3_LibraryLogic`` whole: MergeLogic merges it into the base logic. A GridBased row whose kernel
        TensileLite refuses at part of the sizes it serves is named in the log (``grid_refusals``)."""
        for path in sorted((out / "3_LibraryLogic").glob("*.yaml")):
            logic = load_logic(path)
            for refusal in grid_refusals(logic):
                log.warning("%s: %s", path.name, refusal)
            atomic_write_text(logic_dir / path.name, dump_logic(logic))

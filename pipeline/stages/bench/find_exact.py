"""``--backend find_exact``: upstream hipBLASLt ``utilities/find_exact.py`` on the configs GenerateConfigs
wrote, one config (one ProblemType) at a time (``docs/upstream.md``, "find_exact.py").

The build is found by ``--hipblaslt-root`` or ``$HIPBLASLT_ROOT``: a hipBLASLt build directory (e.g.
``build/release``) holding the bench (``clients/staging/hipblaslt-bench``, 2024; ``clients/hipblaslt-bench``,
2025 and later) and ``MatchTable.yaml`` (``library/``, 2024; ``device-library/``, later), with the script at
``utilities/find_exact.py`` of the source tree above it. Each config runs as
``python3 find_exact.py <config> <build> <out>``; then ``0_Bench/`` gives every size's winner (the bench's
``Winner:`` block) and ``1_LogicYaml/`` the Equality logic, whose ld order is fixed
(``formats/find_exact.py``). Every problem is also timed at the library's heuristic pick with the same
bench: a winner must beat it by the margin, and logic rows that do not are left out, so nothing slower
reaches the merge. Results land where the Bench stage keeps them (``problems/*.json``), so merging,
validation (with the bench) and bundling are the same as for ``--backend hipblaslt``. Problems find_exact
cannot take (recorded with non-packed ld's, padded) are recorded as skipped, with the reason.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...atomic import atomic_write_text
from ...backends.base import ProblemResult, ToolMissing, TuneSettings, WinnerRecord
from ...backends.hipblaslt import HipblasltBackend
from ...backends.slots import amd_device_env
from ...formats.find_exact import parse_result_name
from ...formats.hipblaslt_bench import parse_output
from ...formats.logic import dump_logic, load_logic, tensile_ld_order
from ...formats.rocm import is_packed
from ...problem import GemmProblem
from ..configs.render import find_exact_reason
from ..merge.logic_merge import remove_unused
from .config_tool import run_into, tool_root

ENV = "HIPBLASLT_ROOT"


@dataclass(frozen=True)
class FindExactBuild:
    root: Path
    script: Path
    bench: Path
    match_table: Path


def locate(explicit: str | None = None) -> FindExactBuild:
    """The hipBLASLt build find_exact needs, every part checked; ``ToolMissing`` names what is absent."""
    root = tool_root(
        explicit,
        ENV,
        "find_exact needs a hipBLASLt build: pass --hipblaslt-root DIR or set "
        "$HIPBLASLT_ROOT (the build directory, e.g. hipBLASLt/build/release)",
    )
    found = {
        "hipblaslt-bench": [root / "clients" / "staging" / "hipblaslt-bench", root / "clients" / "hipblaslt-bench"],
        "MatchTable.yaml": [root / "library" / "MatchTable.yaml", root / "device-library" / "MatchTable.yaml"],
        "find_exact.py": [up / "utilities" / "find_exact.py" for up in (root, root.parent, root.parent.parent)],
    }
    chosen = {name: next((p for p in paths if p.is_file()), None) for name, paths in found.items()}
    missing = [f"{name} (looked at {', '.join(str(p) for p in found[name])})" for name, p in chosen.items() if not p]
    if missing:
        raise ToolMissing(f"{root} is not a usable hipBLASLt build: no " + "; no ".join(missing))
    return FindExactBuild(root, chosen["find_exact.py"], chosen["hipblaslt-bench"], chosen["MatchTable.yaml"])


class FindExact:
    """``find_exact.py`` as a ``config_tool.ConfigTool``: the build's own bench times the heuristic pick, on
    the GPU the worker claimed. The 2024 script benches on device 0 whatever it is told and the 2025 one on
    ``TestConfig.Device`` (the configs write 0), so it runs with only that GPU visible, as device 0."""

    name = "find_exact"

    def __init__(self, gpu: int = 0, root: str | None = None, timeout_s: float = 7200.0) -> None:
        self.build = locate(root)
        self.gpu = gpu
        self.bench = HipblasltBackend(gpu, str(self.build.bench))
        self.timeout_s = timeout_s

    @property
    def generation(self) -> str:
        """``2024`` for the tree with ``clients/staging/hipblaslt-bench`` (its find_exact.py knows only the type
        letters H, S and FP8), else ``2025`` (B and FP8N too; docs/upstream.md)."""
        return "2024" if self.build.bench.parent.name == "staging" else "2025"

    def runtime(self) -> dict:
        return {
            **self.bench.runtime(),
            "tuner": self.name,
            "hipblaslt_root": str(self.build.root),
            "find_exact_generation": self.generation,
        }

    def skip_reason(self, problem: GemmProblem) -> str | None:
        if self.generation == "2024" and "bfloat16" in (problem.a_type, problem.b_type, problem.c_type):
            return (
                f"bf16 needs the 2025 find_exact.py (hipBLASLt >= 0.12): {self.build.script} knows only the "
                "type letters H, S and FP8 and asserts on B; tune it with --backend hipblaslt"
            )
        return find_exact_reason(problem) or (
            None
            if is_packed(problem)
            else ("find_exact cannot take leading dimensions (recorded non-packed or padded): use --backend hipblaslt")
        )

    def run(self, config: Path, out: Path) -> None:
        """find_exact.py on one config into ``out`` (emptied first), only the worker's GPU visible; raise with
        its output's tail."""
        run_into(
            [sys.executable, str(self.build.script), str(config.absolute()), str(self.build.root)],
            out,
            self.timeout_s,
            f"find_exact.py on {config.name}",
            env=amd_device_env(self.gpu),
        )

    def winners(self, out: Path) -> dict[tuple, tuple[int | None, float, str | None]]:
        """``(transA, transB, M, N, B, K) -> (solution index, us, solution name)`` from ``0_Bench``."""
        found = {}
        for path in sorted((out / "0_Bench").glob("result_*.txt")):
            name = parse_result_name(path.name)
            if name is None:
                continue
            best = parse_output(path.read_text(errors="replace"), str(path)).fastest
            found[(name.transa, name.transb, name.m, name.n, name.batch, name.k)] = (best.index, best.us, best.name)
        return found

    def result(self, problem: GemmProblem, winners: dict, settings: TuneSettings) -> ProblemResult:
        """The size's winner, kept where it beats the library's heuristic pick by the margin."""
        key = (problem.transa, problem.transb, problem.m, problem.n, problem.batch, problem.k)
        if key not in winners:
            return ProblemResult(problem, errors=["find_exact wrote no 0_Bench result for this size"])
        index, us, name = winners[key]
        heuristic = self.bench.heuristic(problem)
        result = ProblemResult(problem, default_us=heuristic.us, winner_us=heuristic.us)
        if index is not None and index != heuristic.index and heuristic.us / us >= 1 + settings.margin:
            solution = {
                "SolutionIndex": index,
                "SolutionNameMin": name,
                "Tuner": self.name,
                "HeuristicSolutionIndex": heuristic.index,
            }
            result.crown(f"Gemm_Hipblaslt_{index}", us, WinnerRecord(solution))
        return result

    def keep_logic(self, out: Path, logic_dir: Path, results: Sequence[ProblemResult]) -> None:
        """find_exact's logic with Tensile's ld order, reduced to the sizes whose winner beat the heuristic."""
        kept = {(r.problem.m, r.problem.n, r.problem.batch, r.problem.k) for r in results if r.record}
        for path in sorted((out / "1_LogicYaml").glob("*.yaml")):
            logic = load_logic(path)
            tensile_ld_order(logic)
            logic.exact_logic = [row for row in logic.exact_logic or [] if tuple(row[0][:4]) in kept]
            if logic.exact_logic:
                remove_unused(logic)
                atomic_write_text(logic_dir / path.name, dump_logic(logic))

"""``--backend find_exact``: upstream hipBLASLt ``utilities/find_exact.py`` on the configs GenerateConfigs
wrote, one config (one ProblemType) at a time (``shared/spec/hipblaslt-tensilelite.md`` section 1).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..atomic import atomic_write_json, atomic_write_text
from ..backends.base import ProblemResult, ToolMissing, TuneSettings
from ..backends.hipblaslt import HipblasltBackend
from ..formats.find_exact import parse_result_name
from ..formats.hipblaslt_bench import BenchFormatError, parse_output
from ..formats.logic import dump_logic, load_logic, tensile_ld_order
from ..formats.rocm import is_packed, problem_type_name
from ..problem import GemmProblem
from .bench import RUNTIME, TOOL_LOGIC, pending, result_path
from .configs import find_exact_reason
from .logic_merge import remove_unused
from .tool_run import run_into, tool_root

ENV = "HIPBLASLT_ROOT"


@dataclass(frozen=True)
class FindExactBuild:
    root: Path
    script: Path
    bench: Path
    match_table: Path


def locate(explicit: str | None = None) -> FindExactBuild:
    """The hipBLASLt build find_exact needs, every part checked; ``ToolMissing`` names what is absent."""
    root = tool_root(explicit, ENV, "find_exact needs a hipBLASLt build: pass --hipblaslt-root DIR or set "
                                   "$HIPBLASLT_ROOT (the build directory, e.g. hipBLASLt/build/release)")
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


def run_config(build: FindExactBuild, config: Path, out: Path, timeout_s: float) -> None:
    """Run find_exact.py on one config into ``out`` (emptied first); raise with its output's tail."""
    run_into([sys.executable, str(build.script), str(config.absolute()), str(build.root)], out, timeout_s,
             f"find_exact.py on {config.name}")


def winners(out: Path) -> dict[tuple, tuple[int | None, float, str | None]]:
    """``(transA, transB, M, N, B, K) -> (solution index, us, solution name)`` from ``0_Bench``."""
    found = {}
    for path in sorted((out / "0_Bench").glob("result_*.txt")):
        name = parse_result_name(path.name)
        if name is None:
            continue
        best = parse_output(path.read_text(errors="replace"), str(path)).fastest
        found[(name.transa, name.transb, name.m, name.n, name.batch, name.k)] = (best.index, best.us, best.name)
    return found


def tune_configs(problems: Sequence[GemmProblem], configs_dir: Path, out_dir: Path, build: FindExactBuild,
                 settings: TuneSettings, gpu: int = 0, timeout_s: float = 7200.0,
                 progress: Callable[[int, int], None] | None = None) -> None:
    """find_exact on every config whose problems have no result yet; each problem's result written as it is
    known, the fixed logic of every config kept under ``out_dir/logic-tool``."""
    out_dir = Path(out_dir).absolute()
    bench = HipblasltBackend(gpu, str(build.bench))
    atomic_write_json(out_dir / RUNTIME, {**bench.runtime(), "tuner": "find_exact", "hipblaslt_root": str(build.root)})
    for problem in pending(problems, out_dir):
        reason = find_exact_reason(problem) or (None if is_packed(problem) else (
            "find_exact cannot take leading dimensions (recorded non-packed or padded): use --backend hipblaslt"))
        if reason:
            atomic_write_json(result_path(out_dir, problem), ProblemResult(problem, skipped=reason).to_json())
    groups: dict[str, list[GemmProblem]] = {}
    for problem in pending(problems, out_dir):
        groups.setdefault(problem_type_name(problem), []).append(problem)
    done = len(problems) - len(pending(problems, out_dir))
    for name, group in sorted(groups.items()):
        config = configs_dir / "find_exact" / f"{name}.yaml"
        if not config.exists():
            for problem in group:
                atomic_write_json(result_path(out_dir, problem), ProblemResult(problem, skipped=(
                    f"no find_exact config {config.name}: GenerateConfigs skipped this problem type")).to_json())
            continue
        out = out_dir / "find_exact" / name
        try:
            run_config(build, config, out, timeout_s)
            best = winners(out)
        except (RuntimeError, BenchFormatError) as err:
            best, error = {}, str(err)
        else:
            error = None
        kept_sizes = set()
        for problem in group:
            result = _result(problem, best, bench, settings, error)
            if result.winner_config:
                kept_sizes.add((problem.m, problem.n, problem.batch, problem.k))
            atomic_write_json(result_path(out_dir, problem), result.to_json())
            done += 1
            if progress:
                progress(done, len(problems))
        _keep_logic(out, out_dir / TOOL_LOGIC, kept_sizes)


def _result(problem: GemmProblem, best: dict, bench: HipblasltBackend, settings: TuneSettings,
            error: str | None) -> ProblemResult:
    if error:
        return ProblemResult(problem, errors=[error])
    key = (problem.transa, problem.transb, problem.m, problem.n, problem.batch, problem.k)
    if key not in best:
        return ProblemResult(problem, errors=["find_exact wrote no 0_Bench result for this size"])
    index, us, name = best[key]
    heuristic = bench.heuristic(problem)
    result = ProblemResult(problem, default_us=heuristic.us, winner_us=heuristic.us)
    if index is not None and index != heuristic.index and heuristic.us / us >= 1 + settings.margin:
        result.winner, result.winner_us = f"Gemm_Hipblaslt_{index}", us
        result.winner_config = {"SolutionIndex": index, "SolutionNameMin": name, "Tuner": "find_exact",
                                "HeuristicSolutionIndex": heuristic.index}
    return result


def _keep_logic(out: Path, logic_dir: Path, kept_sizes: set) -> None:
    """find_exact's logic with Tensile's ld order, reduced to the sizes whose winner beat the heuristic."""
    for path in sorted((out / "1_LogicYaml").glob("*.yaml")):
        logic = load_logic(path)
        tensile_ld_order(logic)
        logic.exact_logic = [row for row in logic.exact_logic or [] if tuple(row[0][:4]) in kept_sizes]
        if logic.exact_logic:
            remove_unused(logic)
            atomic_write_text(logic_dir / path.name, dump_logic(logic))

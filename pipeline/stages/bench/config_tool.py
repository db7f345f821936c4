"""The AMD tools that run on the configs GenerateConfigs wrote (``find_exact.py``, TensileLite): one driver
over a small protocol (``ConfigTool``), declared in ``registry`` beside the tuners.

The driver writes the run's ``runtime.json``, records the problems the tool cannot take as skipped (with the
reason), groups the others by ProblemType, runs the tool on each group's config (a tool's output directory
appears only whole), turns what it found into one result per problem (each written as it is known, so a
rerun resumes), keeps the logic the tool wrote for the winners, and reports progress.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from ... import procs
from ...atomic import atomic_directory, atomic_write_json, atomic_write_text
from ...backends.base import ProblemResult, ToolMissing, TuneSettings
from ...errors import PipelineError, ToolError
from ...formats.rocm import problem_type_name
from ...problem import GemmProblem
from ..configs.render import configs_generation
from .tune import RUNTIME, TOOL_LOGIC, pending, result_path


class ConfigTool(Protocol):
    """One tool: ``name`` is its backend name, also its configs/ subdirectory and its runs' directory."""

    name: str
    timeout_s: float

    def runtime(self) -> dict: ...  # the run's runtime.json: the bench's own record and the tool's

    def skip_reason(self, problem: GemmProblem) -> str | None: ...  # why the tool cannot take it

    def run(self, config: Path, out: Path) -> None: ...  # the tool on one config, into ``out``

    def winners(self, out: Path) -> dict: ...  # what the run found, by the tool's key of a size

    def result(self, problem: GemmProblem, winners: dict, settings: TuneSettings) -> ProblemResult: ...

    def keep_logic(self, out: Path, logic_dir: Path, results: Sequence[ProblemResult]) -> None: ...


def tool_root(explicit: str | None, env: str, missing: str) -> Path:
    """The directory given by an option, else by ``$env``, as an absolute path; ``missing`` says what to do."""
    given = explicit or os.environ.get(env)
    if not given:
        raise ToolMissing(missing)
    return Path(given).absolute()


def run_into(argv: list[str], out: Path, timeout_s: float, what: str, env: dict[str, str] | None = None) -> None:
    """Run ``argv`` with the output directory appended (a staging one, replacing ``out`` only on success);
    its stdout and stderr kept in ``out/tool.log``; a failure or a time-out raises with the log's tail."""
    with atomic_directory(out) as staging:
        try:
            proc = procs.run([*argv, str(staging)], timeout_s=timeout_s, cwd=staging, env=env)
        except subprocess.TimeoutExpired:
            raise ToolError(f"{what} ran past {timeout_s:.0f} s") from None
        atomic_write_text(staging / "tool.log", proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise ToolError(
                f"{what} exited with code {proc.returncode}:\n{procs.tail_lines(proc.stdout + proc.stderr, 15)}"
            )


def tune_configs(
    tool: ConfigTool,
    problems: Sequence[GemmProblem],
    configs_dir: Path,
    out_dir: Path,
    settings: TuneSettings,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """``tool`` on every config whose problems have no result yet; results and logic as the module says."""
    out_dir = Path(out_dir).absolute()
    atomic_write_json(out_dir / RUNTIME, tool.runtime())

    def record(result: ProblemResult) -> None:
        atomic_write_json(result_path(out_dir, result.problem), result.to_json())

    groups: dict[str, list[GemmProblem]] = {}
    generation = configs_generation(configs_dir)  # the config files are named as that TensileLite names them
    for problem in pending(problems, out_dir):
        reason = tool.skip_reason(problem)
        if reason:
            record(ProblemResult(problem, skipped=reason))
        else:
            groups.setdefault(problem_type_name(problem, generation), []).append(problem)
    done = len(problems) - len(pending(problems, out_dir))
    for name, group in sorted(groups.items()):
        config, out = configs_dir / tool.name / f"{name}.yaml", out_dir / tool.name / name
        found, error = {}, None
        if not config.exists():
            error = f"no {tool.name} config {config.name}: GenerateConfigs skipped this problem type"
        else:
            try:
                tool.run(config, out)
                found = tool.winners(out)
            except PipelineError as err:  # the tool failed on this config: its problems record why
                error = str(err)
        results = []
        for problem in group:
            if error:
                result = ProblemResult(problem, **({"skipped": error} if not config.exists() else {"errors": [error]}))
            else:
                result = tool.result(problem, found, settings)
            record(result)
            results.append(result)
            done += 1
            if progress:
                progress(done, len(problems))
        if not error:
            tool.keep_logic(out, out_dir / TOOL_LOGIC, results)

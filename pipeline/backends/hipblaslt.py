"""AMD backend: tune each GEMM with hipblaslt-bench (``--backend hipblaslt``).

Per problem the bench runs twice: the library's heuristic pick (``--algo_method heuristic
--requested_solution 1``, the baseline torch gets without tuning) and every solution (``--algo_method all
--requested_solution -1``), both with the same settings (``--flush`` included: the 2025 bench turns it on by
itself under ``HIPBLASLT_TUNING_FILE``). The fastest solution wins if it beats the baseline by the margin; its
name is ``Gemm_Hipblaslt_<solution index>`` (MergeResults writes the form the target torch reads). A run that
fails, hangs past the timeout or prints garbage is retried once, then recorded as that problem's error.

The bench's generation (``formats.hipblaslt_bench.Generation``) comes from the ``hipBLASLt version`` it
prints: the 2025 tree (>= 0.12) writes the winner's override row itself through ``HIPBLASLT_TUNING_FILE``
(kept; a bench of that tree that wrote none gets the legacy layout written here: a ``Git Version:`` line, then
a header and a value line); the 2024 tree has no override file at all, so its winners ship as TunableOp
rows and logic records only. ``OverrideSource`` in the winner's config says which.

The program is found by ``--hipblaslt-bench PATH``, else ``$HIPBLASLT_BENCH``, else ``hipblaslt-bench`` on
PATH. Validation re-measures a winner with the bench itself: ``measure_pair`` alternates heuristic and
``--algo_method index --solution_index N`` runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .. import procs
from ..errors import ToolError
from ..formats.hipblaslt_bench import (
    BenchFormatError,
    BenchOptions,
    BenchRun,
    BenchSolution,
    Generation,
    bench_args,
    parse_output,
    scale_spelling_from_help,
    unsupported_reason,
)
from ..formats.torch_build import torch_build
from ..problem import GemmProblem
from ..spawner import Spawner, SupervisorLost
from ..stats import round_order
from .base import BackendBase, CandidateResult, ProblemResult, ToolMissing, TuneSettings, WinnerRecord

log = logging.getLogger("pipeline")

ENV = "HIPBLASLT_BENCH"
LEGACY_COLUMNS = (
    "transA",
    "transB",
    "batch_count",
    "m",
    "n",
    "k",
    "a_type",
    "b_type",
    "c_type",
    "d_type",
    "compute_type",
)


class BenchFailed(ToolError):
    """hipblaslt-bench failed, hung or printed no result, twice."""


def find_bench(explicit: str | None = None) -> str:
    """The hipblaslt-bench to run, as an absolute path."""
    for candidate in (explicit, os.environ.get(ENV), shutil.which("hipblaslt-bench")):
        if not candidate:
            continue
        path = shutil.which(candidate) or candidate
        if Path(path).is_file() and os.access(path, os.X_OK):
            return str(Path(path).absolute())
        if candidate in (explicit, os.environ.get(ENV)):
            raise ToolMissing(f"hipblaslt-bench {candidate!r} is not an executable file")
    raise ToolMissing(
        "hipblaslt-bench not found: pass --hipblaslt-bench PATH, set $HIPBLASLT_BENCH, or put "
        "hipblaslt-bench on PATH (ROCm installs it as /opt/rocm/bin/hipblaslt-bench)"
    )


def legacy_override_rows(run: BenchRun) -> str:
    """The winner as legacy override rows: a header line and a value line (no Git Version line)."""
    fields = run.fastest.fields
    header = ",".join((*LEGACY_COLUMNS, "solution_index"))
    values = ",".join((*(fields.get(c, "") for c in LEGACY_COLUMNS), str(run.fastest.index)))
    return f"{header}\n{values}\n"


def torch_validators() -> dict[str, str] | None:
    """The validator block a ROCm torch on this machine writes (None without one): what TunableOp checks
    before it loads a results file (``docs/tunableop.md`` 2.2)."""
    build = torch_build()
    if build is None or build["hip"] is None:  # no torch, or not a ROCm one: not imported (seconds)
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return dict(torch.cuda.tunable.get_validators())


class HipblasltBackend(BackendBase):
    name = "hipblaslt"

    def __init__(
        self,
        gpu: int = 0,
        bench: str | None = None,
        options: dict | None = None,
        timeout_s: float = 600.0,
        retries: int = 1,
    ) -> None:
        self.gpu = gpu
        self.bench = find_bench(bench)
        self.options = BenchOptions(**(options or {}))
        self.timeout_s = timeout_s
        self.retries = retries
        self._probe: BenchRun | None = None
        self._scale_spelling: str | None = None
        self._spawner = Spawner()  # a Bench or Validate worker runs the bench hundreds of times

    def close(self) -> None:
        self._spawner.close()

    def probe(self) -> BenchRun:
        """What the bench reports of itself and the device (a small heuristic run, once)."""
        if self._probe is None:
            probe = GemmProblem("gemm", "N", "N", 256, 256, 256, a_type="float16", b_type="float16", c_type="float16")
            self._probe = self.run(
                bench_args(probe, BenchOptions(cold_iters=1, iters=1, rotating_mb=0), self.gpu, "heuristic")
            )
        return self._probe

    @property
    def generation(self) -> Generation:
        return Generation.of(self.probe().version)

    def runtime(self) -> dict:
        run = self.probe()
        return {
            "backend": self.name,
            "platform": "rocm",
            "bench": self.bench,
            "hipblaslt_version": run.version,
            "hipblaslt_git": run.git_version,
            "generation": self.generation.name,
            "name": run.device or "unknown",
            "arch": run.arch,
            "bench_options": dataclasses.asdict(self.options),
            "validators": torch_validators() or {"HIPBLASLT_VERSION": f"{run.version}-{run.git_version}"},
        }

    def unsupported_reason(self, problem: GemmProblem) -> str | None:
        return unsupported_reason(problem, self.generation, self.probe().arch)

    def scale_spelling(self) -> str:
        """How this bench takes ``--scaleA``/``--scaleB`` values, read once from its ``--help``; where the help says
        neither (or fails), what its version suggests, with a warning."""
        if self._scale_spelling is None:
            try:
                proc = procs.run([self.bench, "--help"], timeout_s=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc = None
            said = scale_spelling_from_help(proc.stdout) if proc and proc.returncode == 0 else None
            if said is None:
                log.warning(
                    "%s --help says neither 's = scalar' nor '0 = None' on its --scaleA line: scales are spelled as "
                    "hipBLASLt %s suggests (%s)",
                    self.bench,
                    self.probe().version,
                    self.generation.scale_spelling,
                )
            self._scale_spelling = said or self.generation.scale_spelling
        return self._scale_spelling

    def args(self, problem: GemmProblem, method: str, index: int | None = None) -> list[str]:
        """One run's arguments, with this bench's generation's names (and its help's scale spelling)."""
        generation = self.generation
        if problem.op == "scaled_gemm":
            generation = dataclasses.replace(generation, scales=self.scale_spelling())
        return bench_args(problem, self.options, self.gpu, method, index, generation)

    def run(self, args: Sequence[str], env: dict[str, str] | None = None) -> BenchRun:
        """One bench run, retried ``retries`` times on a failure, a hang or output without a result."""
        errors = []
        for _ in range(self.retries + 1):
            try:
                proc = self._spawner.run([self.bench, *args], self.timeout_s, {**os.environ, **(env or {})})
            except subprocess.TimeoutExpired:
                errors.append(f"no answer in {self.timeout_s:.0f} s")
                continue
            except SupervisorLost as err:  # the retry starts another supervisor
                errors.append(str(err))
                continue
            if proc.returncode != 0:
                errors.append(f"exit code {proc.returncode}: {(proc.stderr.strip() or proc.stdout.strip())[-400:]}")
                continue
            try:
                return parse_output(proc.stdout, "hipblaslt-bench")
            except BenchFormatError as err:
                errors.append(str(err))
        raise BenchFailed("; then ".join(errors) + f" (ran {self.bench} {' '.join(args)})")  # the cause first

    def heuristic(self, problem: GemmProblem) -> BenchSolution:
        """The library's own pick for ``problem`` (what torch gets untuned), as this bench measures it."""
        return self.run(self.args(problem, "heuristic")).fastest

    def tune_one(self, problem: GemmProblem, settings: TuneSettings) -> ProblemResult:
        baseline = self.heuristic(problem)
        with tempfile.TemporaryDirectory() as scratch:
            tuning_file = Path(scratch) / "tuning.txt"
            env = {"HIPBLASLT_TUNING_FILE": str(tuning_file)} if self.generation.tuning_file else None
            search = self.run(self.args(problem, "all"), env=env)
            written = tuning_file.read_text() if tuning_file.exists() else ""
        best = search.fastest
        candidates = [
            CandidateResult(
                f"Gemm_Hipblaslt_{s.index}",
                screen_us=s.us,
                final_us=s.us,
                config={"SolutionIndex": s.index, "SolutionNameMin": s.name},
            )
            for s in search.solutions
        ]
        result = ProblemResult(
            problem, default_us=baseline.us, candidates=candidates, phases={"solutions": float(len(search.solutions))}
        )
        if best.index is None:
            result.errors.append("the bench printed no --Solution index: is --print_kernel_info honoured?")
            return result
        if baseline.us / best.us >= 1 + settings.margin and best.index != baseline.index:
            solution = {
                "SolutionIndex": best.index,
                "SolutionNameMin": best.name,
                "KernelNameMin": best.kernel,
                "HeuristicSolutionIndex": baseline.index,
            }
            record = WinnerRecord(solution, library_git=search.git_version or "")
            if self.generation.tuning_file:  # the 2024 tree has no override file: nothing to write
                written_rows = written.split("\n", 1)[1] if written.startswith("Git Version:") else ""
                record.override_rows = written_rows or legacy_override_rows(search)
                record.override_source = "hipblaslt-bench (HIPBLASLT_TUNING_FILE)" if written_rows else "legacy layout"
            result.crown(f"Gemm_Hipblaslt_{best.index}", best.us, record)
        else:
            result.winner_us = baseline.us
        return result

    def retime(self, previous: ProblemResult, settings: TuneSettings, report: bool = True) -> ProblemResult:
        """The previous winner's solution index against this build's heuristic pick, in alternating runs (one
        reading, whatever ``report`` says). The index must still name the same kernel: indices are not portable
        across builds (spec section 6)."""
        problem = previous.problem
        config = previous.record.solution if previous.record else {}
        index = config["SolutionIndex"]
        probe = self.run(self.args(problem, "index", index))
        if probe.fastest.name != config.get("SolutionNameMin"):
            raise ValueError(
                f"solution {index} is {probe.fastest.name or 'unnamed'} in this build, "
                f"was {config.get('SolutionNameMin')}"
            )
        times = self.measure_pair(problem, index, rounds=3)
        base, tuned = statistics.median(times["baseline"]), statistics.median(times["tuned"])
        result = ProblemResult(
            problem,
            default_us=base,
            winner_us=base,
            candidates=[CandidateResult(previous.winner, final_us=tuned, config=config)],
        )
        if base / tuned >= 1 + settings.margin:
            result.crown(
                previous.winner, tuned, dataclasses.replace(previous.record, library_git=probe.git_version or "")
            )
        return result

    def measure_pair(self, problem: GemmProblem, index: int | None, rounds: int) -> dict[str, list[float]]:
        """Per-call times of the heuristic pick and of solution ``index`` (None: the heuristic only), from
        ``rounds`` alternating bench runs (A B, B A, ...)."""
        times: dict[str, list[float]] = {"baseline": [], "tuned": []}
        for r in range(rounds):
            for name in round_order(("baseline", "tuned"), r):
                if name == "tuned" and index is None:
                    continue
                method = "heuristic" if name == "baseline" else "index"
                run = self.run(self.args(problem, method, index))
                times[name].append(run.fastest.us)
        return times

"""The interface every tuner shares: problems and settings in; per problem the winner, its time, the
default's time, every candidate's time, and the errors met. Plain data, JSON both ways.

A backend implements ``Backend.tune_one``; ``tune`` runs it over problems and turns a failing problem
into a recorded error so the others finish. A backend that can re-time a saved winner under a new stack
implements ``retime`` too: after a library upgrade the previous winner is timed against the new default
first and kept where it still wins by the margin; elsewhere the problem is tuned again. Solution names are
the TunableOp names the runtime loads (``Default``, ``Gemm_Cublaslt_id_..``, ``Gemm_Hipblaslt_<index>``...).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields

from ..defaults import TUNE_MARGIN
from ..errors import ToolError
from ..formats.tunableop import DEFAULT
from ..kernels.support import WORKSPACE_BYTES, Unsupported, unsupported_reason
from ..problem import GemmProblem


class ToolMissing(ToolError):
    """A tool the chosen backend needs is not installed where the pipeline looks; the message says how to
    point the pipeline at it."""


@dataclass(frozen=True)
class TuneSettings:
    """Search knobs shared by backends (each reads what applies to it)."""

    margin: float = TUNE_MARGIN  # a winner must beat the default by this much after re-measurement
    time_budget_s: float = 20.0  # screening budget per problem
    heuristic_count: int = 128  # cuBLASLt heuristic candidates requested
    neighbours: int = 16  # valid configs kept one axis away from each heuristic result (cuBLASLt's local search)
    enumerate_budget: int = 0  # extra configs drawn at random from the whole space (checked ones)
    finalists: int = 8  # best screened candidates re-measured against the default
    workspace_bytes: int = WORKSPACE_BYTES  # as torch has it on sm90 (CUBLASLT_WORKSPACE_SIZE)
    device: int = 0


@dataclass
class CandidateResult:
    name: str
    screen_us: float | None = None
    final_us: float | None = None  # from the rounds that chose among the finalists
    error: str | None = None
    verdict_us: float | None = None  # the chosen one's, from rounds against the default alone (cublaslt)
    verdict_low: float | None = None  # the lower bound of its speedup's median there (``stats.Verdict``)
    verdict_speedup: float | None = None  # the speedup that crowned or refused it; a winner reports another reading's
    report_windows: list[list[float]] | None = None  # a winner's reported reading: [default, winner] us per window
    config: dict | None = None


LEGACY_RECORD_KEYS = {"OverrideRows": "override_rows", "OverrideSource": "override_source", "GitVersion": "library_git"}


@dataclass
class WinnerRecord:
    """What every backend says of its winner beyond the name and time: ``solution``, the fields its Equality
    logic entry carries (a cuBLASLt config with its algorithm bytes; a hipBLASLt solution index and kernel
    name; TunableOp's solution), and, where the library reads an override file (hipBLASLt >= 1.x), the rows
    that apply it, where they came from and the library's git version."""

    solution: dict
    override_rows: str = ""
    override_source: str = ""
    library_git: str = ""

    @classmethod
    def from_json(cls, data: dict) -> WinnerRecord:
        """The record as ``to_json`` wrote it, or a flat ``winner_config`` of results written before the record
        had fields of its own (the tuned cache keeps them across stacks)."""
        if "solution" in data:
            return cls(**data)
        solution = {k: v for k, v in data.items() if k not in LEGACY_RECORD_KEYS}
        return cls(solution, **{field: data[key] for key, field in LEGACY_RECORD_KEYS.items() if key in data})


@dataclass
class ProblemResult:
    problem: GemmProblem
    winner: str = DEFAULT
    winner_us: float | None = None
    default_us: float | None = None
    record: WinnerRecord | None = None  # set with ``winner`` (``crown``): None while the default wins
    candidates: list[CandidateResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    numerics: dict[str, float] = field(default_factory=dict)
    tuning_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per search phase
    skipped: str | None = None
    origin: str = ""  # how the result came: "" tuned here, "cache <fp>", "retimed ...", "retuned ..."
    timeline: dict = field(default_factory=dict)  # where and when it was tuned: gpu, pid, start, end (epoch s)
    bucket: dict = field(default_factory=dict)  # its winner scored over its grid bucket (``bench/bucket_score``)

    @property
    def speedup(self) -> float | None:
        if self.winner_us and self.default_us:
            return self.default_us / self.winner_us
        return None

    def crown(self, name: str, us: float, record: WinnerRecord) -> None:
        """Make ``name`` (``us`` per call) the winner, with its record."""
        self.winner, self.winner_us, self.record = name, us, record

    @property
    def has_winner(self) -> bool:
        """A winner other than the default, with its record, and no error."""
        return self.winner != DEFAULT and self.record is not None and not self.errors

    def to_json(self) -> dict:
        """A JSON-ready view; it shares the configs, phases and timeline dicts (``asdict`` deep-copied them, which
        was most of the Bench parent's time on results of a few hundred candidates each)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["problem"] = self.problem.to_dict()
        data["candidates"] = [{f.name: getattr(c, f.name) for f in fields(c)} for c in self.candidates]
        data["record"] = (
            None if self.record is None else {f.name: getattr(self.record, f.name) for f in fields(self.record)}
        )
        data["speedup"] = self.speedup
        return data

    @classmethod
    def from_json(cls, data: dict) -> ProblemResult:
        data = dict(data)
        data.pop("speedup", None)
        data["problem"] = GemmProblem.from_dict(data["problem"])
        data["candidates"] = [CandidateResult(**c) for c in data.get("candidates", [])]
        legacy = data.pop("winner_config", None)
        record = data.get("record") or legacy
        data["record"] = WinnerRecord.from_json(record) if record else None
        return cls(**data)


class BackendBase:
    """What every tuner is: ``tune_one`` is its own; the rest has defaults it may replace."""

    name = "backend"

    def unsupported_reason(self, problem: GemmProblem) -> str | None:
        """Why this backend cannot tune ``problem`` (None: it can)."""
        return unsupported_reason(problem)

    def tune_one(self, problem: GemmProblem, settings: TuneSettings) -> ProblemResult:
        raise NotImplementedError

    def retime(self, previous: ProblemResult, settings: TuneSettings, report: bool = True) -> ProblemResult | None:
        """The previous stack's winner against this stack's default (winner DEFAULT where it no longer wins);
        None where this backend cannot re-time one: the problem is tuned again. ``report`` False: a caller that
        reads only the deciding measurement (``verdict_speedup``: a bucket's edge count) needs no second reading
        of a winner where the backend takes one."""
        return None

    def prepare(self) -> None:
        """Once-per-process measurements, taken before the first problem so no problem's time carries them."""

    def close(self) -> None:
        """Stop whatever ``prepare()`` started (a child process)."""

    def runtime(self) -> dict:
        """What the run's ``bench/runtime.json`` records of the library and device (empty: nothing)."""
        return {}


Backend = BackendBase  # the name the stages use for a tuner
CACHED = "cached"  # the source ``tune`` is told of a winner from this stack's own cache (``tuned_cache``)


def tune(
    backend: Backend,
    problems: Iterable[GemmProblem],
    settings: TuneSettings,
    previous: Mapping[GemmProblem, ProblemResult] | None = None,
    previous_from: Mapping[GemmProblem, str] | None = None,
) -> Iterator[ProblemResult]:
    """Tune each problem; an unsupported one is skipped with the reason, a failing one records its error.
    A problem with a ``previous`` winner (tuned under the stack ``previous_from`` names for it: a
    fingerprint, or "cached", this stack's own cache) is re-timed first."""
    for problem in problems:
        reason = backend.unsupported_reason(problem)
        if reason:
            yield ProblemResult(problem, skipped=reason)
            continue
        start, wall = time.monotonic(), time.time()
        result, why = None, ""
        prior, source = (previous or {}).get(problem), (previous_from or {}).get(problem) or "previous"
        if prior is not None:
            try:
                again = backend.retime(prior, settings)
            except Exception as err:  # a winner the new stack cannot run is tuned again
                again, why = None, f"{type(err).__name__}: {err}"
            if again is not None and again.winner != DEFAULT:
                result = again
                result.origin = f"retimed: the {source} winner still wins (x{again.speedup:.3f})"
            elif again is not None:
                why = f"x{again.default_us / again.candidates[0].final_us:.3f} under this stack"
            elif source == CACHED and not why:  # a backend that cannot re-time keeps this stack's own winner
                result = prior
                result.origin = f"cache (not re-timed: the {backend.name} backend cannot re-time a winner)"
        if result is None:
            try:
                result = backend.tune_one(problem, settings)
            except Unsupported as err:
                result = ProblemResult(problem, skipped=str(err))
            except Exception as err:  # a broken problem must not stop the shard
                result = ProblemResult(problem, errors=[f"{type(err).__name__}: {err}", traceback.format_exc(limit=3)])
            if prior is not None:
                result.origin = f"retuned: the {source} winner {prior.winner} no longer wins ({why})"
        result.tuning_s = time.monotonic() - start
        result.timeline = {"start": wall, "end": wall + result.tuning_s}
        yield result

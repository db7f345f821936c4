"""The interface every tuner shares: problems and settings in; per problem the winner, its time, the
default's time, every candidate's time, and the errors met. Plain data, JSON both ways.

A backend implements ``Backend.tune_one``; ``tune`` runs it over problems and turns a failing problem
into a recorded error so the others finish. Solution names are the TunableOp names the runtime loads
(``Default``, ``Gemm_Cublaslt_id_..``, ``Gemm_Hipblaslt_<index>``...).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Protocol

from ..problem import GemmProblem

DEFAULT = "Default"


class ToolMissing(RuntimeError):
    """A tool the chosen backend needs is not installed where the pipeline looks; the message says how to
    point the pipeline at it."""


@dataclass(frozen=True)
class TuneSettings:
    """Search knobs shared by backends (each reads what applies to it)."""

    margin: float = 0.02  # a winner must beat the default by this much after re-measurement
    time_budget_s: float = 20.0  # screening budget per problem
    heuristic_count: int = 128  # cuBLASLt heuristic candidates requested
    enumerate_budget: int = 96  # extra configs from the algorithm enumeration (checked ones)
    finalists: int = 8  # best screened candidates re-measured against the default
    workspace_bytes: int = 32 * 1024 * 1024  # as torch has it on sm90 (CUBLASLT_WORKSPACE_SIZE)
    device: int = 0


@dataclass
class CandidateResult:
    name: str
    screen_us: float | None = None
    final_us: float | None = None
    error: str | None = None
    config: dict | None = None


@dataclass
class ProblemResult:
    problem: GemmProblem
    winner: str = DEFAULT
    winner_us: float | None = None
    default_us: float | None = None
    winner_config: dict | None = None
    candidates: list[CandidateResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    numerics: dict[str, float] = field(default_factory=dict)
    tuning_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per search phase
    skipped: str | None = None

    @property
    def speedup(self) -> float | None:
        if self.winner_us and self.default_us:
            return self.default_us / self.winner_us
        return None

    def to_json(self) -> dict:
        data = asdict(self)
        data["problem"] = self.problem.to_dict()
        data["speedup"] = self.speedup
        return data

    @classmethod
    def from_json(cls, data: dict) -> ProblemResult:
        data = dict(data)
        data.pop("speedup", None)
        data["problem"] = GemmProblem.from_dict(data["problem"])
        data["candidates"] = [CandidateResult(**c) for c in data.get("candidates", [])]
        return cls(**data)


class Backend(Protocol):
    name: str

    def unsupported_reason(self, problem: GemmProblem) -> str | None: ...

    def tune_one(self, problem: GemmProblem, settings: TuneSettings) -> ProblemResult: ...


def tune(backend: Backend, problems: Iterable[GemmProblem], settings: TuneSettings) -> Iterator[ProblemResult]:
    """Tune each problem; an unsupported one is skipped with the reason, a failing one records its error."""
    for problem in problems:
        reason = backend.unsupported_reason(problem)
        if reason:
            yield ProblemResult(problem, skipped=reason)
            continue
        start = time.monotonic()
        try:
            result = backend.tune_one(problem, settings)
        except Exception as err:  # a broken problem must not stop the shard
            result = ProblemResult(problem, errors=[f"{type(err).__name__}: {err}",
                                                    traceback.format_exc(limit=3)])
        result.tuning_s = time.monotonic() - start
        yield result

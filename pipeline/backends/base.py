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

from ..errors import ToolError
from ..formats.tunableop import DEFAULT
from ..problem import ROWWISE, TENSORWISE, GemmProblem


class ToolMissing(ToolError):
    """A tool the chosen backend needs is not installed where the pipeline looks; the message says how to
    point the pipeline at it."""


class Unsupported(RuntimeError):
    """The library a backend drives cannot express ``problem`` (found only when it is asked, e.g. a scale mode a
    cuBLASLt build refuses): ``tune`` records the problem as skipped with this reason, not as a failure."""


SUPPORTED_OPS = ("gemm", "gemm_and_bias", "gemm_strided_batched")
SUPPORTED_DTYPES = ("bfloat16", "float16", "float32", "float64")
FP8_TYPES = ("float8_e4m3fn", "float8_e5m2")  # the OCP FP8 types of NVIDIA's tensor cores
SCALED_OUT_TYPES = ("bfloat16", "float16", "float32")


def scaled_unsupported_reason(problem: GemmProblem) -> str | None:
    """Why a scaled GEMM cannot be tuned against torch's ``_scaled_mm`` on NVIDIA (None: it can). Only a key
    that states its scales (torch 2.15's CUDA grammar) is tuned: the 2.7-2.14 ``rw_0`` cannot tell tensorwise
    from block scales (GemmCommon.h), so tuning it as tensorwise could be another problem."""
    if problem.scale_a_recipe is None:
        return (
            "scaled key without its scale recipes (the rw_ form cannot tell tensorwise from block scales): "
            "NVIDIA tunes the 2.15 CUDA form that collection records"
        )
    if (problem.scale_a_recipe, problem.scale_b_recipe) not in ((TENSORWISE, TENSORWISE), (ROWWISE, ROWWISE)):
        return (
            f"scale recipes {problem.scale_a_recipe}/{problem.scale_b_recipe}: only tensorwise ({TENSORWISE}) "
            f"and rowwise ({ROWWISE})"
        )
    if problem.scale_a_type != "float32" or problem.scale_b_type != "float32":
        return f"scales of {problem.scale_a_type}/{problem.scale_b_type}: only fp32 scales"
    if problem.output_scale:
        return "an output scale (scale_result): FP8 outputs are not tuned"
    types = (problem.a_type, problem.b_type)
    if not set(types) <= set(FP8_TYPES) or types == ("float8_e5m2", "float8_e5m2"):
        return f"FP8 types {problem.a_type} x {problem.b_type}: e4m3/e5m2, not both e5m2"
    if problem.c_type not in SCALED_OUT_TYPES:
        return f"output {problem.c_type}: bf16, fp16 and fp32 outputs are tuned"
    if problem.bias_type not in (None, problem.c_type) or problem.bias_type == "float32":
        return f"a {problem.bias_type} bias on a {problem.c_type} output"
    if problem.layout != "TN":
        return f"layout {problem.layout}: _scaled_mm runs TN only"
    return None


def unsupported_reason(problem: GemmProblem) -> str | None:
    """Why torch's own GEMM path, and the cuBLASLt backend that times against it, cannot run ``problem``
    (None when they can). Torch-free, so the runtime's table reads it without a GPU stack."""
    if problem.is_wildcard:
        return "wildcard key: tune the concrete shapes it stands for"
    if problem.op == "scaled_gemm":
        return scaled_unsupported_reason(problem)
    if problem.op not in SUPPORTED_OPS:
        return f"{problem.op} is not tuned on NVIDIA yet (plain, bias and strided-batched GEMMs are)"
    if problem.a_type not in SUPPORTED_DTYPES or problem.c_type != problem.a_type:
        return f"dtype {problem.a_type} -> {problem.c_type} is not supported (fp16, bf16, fp32/tf32, fp64)"
    if problem.compute_suffix:
        return f"compute mode {problem.compute_suffix!r} is not supported"
    return None


@dataclass(frozen=True)
class TuneSettings:
    """Search knobs shared by backends (each reads what applies to it)."""

    margin: float = 0.02  # a winner must beat the default by this much after re-measurement
    time_budget_s: float = 20.0  # screening budget per problem
    heuristic_count: int = 128  # cuBLASLt heuristic candidates requested
    neighbours: int = 16  # valid configs kept one axis away from each heuristic result (cuBLASLt's local search)
    enumerate_budget: int = 0  # extra configs drawn at random from the whole space (checked ones)
    finalists: int = 8  # best screened candidates re-measured against the default
    workspace_bytes: int = 32 * 1024 * 1024  # as torch has it on sm90 (CUBLASLT_WORKSPACE_SIZE)
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

    def retime(self, previous: ProblemResult, settings: TuneSettings) -> ProblemResult | None:
        """The previous stack's winner against this stack's default (winner DEFAULT where it no longer wins);
        None where this backend cannot re-time one: the problem is tuned again."""
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

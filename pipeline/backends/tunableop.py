"""TunableOp offline tuning (``--backend tunableop``): torch's own tuner, one process per GPU.

Not the stock ``mgpu_tune_gemm_in_file`` (``docs/tunableop.md`` 3.2: its result gathering mangles
paths holding '0' or '.', and before 2.14 a worker could write another GPU's file). The Bench stage starts
one worker per GPU (its own slot, ``set_device``); this backend, in that worker, gives TunableOp its own
results file (``tunableop_results<gpu>.csv`` in a scratch directory, never a stale one: 2.10+ appends under
whatever validator block the file already had) and tunes each problem by running torch's own call for it
(``kernels/torch_gemm.py``, which records the same key) once with TunableOp enabled and tuning on. What
TunableOp chose is read back with ``torch.cuda.tunable.get_results()``, then timed against torch's default
call by the shared harness (interleaved, medians), so the winner must beat the default by the margin here
too (TunableOp itself keeps any candidate that is faster by any amount).

Settings passed through: rotating buffer (MiB; -1 = L2 size, torch's default), tuning iterations and
duration (per candidate, as torch counts them), and the numerical check. Candidates are what this torch
has: rocBLAS and hipBLASLt on ROCm; cuBLASLt on CUDA from torch 2.14; only ``Default`` on CUDA before 2.14,
which the runtime note says (use ``--backend cublaslt`` there).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from ..formats.tunableop import format_key
from ..kernels.torch_gemm import torch_launcher, with_tunableop
from ..problem import GemmProblem
from .base import DEFAULT, BackendBase, CandidateResult, ProblemResult, TuneSettings, WinnerRecord
from .measure import TimingSettings, interleaved, rotating_operands


def only_default_reason() -> str | None:
    """Why TunableOp can only pick ``Default`` with this torch (None when it has real candidates)."""
    if torch.version.hip is not None:
        return None
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 14):
        return (
            f"torch {torch.__version__} on CUDA gives TunableOp no candidate but Default (cuBLASLt candidates "
            "arrive in 2.14): every result is Default; tune with --backend cublaslt on this machine"
        )
    return None


class TunableOpBackend(BackendBase):
    name = "tunableop"

    def __init__(
        self,
        gpu: int = 0,
        iterations: int = 100,
        duration_ms: int = 30,
        rotating_mb: int = -1,
        numerical_check: bool = False,
        timing: TimingSettings | None = None,
    ) -> None:
        self.gpu = gpu
        self.device = torch.device("cuda", gpu)
        torch.cuda.set_device(self.device)
        self.timing = timing or TimingSettings()
        self.scratch = Path(tempfile.mkdtemp(prefix=f"tunableop-gpu{gpu}-"))
        tunable = torch.cuda.tunable
        tunable.set_filename(str(self.scratch / f"tunableop_results{gpu}.csv"), insert_device_ordinal=False)
        tunable.set_max_tuning_iterations(iterations)
        tunable.set_max_tuning_duration(duration_ms)
        tunable.set_rotating_buffer_size(rotating_mb)
        if numerical_check:
            tunable.set_numerical_check_tolerances(True)
        self.settings = {
            "iterations": iterations,
            "duration_ms": duration_ms,
            "rotating_mb": rotating_mb,
            "numerical_check": numerical_check,
        }

    def runtime(self) -> dict:
        props = torch.cuda.get_device_properties(self.device)
        return {
            "backend": self.name,
            "platform": "rocm" if torch.version.hip else "cuda",
            "pt_version": torch.__version__.split("+")[0],
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "tunableop_settings": self.settings,
            "validators": dict(torch.cuda.tunable.get_validators()),
            "note": only_default_reason(),
        }

    def tune_one(self, problem: GemmProblem, settings: TuneSettings) -> ProblemResult:
        tunable = torch.cuda.tunable
        sets = rotating_operands(problem, self.device, self.timing)
        default = torch_launcher(problem)
        tunable.enable(True)
        tunable.tuning_enable(True)
        try:
            default(sets[0])
            torch.cuda.synchronize(self.device)
        finally:
            tunable.tuning_enable(False)
            tunable.enable(False)
        key = format_key(problem)
        chosen = {(op, params): (solution, float(ms)) for op, params, solution, ms in tunable.get_results()}
        if key not in chosen:
            return ProblemResult(
                problem, errors=[f"TunableOp recorded no result for {','.join(key)}: torch keyed the call differently"]
            )
        solution, tuned_ms = chosen[key]
        stats = interleaved(problem, {"default": default, "tunableop": with_tunableop(default)}, sets, self.timing)
        result = ProblemResult(
            problem,
            default_us=stats["default"].median,
            winner_us=stats["default"].median,
            candidates=[CandidateResult(solution, screen_us=tuned_ms * 1000.0, final_us=stats["tunableop"].median)],
        )
        if solution != DEFAULT and stats["default"].median / stats["tunableop"].median >= 1 + settings.margin:
            result.crown(
                solution,
                stats["tunableop"].median,
                WinnerRecord({"SolutionNameMin": solution, "TunableOpMs": tuned_ms}),
            )
        del sets
        torch.cuda.empty_cache()
        return result

    def __del__(self) -> None:
        if getattr(self, "scratch", None) is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

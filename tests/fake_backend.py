"""Test double for a GPU tuner: deterministic results, an optional failing shape and an optional crash.

FAKE_BACKEND_CRASH_AFTER=N makes the worker process die (os._exit) after N problems, as a killed run would.
"""

from __future__ import annotations

import os

from pipeline.backends.base import DEFAULT, BackendBase, CandidateResult, ProblemResult, TuneSettings, WinnerRecord
from pipeline.problem import GemmProblem

WINNER = {
    "AlgoId": 66,
    "Tile": 20,
    "Stages": 8,
    "SplitK": 1,
    "ReductionScheme": 0,
    "Swizzle": 0,
    "CustomOption": 0,
    "InnerShape": 0,
    "ClusterShape": 0,
    "AlgoBytes": "42" * 64,
    "WorkspaceBytes": 0,
    "SolutionNameMin": "Gemm_Cublaslt_id_66_tile_20_stages_8_splitk_1_red_0_swizzle_0_custom_0",
}
FAILING_K = 777


class FakeBackend(BackendBase):
    name = "fake"

    def __init__(self, gpu: int) -> None:
        self.gpu, self.done = gpu, 0

    def runtime(self) -> dict:
        return {"name": "Fake GPU", "capability": "9.0", "pt_version": "2.11.0", "gpu": self.gpu}

    def unsupported_reason(self, problem: GemmProblem) -> str | None:
        return "wildcard key" if problem.is_wildcard else None

    def tune_one(self, problem: GemmProblem, settings: TuneSettings) -> ProblemResult:
        crash_after = int(os.environ.get("FAKE_BACKEND_CRASH_AFTER", "0"))
        if crash_after and self.done >= crash_after:
            os._exit(9)
        self.done += 1
        if problem.k == FAILING_K:
            raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED (fake)")
        default_us = 1.0 + problem.flops() / 5e8
        faster = problem.m % 3 == 0
        result = ProblemResult(problem, default_us=default_us, winner_us=default_us / 1.1 if faster else default_us)
        if faster:
            result.crown(WINNER["SolutionNameMin"], default_us / 1.1, WinnerRecord(dict(WINNER)))
        result.candidates = [
            CandidateResult(DEFAULT, final_us=default_us),
            CandidateResult(WINNER["SolutionNameMin"], final_us=default_us / 1.1, config=WINNER),
        ]
        return result

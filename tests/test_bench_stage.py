from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.backends.base import CACHED, CandidateResult, ProblemResult, TuneSettings, WinnerRecord, tune
from pipeline.backends.slots import VISIBLE_DEVICES, NoFreeGpu, amd_device_env, board, gpu_slot, one_gpu_env
from pipeline.errors import BadInput
from pipeline.formats.logic import load_logic
from pipeline.formats.tunableop import read_file
from pipeline.problem import GemmProblem
from pipeline.stages.bench.tune import BenchError, estimate_cost, result_path, run_shards, shard, write_outputs

from .fake_backend import FAILING_K, FakeBackend

FAKE = "tests.fake_backend:FakeBackend"  # the factory the workers call: the fake cuBLASLt backend


def _problems(*ks: int) -> list[GemmProblem]:
    return [GemmProblem("gemm", "T", "N", m, 128, k, k, k, m) for m in (4096, 6144) for k in ks]


@given(
    st.lists(st.tuples(st.sampled_from([1, 8, 512, 8192]), st.sampled_from([4096, 14336])), max_size=30, unique=True),
    st.integers(1, 8),
)
def test_shards_cover_every_problem_once_keep_a_weight_together_over_a_grid_and_balance(shapes, count):
    problems = [GemmProblem("gemm", "T", "N", m, n, k, k, k, m) for m in (4096, 6144) for n, k in shapes]
    apart = shard(problems, count)  # no grid: problem by problem, as even as the costliest one allows
    loads = [sum(estimate_cost(p) for p in s) for s in apart]
    assert not loads or max(loads) - min(loads) <= max(estimate_cost(p) for p in problems) + 1e-9
    shards = shard(problems, count, by_weight=True)
    assert sorted(p.sort_key() for s in shards for p in s) == sorted(p.sort_key() for p in problems)
    assert len(shards) <= count
    where = {p.token_family(): i for i, s in enumerate(shards) for p in s}
    assert all(where[p.token_family()] == i for i, s in enumerate(shards) for p in s), "a weight split"
    families = {p.token_family() for p in problems}
    unit = max((sum(estimate_cost(p) for p in problems if p.token_family() == f) for f in families), default=0)
    loads = [sum(estimate_cost(p) for p in s) for s in shards]
    if loads:
        assert max(loads) - min(loads) <= unit + 1e-9


def test_gpu_slots_are_exclusive(tmp_path):
    with gpu_slot(tmp_path, [0, 1]) as first, gpu_slot(tmp_path, [0, 1]) as second:
        assert {first, second} == {0, 1}
        with pytest.raises(NoFreeGpu, match="no free GPU among"), gpu_slot(tmp_path, [0, 1], wait_s=0.2):
            pass
    with gpu_slot(tmp_path, [1]) as again:
        assert again == 1


def test_a_shard_tries_its_own_gpu_first_so_shards_started_apart_still_take_one_board_each(tmp_path):
    """Validate's shard I of N tries ``gpus[I]`` first: shard 1 starting after shard 0 has ended (a loaded host;
    the GPU run of test_validate's two-GPU split caught both on board 0) still takes GPU 1."""
    with gpu_slot(tmp_path, [0, 1], first=0) as shard0:
        assert shard0 == 0
    with gpu_slot(tmp_path, [0, 1], first=1) as shard1:
        assert shard1 == 1
        with gpu_slot(tmp_path, [0, 1], first=1) as taken:  # its own is held: the next free one
            assert taken == 0
    with gpu_slot(tmp_path, [2, 5], first=3) as wrapped:  # more shards than GPUs wrap round
        assert wrapped == 5


@pytest.mark.parametrize(
    ("environ", "gpu", "name"),
    [
        ({}, 3, "3"),
        ({"CUDA_VISIBLE_DEVICES": "2,3"}, 1, "3"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-8f2c,GPU-11aa"}, 0, "GPU-8f2c"),
        ({"CUDA_VISIBLE_DEVICES": "MIG-GPU-8f2c/1/0"}, 0, "MIG-GPU-8f2c_1_0"),
        ({"CUDA_VISIBLE_DEVICES": "2"}, 1, "unlisted1"),
        ({"ROCR_VISIBLE_DEVICES": "4,5"}, 1, "5"),
        ({"ROCR_VISIBLE_DEVICES": "4,5,6", "HIP_VISIBLE_DEVICES": "2"}, 0, "6"),  # HIP indexes ROCR's boards
        ({"ROCR_VISIBLE_DEVICES": "4,5", "CUDA_VISIBLE_DEVICES": "1,0"}, 0, "5"),
        ({"HIP_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "1"}, 0, "3"),  # HIP's own variable first
    ],
)
def test_a_gpu_is_named_by_the_board_its_visibility_lists_give(environ, gpu, name):
    assert board(gpu, environ) == name


def test_runs_that_see_one_board_under_other_indices_share_its_slot(tmp_path, monkeypatch):
    for variable in VISIBLE_DEVICES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with gpu_slot(tmp_path, [0]) as seen:  # a run given board 1 alone, as its GPU 0
        assert seen == 0
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        with pytest.raises(NoFreeGpu), gpu_slot(tmp_path, [1], wait_s=0.2):  # board 1, seen as GPU 1
            pass
        with gpu_slot(tmp_path, [0]) as other:  # board 0 is free
            assert other == 0


def test_a_tool_pinned_to_one_gpu_is_shown_hips_entry_over_rocrs_boards():
    env = {"ROCR_VISIBLE_DEVICES": "2,3"}
    assert amd_device_env(1, env)["HIP_VISIBLE_DEVICES"] == "1", "HIP indexes the boards ROCR leaves"
    assert amd_device_env(1, {"HIP_VISIBLE_DEVICES": "5,7"})["HIP_VISIBLE_DEVICES"] == "7"
    assert amd_device_env(2, {})["HIP_VISIBLE_DEVICES"] == "2"
    assert one_gpu_env(1, {"CUDA_VISIBLE_DEVICES": "3,5"})["CUDA_VISIBLE_DEVICES"] == "5"
    shown = one_gpu_env(0, {"HIP_VISIBLE_DEVICES": "5,7", "ROCR_VISIBLE_DEVICES": "0,4"})
    assert shown["HIP_VISIBLE_DEVICES"] == "5" and shown["ROCR_VISIBLE_DEVICES"] == "0,4"
    assert one_gpu_env(1, {}) == {"CUDA_VISIBLE_DEVICES": "1"}
    with pytest.raises(BadInput, match="GPU 2 asked for, where the visible devices are 3,5"):  # never another board
        one_gpu_env(2, {"CUDA_VISIBLE_DEVICES": "3,5"})


def test_failing_problem_is_recorded_and_others_finish(tmp_path, monkeypatch):
    problems = _problems(4096, FAILING_K)
    seen = []
    run_shards(problems, tmp_path, [0, 1], TuneSettings(), FAKE, progress=lambda d, t: seen.append((d, t)))
    assert all(result_path(tmp_path, p).exists() for p in problems)
    summary = write_outputs(problems, tmp_path)
    assert summary["tuned"] == 2 and len(summary["errors"]) == 2
    assert "CUBLAS_STATUS_NOT_SUPPORTED (fake)" in summary["errors"][0]["error"]
    rows = read_file(tmp_path / "tunableop_results.csv")
    assert {e.problem.k for e in rows.entries} == {4096}
    assert rows.validators == {"PT_VERSION": "2.11.0"}
    logic = load_logic(tmp_path / "logic" / "cublaslt_Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml")
    assert logic.data[1] == "cublaslt" and logic.data[2] == "sm_90"
    assert [row[0] for row in logic.exact_logic] == [[6144, 128, 1, 4096]]
    assert json.loads((tmp_path / "summary.json").read_text())["improved"] == 1


def test_interrupted_shard_resumes_without_redoing_finished_problems(tmp_path, monkeypatch):
    problems = _problems(4096, 8192, 14336)
    monkeypatch.setenv("FAKE_BACKEND_CRASH_AFTER", "1")
    with pytest.raises(BenchError, match="4 problems have no result; rerun to resume") as err:
        run_shards(problems, tmp_path, [0, 1], TuneSettings(), FAKE)
    assert "worker exited with code 9" in str(err.value)
    done = {p: result_path(tmp_path, p).stat().st_mtime_ns for p in problems if result_path(tmp_path, p).exists()}
    assert len(done) == 2
    monkeypatch.delenv("FAKE_BACKEND_CRASH_AFTER")
    run_shards(problems, tmp_path, [0, 1], TuneSettings(), FAKE)
    assert all(result_path(tmp_path, p).exists() for p in problems)
    assert all(result_path(tmp_path, p).stat().st_mtime_ns == mtime for p, mtime in done.items())
    log = "".join(f.read_text() for f in (tmp_path / "shards").glob("*.log"))
    assert log.count("gemm ") == 4, "the rerun tuned only the four problems left"


def test_every_backend_returns_one_winner_record_and_old_results_still_read():
    """The winner's record is typed (the logic's solution fields apart from the override rows, their source and
    the library's git version), survives JSON, and a result written with the flat ``winner_config`` of earlier
    runs (the tuned cache keeps them across stacks) reads into the same record."""
    problem = _problems(4096)[0]
    solution = {"SolutionIndex": 7, "SolutionNameMin": "Cijk_x", "HeuristicSolutionIndex": 100}
    result = ProblemResult(problem, default_us=12.0, winner_us=12.0)
    assert not result.has_winner
    result.crown("Gemm_Hipblaslt_7", 10.0, WinnerRecord(solution, "row\n", "legacy layout", "de5c1aebb6"))
    assert result.has_winner and result.speedup == pytest.approx(1.2)
    again = ProblemResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.record == result.record and again.winner == "Gemm_Hipblaslt_7"
    legacy = {**result.to_json(), "record": None}
    legacy["winner_config"] = {**solution, "OverrideRows": "row\n", "OverrideSource": "legacy layout"}
    legacy["winner_config"]["GitVersion"] = "de5c1aebb6"
    assert ProblemResult.from_json(legacy).record == result.record
    del legacy["record"]
    assert ProblemResult.from_json(legacy).record.solution == solution, "the override fields stay out of the logic"
    errored = ProblemResult.from_json({**result.to_json(), "errors": ["bench died"]})
    assert not errored.has_winner, "a result with errors has no winner to ship"


class _Searches(FakeBackend):
    """The fake backend, counting its searches, with or without a way to re-time a winner."""

    def __init__(self, gpu: int, speedup: float | None) -> None:
        super().__init__(gpu)
        self.speedup, self.searches = speedup, 0

    def tune_one(self, problem, settings):
        self.searches += 1
        return super().tune_one(problem, settings)

    def retime(self, previous, settings, report=True):
        if self.speedup is None:
            return None  # as a backend without re-timing (TunableOp's) answers
        again = ProblemResult(previous.problem, default_us=10.0, winner_us=10.0)
        again.candidates = [CandidateResult(previous.winner, final_us=10.0 / self.speedup)]
        if self.speedup >= 1.02:
            again.crown(previous.winner, 10.0 / self.speedup, previous.record)
        return again


@pytest.mark.parametrize(
    ("speedup", "source", "origin", "searches"),
    [
        (1.05, CACHED, "retimed: the cached winner still wins (x1.050)", 0),
        (1.00, CACHED, "retuned: the cached winner W no longer wins (x1.000 under this stack)", 1),
        (None, CACHED, "cache (not re-timed: the fake backend cannot re-time a winner)", 0),
        (None, "rocm-gfx942-abc", "retuned: the rocm-gfx942-abc winner W no longer wins ()", 1),
    ],
)
def test_a_cached_winner_is_retimed_kept_where_it_cannot_be_and_searched_where_it_lost(
    speedup, source, origin, searches
):
    problem = _problems(4096)[0]
    prior = ProblemResult(problem, default_us=10.0, winner_us=8.0, winner="W", record=WinnerRecord({"AlgoId": 1}))
    backend = _Searches(0, speedup)
    [result] = tune(backend, [problem], TuneSettings(), {problem: prior}, {problem: source})
    assert (result.origin, backend.searches) == (origin, searches)
    if speedup is None and source == CACHED:
        assert (result.winner, result.winner_us) == ("W", 8.0), "the cached figure, as it was"
    elif speedup == 1.05:
        assert result.winner == "W" and result.speedup == pytest.approx(1.05), "this run's figure"

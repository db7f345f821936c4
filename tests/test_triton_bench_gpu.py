"""Bench with ``--triton`` on the GPU (docs/triton.md): the project's Triton kernels join the cuBLASLt pool,
compile in parallel into the keyed cache, send their best to the finalists beside the library's, and a Triton
winner is checked element by element, re-timed and rebuilt from its saved config."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from pipeline.backends.base import ProblemResult, TuneSettings, WinnerRecord
from pipeline.kernels import triton_gemm as tg
from pipeline.kernels import triton_runner as tr
from pipeline.problem import GemmProblem

from .helpers import nvmath_gpu_marks

pytestmark = [
    *nvmath_gpu_marks("Bench with Triton candidates"),
    pytest.mark.gpu_untimed,  # tunes, but asserts nothing on the times it measures
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
]

GATE_UP = GemmProblem("gemm", "T", "N", 28672, 1, 4096, 4096, 4096, 28672)  # Llama-3-8B gate/up at T = 1


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from pipeline.backends.cublaslt import CublasLtBackend

    cache = tmp_path_factory.mktemp("triton-cache")
    return CublasLtBackend(0, triton_cache=str(cache)), cache


def test_triton_configs_join_the_pool_and_a_winner_carries_its_figures(backend):
    b, cache = backend
    result = b.tune_one(GATE_UP, TuneSettings(time_budget_s=3))
    own = [c for c in result.candidates if c.name.startswith("triton_")]
    assert len(own) == len(tg.configs(GATE_UP, b.sms)) and all(c.config["source"] == "triton" for c in own)
    assert result.phases["triton_compile_s"] > 0
    assert [c for c in own if c.screen_us], "the compiled configs are screened"
    assert [c for c in own if c.final_us], "the best Triton configs meet the library's finalists"
    where = Path(os.environ["TRITON_CACHE_DIR"])
    assert where.parent == cache and json.loads((where / "key.json").read_text()) == b.triton_key()
    assert any(where.rglob("*.cubin")), "the kernels were compiled into the keyed cache"
    if result.winner.startswith("triton_"):
        figures = result.record.solution["numerics"]
        assert figures["beyond_fraction"] <= 1e-3 and 0 < figures["relative_error"] <= figures["tolerance"]
        assert result.numerics[result.winner] == figures["relative_error"]
    print(f"\n{result.winner} x{result.speedup or 1:.3f}, phases {result.phases}")


def test_a_saved_triton_winner_is_retimed_and_rebuilt_from_its_config(backend):
    import torch

    from pipeline.backends.measure import TimingSettings, check_numerics, rotating_operands
    from pipeline.kernels.torch_gemm import reference

    b, _ = backend
    config = tg.configs(GATE_UP, b.sms)[0]
    previous = ProblemResult(GATE_UP, winner=config.name, record=WinnerRecord(config.to_json()))
    result = b.retime(previous, TuneSettings())
    (candidate,) = result.candidates
    assert candidate.final_us > 0 and result.default_us > 0
    figures = candidate.config["numerics"]
    assert figures["beyond_fraction"] <= 1e-3 and figures["max_element_error"] > 0
    launch, closer = b.launcher_for(GATE_UP, config.to_json(), torch.empty(0, device="cuda"))
    assert closer is None
    ops = rotating_operands(GATE_UP, torch.device("cuda"), TimingSettings())[0]
    assert 0 < check_numerics(GATE_UP, launch, ops, reference(GATE_UP, ops)) <= 1e-2


def test_a_triton_grid_winner_is_scored_at_its_buckets_counts_each_checked_at_its_own_size(backend):
    """A tiled winner at the grid point M = 32, bucket 17..32 (docs/serving.md): Bench re-times it at the lower
    edge, the middle and one below, each compiled and checked against the fp32 reference at that size (0 where
    it could not run there: none)."""
    from pipeline.stages.bench import bucket_score

    b, _ = backend
    grid = GATE_UP.with_tokens(32)
    config = next(c for c in tg.configs(grid, b.sms) if c.family == "tiled")
    assert tg.serves_range(config.name, 17, 32)
    first = b.retime(ProblemResult(grid, winner=config.name, record=WinnerRecord(config.to_json())), TuneSettings())
    first.crown(config.name, first.candidates[0].final_us, WinnerRecord(config.to_json()))
    scored = bucket_score.score(b, first, (17, 32), TuneSettings())
    counts = sorted(map(int, scored.bucket["speedups"]))  # more inside where it lost (``NARROWING_PROBES``)
    assert {17, 24, 31, 32} <= set(counts) and len(counts) <= 4 + bucket_score.NARROWING_PROBES
    assert all(17 <= m <= 32 for m in counts) and scored.bucket["serves_from"] in (17, *counts)
    assert all(s > 0 for s in scored.bucket["speedups"].values()), scored.bucket
    print(f"\n{config.name} over 17..32: {scored.bucket['speedups']}")


def test_a_fixed_size_winner_keeps_its_grid_point_or_gives_way_to_a_finalist_serving_the_whole_bucket(backend):
    """A ``swapped`` winner at 16 tokens, bucket 9..16, beside a ``skinny`` finalist (docs/serving.md, the tie):
    its twin (``swapped_range``) and the finalist are tried in that order, re-timed at the grid point on the
    device; either the winner stays, serving 16 alone (the first of them that holds x0.99 over 9..15, crowned at
    15, serving it below), or one of them takes its place and holds x0.99 at every count scored."""
    from pipeline.backends.base import DEFAULT, CandidateResult
    from pipeline.stages.bench import bucket_score

    b, _ = backend
    grid = GATE_UP.with_tokens(16)
    offered = tg.configs(grid, b.sms)
    swapped = next(c for c in offered if c.family == "swapped")
    skinny = next(c for c in offered if c.family == "skinny" and c.split_k == 1)
    twin = tg.ranged_twin(swapped.name)
    first = b.retime(ProblemResult(grid, winner=swapped.name, record=WinnerRecord(swapped.to_json())), TuneSettings())
    result = ProblemResult(grid, default_us=first.default_us)
    result.crown(swapped.name, first.candidates[0].final_us, WinnerRecord(swapped.to_json()))
    result.candidates = [
        CandidateResult(DEFAULT, final_us=first.default_us),
        CandidateResult(swapped.name, final_us=first.candidates[0].final_us, config=swapped.to_json()),
        CandidateResult(skinny.name, final_us=first.candidates[0].final_us * 1.001, config=skinny.to_json()),
    ]
    scored = bucket_score.score(b, result, (9, 16), TuneSettings())
    if scored.winner == swapped.name:
        below = bucket_score.rows_below([scored])
        assert scored.bucket == {} or [r.problem.n for r in below] == [15]
        for row in below:
            assert row.winner in (twin.name, skinny.name) and row.bucket["tried"][0]["name"] == twin.name
            assert row.bucket["lo"] == 9 and row.bucket["worst"] >= bucket_score.FLOOR, row.bucket
            assert row.numerics.get(row.winner) is not None, "checked at its own size"
    else:
        assert scored.winner in (twin.name, skinny.name) and tg.serves_range(scored.winner, 9, 16)
        assert scored.bucket["worst"] >= bucket_score.FLOOR and scored.bucket["serves_from"] == 9, scored.bucket
    print(f"\n{scored.winner}: {scored.bucket or 'serves 16 alone'}")


def test_the_verdict_rebuilds_a_triton_finalist_from_its_config(backend):
    from pipeline.backends.cublaslt import REPORT_SEED, VERDICT_SEED

    b, _ = backend
    config = tg.configs(GATE_UP, b.sms)[-1]
    readings = [
        b._verdict(GATE_UP, config.to_json(), config.name, TuneSettings().workspace_bytes, seed)
        for seed in (VERDICT_SEED, REPORT_SEED)
    ]
    for verdict in readings:
        assert 0 < verdict.default_us < float("inf") and 0 < verdict.winner_us < float("inf")
        assert 0 < verdict.low <= verdict.speedup, "a lower bound of the speedup"
    assert readings[0] != readings[1], "the report is a reading of its own, on other operands"


def test_a_problem_the_kernels_do_not_serve_is_left_to_the_library_with_the_reason(backend):
    b, _ = backend
    problem = GemmProblem("gemm", "N", "N", 1024, 8, 1024, 1024, 1024, 1024)
    result = b.tune_one(problem, TuneSettings(time_budget_s=1))
    assert not [c for c in result.candidates if c.name.startswith("triton_")]
    (note,) = [c for c in result.candidates if c.name == "triton"]
    assert note.error == f"not served: {tg.serves(problem)}" and "layout NN" in note.error


def test_a_config_that_fails_to_compile_fails_alone():
    import torch

    from pipeline.backends.measure import TimingSettings, rotating_operands
    from pipeline.backends.pool import compile_all

    problem = GemmProblem("gemm", "T", "N", 4096, 512, 4096, 4096, 4096, 4096)
    good, too_big = tg.TritonConfig(64, 128, 64), tg.TritonConfig(256, 256, 256, num_warps=4, num_stages=6)
    ops = rotating_operands(problem, torch.device("cuda"), TimingSettings())[0]
    failed = compile_all({c.name: tr.launcher(problem, c) for c in (good, too_big)}, ops)
    assert list(failed) == [too_big.name] and isinstance(failed[too_big.name], Exception)


def test_bench_compiles_on_a_thread_a_cpu_at_most_sixteen(monkeypatch):
    from pipeline.backends import pool

    for cpus, threads in ((1, 1), (2, 2), (12, 12), (16, 16), (128, 16)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        assert pool.compile_threads() == threads

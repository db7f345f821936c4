from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given

from pipeline.problem import GemmProblem

from .strategies import problems


def test_flops_and_layout():
    problem = GemmProblem("gemm_strided_batched", "N", "N", 128, 128, 64, 128, 64, 128, batch=8)
    assert problem.layout == "NN"
    assert problem.flops() == 2 * 128 * 128 * 64 * 8


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"op": "gemv"}, "unknown op kind 'gemv'"),
        ({"transa": "n"}, "transa must be 'N' or 'T'"),
        ({"m": 0}, "m must be a positive integer"),
        ({"k": True}, "k must be a positive integer"),
        ({"batch": 2}, "batch 2 on a gemm"),
        ({"lda": 4096, "ldb": None, "ldc": None}, "recorded together"),
        ({"a_type": "int8"}, "unknown a_type 'int8'"),
        ({"compute_type": "float16"}, "unknown compute_type 'float16'"),
        ({"rowwise": True}, "belong to scaled_gemm"),
    ],
)
def test_invalid_problems_say_why(fields, message):
    base = {
        "op": "gemm",
        "transa": "T",
        "transb": "N",
        "m": 6144,
        "n": 128,
        "k": 4096,
        "lda": 4096,
        "ldb": 4096,
        "ldc": 6144,
    }
    with pytest.raises(ValueError, match=message):
        GemmProblem(**{**base, **fields})


@given(problems())
def test_dict_round_trip_and_sort_key(problem):
    assert GemmProblem.from_dict(problem.to_dict()) == problem
    key = problem.sort_key()
    assert key == GemmProblem.from_dict(problem.to_dict()).sort_key()
    if isinstance(problem.m, int):  # the order is by value: a larger M sorts after
        assert key < dataclasses.replace(problem, m=problem.m + 1).sort_key()


def test_lds_under_the_row_count_are_kept_and_raised_only_for_blas():
    """torch records ld = 1 for one-column operands (HF rotary outer products): valid keys, not errors."""
    outer = GemmProblem("gemm", "T", "N", 64, 1, 1, 1, 1, 1, a_type="float32", b_type="float32", c_type="float32")
    assert (outer.lda, outer.ldb, outer.ldc) == (1, 1, 1)
    assert outer.stored_rows() == (1, 1, 64)
    assert outer.blas_lds() == (1, 1, 64)
    assert outer.ld_notes() == ["ldc=1 < 64 rows: raised to 64 for BLAS"]
    decode = GemmProblem("gemm", "T", "N", 4096, 1, 4096, 4096, 0, 4096)  # compiled decode at batch 1
    assert decode.blas_lds() == (4096, 4096, 4096)
    assert decode.ld_notes() == ["ldb=0 < 4096 rows: raised to 4096 for BLAS"]
    with pytest.raises(ValueError, match="ldb must be a non-negative integer"):
        GemmProblem("gemm", "T", "N", 4096, 1, 4096, 4096, -1, 4096)
    packed = GemmProblem("gemm", "T", "N", 6144, 128, 4096, 4096, 4096, 6144)
    assert packed.blas_lds() == (4096, 4096, 6144) and packed.ld_notes() == []
    legacy = GemmProblem("gemm", "N", "T", 64, 32, 16)  # torch 2.6: no ld's recorded
    assert legacy.blas_lds() == (64, 32, 64) and legacy.ld_notes() == []
    with pytest.raises(ValueError, match="wildcard"):
        GemmProblem("gemm", "T", "N", "*", 8, 8, "*", 8, 8).blas_lds()

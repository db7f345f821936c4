from __future__ import annotations

import pytest
from hypothesis import given

from pipeline.problem import GemmProblem

from .strategies import problems


def test_flops_and_layout():
    problem = GemmProblem("gemm_strided_batched", "N", "N", 128, 128, 64, 128, 64, 128, batch=8)
    assert problem.layout == "NN"
    assert problem.flops() == 2 * 128 * 128 * 64 * 8


@pytest.mark.parametrize(("fields", "message"), [
    ({"op": "gemv"}, "unknown op kind 'gemv'"),
    ({"transa": "n"}, "transa must be 'N' or 'T'"),
    ({"m": 0}, "m must be a positive integer"),
    ({"k": True}, "k must be a positive integer"),
    ({"batch": 2}, "batch 2 on a gemm"),
    ({"lda": 4096, "ldb": None, "ldc": None}, "recorded together"),
    ({"lda": 4095}, "lda=4095 is smaller than the 4096 rows"),
    ({"ldc": 6000}, "ldc=6000 is smaller than the 6144 rows"),
    ({"a_type": "int8"}, "unknown a_type 'int8'"),
    ({"compute_type": "float16"}, "unknown compute_type 'float16'"),
    ({"rowwise": True}, "belong to scaled_gemm"),
])
def test_invalid_problems_say_why(fields, message):
    base = {"op": "gemm", "transa": "T", "transb": "N", "m": 6144, "n": 128, "k": 4096,
            "lda": 4096, "ldb": 4096, "ldc": 6144}
    with pytest.raises(ValueError, match=message):
        GemmProblem(**{**base, **fields})


@given(problems())
def test_dict_round_trip_and_sort_key(problem):
    assert GemmProblem.from_dict(problem.to_dict()) == problem
    assert isinstance(problem.sort_key(), tuple)

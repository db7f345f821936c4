from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.formats.rocm import UnknownArchError
from pipeline.problem import GemmProblem
from pipeline.stages.configs.padding import PaddingRule, pad_problem, plan_padding, rule_for_arch

SIZES = st.sampled_from([1, 2, 4, 8])  # fp8, f16/bf16, f32, f64
RULES = st.builds(
    PaddingRule,
    period_bytes=st.sampled_from([128, 256, 512, 1024]),
    pad_elements=st.sampled_from([8, 32, 64, 128, 256]),
)


@given(st.integers(1, 1 << 20), SIZES, RULES)
def test_never_pads_a_dimension_that_is_not_a_multiple(ld, size, rule):
    if (ld * size) % rule.period_bytes:
        assert rule.pad_for(ld, size) == 0


@given(st.integers(1, 1 << 14), SIZES, RULES)
def test_padded_value_is_never_a_multiple_and_the_pad_is_the_smallest(multiple, size, rule):
    ld = multiple * rule.period_bytes // size if rule.period_bytes % size == 0 else multiple * rule.period_bytes
    assert (ld * size) % rule.period_bytes == 0
    pad = rule.pad_for(ld, size)
    unit = rule.pad_unit(size)
    assert pad > 0 and pad % unit == 0
    assert ((ld + pad) * size) % rule.period_bytes != 0
    smallest = next(q for q in range(unit, 1025 * unit, unit) if ((ld + q) * size) % rule.period_bytes)
    assert pad == smallest, "the least multiple of the unit that moves the ld off the period"
    assert unit == 1 or (unit * size) % rule.period_bytes, "a unit that is a whole period would never move it"
    if (rule.pad_elements * size) % rule.period_bytes:
        assert unit == rule.pad_elements, "the configured pad is used whenever it works"


def test_rocm_guide_example_f16_tn():
    rule = PaddingRule()
    for k in (4096, 11008, 14336, 256):
        problem = GemmProblem(
            "gemm", "T", "N", 6144, 128, k, k, k, 6144, a_type="float16", b_type="float16", c_type="float16"
        )
        padded = pad_problem(problem, rule)
        assert (padded.problem.lda, padded.problem.ldb, padded.problem.ldc) == (k + 128, k + 128, 6144)
        assert padded.original == problem
    odd = GemmProblem(
        "gemm", "T", "N", 6144, 128, 4000, 4000, 4000, 6144, a_type="float16", b_type="float16", c_type="float16"
    )
    assert pad_problem(odd, rule) is None  # 4000 % 256 != 0


@pytest.mark.parametrize(
    ("dtype", "pad"), [("float32", 64), ("float64", 32), ("float8_e4m3fn", 128), ("bfloat16", 128)]
)
def test_pad_unit_per_element_size(dtype, pad):
    problem = GemmProblem(
        "gemm",
        "N",
        "N",
        4096,
        64,
        4096,
        4096,
        4096,
        4096,
        a_type=dtype,
        b_type=dtype,
        c_type="bfloat16" if dtype.startswith("float8") else dtype,
    )
    op = "scaled_gemm" if dtype.startswith("float8") else "gemm"
    padded = pad_problem(GemmProblem(**{**problem.to_dict(), "op": op}), PaddingRule())
    assert padded.problem.lda == 4096 + pad
    assert padded.reasons[0].startswith("lda 4096 x ") and f"padded by {pad} to {4096 + pad}" in padded.reasons[0]


def test_operands_setting_and_reasons():
    problem = GemmProblem("gemm", "T", "N", 4096, 128, 4096, 4096, 4096, 4096)
    only_c = pad_problem(problem, PaddingRule(operands=("c",)))
    assert (only_c.problem.lda, only_c.problem.ldc) == (4096, 4224)
    assert only_c.reasons == ("ldc 4096 x 2 B = 8192 B is a multiple of 512 B: padded by 128 to 4224",)
    torch26 = GemmProblem("gemm", "T", "N", 4096, 128, 4096)
    assert pad_problem(torch26, PaddingRule()).problem.lda == 4224  # packed ld's are derived first
    with pytest.raises(ValueError, match="unknown operands"):
        PaddingRule(operands=("d",))


def test_plan_and_arch_rules():
    problems = [
        GemmProblem("gemm", "T", "N", 4096, 128, 4096, 4096, 4096, 4096),
        GemmProblem("gemm", "T", "N", 4096, 128, 4000, 4000, 4000, 4096),
        GemmProblem("gemm", "T", "N", 4096, "*", 4096, 4096, 4096, 4096),
    ]
    assert [p.original for p in plan_padding(problems, rule_for_arch("gfx942"))] == problems[:1]
    assert rule_for_arch("gfx90a") is None and plan_padding(problems, None) == []
    with pytest.raises(UnknownArchError):
        rule_for_arch("sm_90")

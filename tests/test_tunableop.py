from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.formats.tunableop import (
    TunableOpEntry,
    TunableOpFormatError,
    format_file,
    format_key,
    parse_key,
    parse_text,
    read_file,
    write_file,
)
from pipeline.problem import GemmProblem

from .helpers import FIXTURES, TUNABLEOP_FIXTURES
from .strategies import entries, problems, validators


@pytest.mark.parametrize("path", TUNABLEOP_FIXTURES, ids=lambda p: p.name)
def test_fixture_round_trips_byte_for_byte(path, tmp_path):
    parsed = read_file(path)
    assert parsed.entries, "every fixture holds GEMM rows"
    out = tmp_path / path.name
    write_file(out, parsed.validators, parsed.entries)
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", TUNABLEOP_FIXTURES, ids=lambda p: p.name)
def test_fixture_keys_are_canonical(path):
    for entry in read_file(path).entries:
        if "_Float_" in entry.op_signature:
            # torch >= 2.14 accepts the at::toString spelling; we always write TypeName's "float"
            assert format_key(entry.problem)[0] == entry.op_signature.replace("_Float_", "_float_")
            continue
        assert format_key(entry.problem) == (entry.op_signature, entry.params_signature)


def test_blas_frame_of_recorded_h100_lines():
    """The four lines recorded on the H100 (measured on the H100, bench/README.md) in the BLAS frame."""
    lines = read_file(FIXTURES / "tunableop" / "torch2.11_cuda_untuned0.csv").entries
    linear_bias, bmm, linear, matmul = (e.problem for e in lines)
    # nn.Linear(4096, 11008) with bias on x[64, 4096]: m = out features, n = tokens, A = the weight (T)
    assert (linear_bias.op, linear_bias.layout, linear_bias.m, linear_bias.n, linear_bias.k) == (
        "gemm_and_bias",
        "TN",
        11008,
        64,
        4096,
    )
    assert (linear_bias.lda, linear_bias.ldb, linear_bias.ldc) == (4096, 4096, 11008)
    assert linear_bias.a_type == linear_bias.c_type == "bfloat16"
    assert (bmm.op, bmm.batch, bmm.m, bmm.n, bmm.k) == ("gemm_strided_batched", 8, 128, 128, 64)
    assert (linear.a_type, linear.m, linear.n, linear.k) == ("float16", 4096, 64, 11008)
    # [128, 256] @ [256, 512] in float: m = N_torch = 512, n = M_torch = 128
    assert (matmul.a_type, matmul.compute_type, matmul.layout, matmul.m, matmul.n, matmul.k) == (
        "float32",
        "float32",
        "NN",
        512,
        128,
        256,
    )
    assert all(e.solution is None and e.time_ms is None for e in lines)


def test_versions_and_special_forms():
    old = read_file(FIXTURES / "tunableop" / "torch2.6_rocm_results.csv")
    assert old.validators["ROCM_VERSION"] == "6.2.41133-dd7f95766"
    assert all(e.problem.lda is None for e in old.entries)
    assert [e.solution for e in old.entries[:2]] == ["Gemm_Hipblaslt_TN_572", "Gemm_Rocblas_-61"]
    complex_row = old.entries[-1].problem
    assert (complex_row.a_type, complex_row.compute_type) == ("complex64", "complex64")

    rocm = read_file(FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv")
    assert list(rocm.validators) == [
        "PT_VERSION",
        "HIP_VERSION",
        "GCN_ARCH_NAME",
        "ROCBLAS_VERSION",
        "HIPBLASLT_VERSION",
    ]
    by_op = {e.op_signature: e for e in rocm.entries}
    padded = rocm.entries[0].problem
    assert (padded.lda, padded.ldb, padded.k) == (4224, 4224, 4096)
    assert by_op["GemmTunableOp_tf32_NN"].problem.compute_type == "tf32"
    blas = by_op["GemmAndBiasTunableOp_Half_TN"]
    assert blas.time_ms == 0.05 and blas.blas_params.startswith("BLAS_PARAMS: - { function: matmul, M: 11008,")
    assert blas.blas_params.endswith("compute_type: c_f32_r }")
    rowwise = by_op["ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN"].problem
    assert (rowwise.rowwise, rowwise.bias_type, rowwise.c_type) == (True, "bfloat16", "bfloat16")
    no_time = by_op["GemmTunableOp_BFloat16_NT"]
    assert no_time.time_text is None and no_time.time_ms == 0.0  # torch reads a missing time as 0

    new = read_file(FIXTURES / "tunableop" / "torch2.15_cuda_results0.csv").entries
    assert new[0].problem.compute_suffix == "bf16x9_r"
    assert new[1].problem.n == "*" and new[1].problem.is_wildcard and new[1].problem.flops() == 0
    assert new[2].problem.batch == "*"
    long_form = new[4].problem
    assert (long_form.scale_a_type, long_form.scale_a_recipe, long_form.fast_accum, long_form.output_scale) == (
        "float32",
        0,
        True,
        False,
    )
    assert (new[5].problem.b_type, new[5].problem.c_type, new[5].problem.bias_type) == (
        "float8_e5m2",
        "float32",
        "bfloat16",
    )
    swz = read_file(FIXTURES / "tunableop" / "torch2.15_rocm_results0.csv").entries[0].problem
    assert swz.swizzle == ("1", "1") and swz.rowwise is False


@settings(max_examples=300)
@given(problems())
def test_key_round_trip_property(problem):
    assert parse_key(*format_key(problem)) == problem


@settings(max_examples=100)
@given(validators, st.lists(entries(results=True), max_size=8))
def test_results_text_round_trip_property(vals, rows):
    text = format_file(vals, rows)
    parsed = parse_text(text)
    assert parsed.validators == vals
    assert [e.problem for e in parsed.entries] == [e.problem for e in rows]
    assert format_file(parsed.validators, parsed.entries) == text


@settings(max_examples=50)
@given(st.lists(entries(results=False), max_size=8))
def test_untuned_text_round_trip_property(rows):
    text = format_file({}, rows)
    parsed = parse_text(text)
    assert not parsed.is_results or not rows
    assert all(e.solution is None for e in parsed.entries)
    assert format_file({}, parsed.entries) == text


def test_from_problem_formats_time_and_key():
    problem = GemmProblem("gemm", "T", "N", 6144, 128, 4096, 4096, 4096, 6144)
    entry = TunableOpEntry.from_problem(problem, "Default", 0.01871234567)
    assert entry.to_line() == "GemmTunableOp_BFloat16_TN,tn_6144_128_4096_ld_4096_4096_6144,Default,0.0187123"


def test_blank_and_crlf_lines_are_read():
    text = "Validator,PT_VERSION,2.11.0\r\n\r\nGemmTunableOp_Half_TN,tn_8_8_8_ld_8_8_8,Default,0.1\r\n"
    parsed = parse_text(text)
    assert parsed.validators == {"PT_VERSION": "2.11.0"} and len(parsed.entries) == 1


_OK = "tn_8_8_8_ld_8_8_8"
_SCALED = "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN"
MALFORMED = [
    ("FooTunableOp_Half_TN,tn_8_8_8", "unknown op 'FooTunableOp'"),
    ("GemmTunableOp_Int8_TN,tn_8_8_8", "dtype 'Int8' of GemmTunableOp"),
    ("GemmTunableOp_Half_XN,xn_8_8_8", "layout 'XN'"),
    ("GemmTunableOp_Half_TN", "expected at least <op signature>,<params signature>"),
    ("GemmTunableOp_Half_TN,nn_8_8_8_ld_8_8_8", "params layout 'nn' does not match op layout 'TN'"),
    ("GemmTunableOp_Half_TN,tn_8_x_8_ld_8_8_8", "n 'x' is not a positive integer"),
    ("GemmTunableOp_Half_TN,tn_0_8_8_ld_8_8_8", "m '0' is not a positive integer"),
    ("GemmTunableOp_Half_TN,tn_08_8_8_ld_8_8_8", "m '08' is not a positive integer"),
    ("GemmTunableOp_Half_TN,tn_8_8_8_ld_8_00_8", "ldb '00' is not a non-negative integer"),
    ("GemmTunableOp_Half_TN,tn_8_8_8_ld_8_8", "is not _ld_LDA_LDB_LDC"),
    ("GemmTunableOp_Half_TN,tn_8_8_8_B_2_ld_8_8_8", "_B_<batch> on a non-batched op"),
    ("GemmStridedBatchedTunableOp_Half_NN,nn_8_8_8_ld_8_8_8", "needs _B_<batch>"),
    (f"{_SCALED},{_OK}", "scaled GEMM params end ''"),
    (f"GemmTunableOp_Half_TN,{_OK}_rw_1_bias_None", "unexpected '_rw_1_bias_None'"),
    (f"{_SCALED},{_OK}_rw_2_bias_None", "neither _rw_<0|1>_bias_<dt>"),
    (f"{_SCALED},{_OK}_rw_1_bias_Int", "neither _rw_<0|1>_bias_<dt>"),
    (
        f"{_SCALED},{_OK}_a_Half_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float_ast_0_bst_0_dscale_0_fast_0_bias_None",
        "params a_Half disagrees with the op signature's float8_e4m3fn",
    ),
    (f"GemmTunableOp_Half_TN,{_OK}_xyz", "unexpected '_xyz'"),
    (f"GemmTunableOp_Half_TN,{_OK},Default,fast", "time 'fast' is not a number"),
    (f"GemmTunableOp_Half_TN,{_OK},Default,-1", "must be a finite, non-negative number"),
    (f"GemmTunableOp_Half_TN,{_OK},Default,nan", "must be a finite, non-negative number"),
    (f"GemmTunableOp_Half_TN,{_OK},,0.1", "solution name '' is empty"),
    (f"GemmTunableOp_Half_TN,{_OK},Default,0.1,extra", "unexpected field 'extra'"),
    ("Validator,PT_VERSION", "Validator,<KEY>,<VALUE>"),
    ("Validator,PT_VERSION,2.11.0\nValidator,PT_VERSION,2.12.0", "validator PT_VERSION given twice"),
    ("# a comment,x", "is not <Op>TunableOp_<dtype>_<layout>"),
    ("GemmTunableOp_Half_TN tn_8_8_8", "expected at least"),
]


@pytest.mark.parametrize(("text", "reason"), MALFORMED, ids=[r for _, r in MALFORMED])
def test_malformed_line_names_file_and_line(text, reason, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(f"GemmTunableOp_Half_TN,{_OK}\n{text}\n")
    line = 2 + text.count("\n")
    with pytest.raises(TunableOpFormatError) as err:
        read_file(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert reason in str(err.value)


def test_lenient_skips_counts_and_keeps_good_lines(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(
        "\n".join([f"GemmTunableOp_Half_TN,{_OK}"] + [t for t, _ in MALFORMED] + [f"GemmTunableOp_BFloat16_TN,{_OK}"])
        + "\n"
    )
    parsed = read_file(path, lenient=True)
    assert [e.op_signature for e in parsed.entries] == ["GemmTunableOp_Half_TN", "GemmTunableOp_BFloat16_TN"]
    # the first of the two PT_VERSION lines is good; every other malformed line is skipped and listed
    assert parsed.validators == {"PT_VERSION": "2.11.0"}
    assert len(parsed.skipped) == len(MALFORMED)
    assert str(parsed.skipped[0]) == f"{path}:2: unknown op 'FooTunableOp'; known: " + ", ".join(
        ["GemmTunableOp", "GemmAndBiasTunableOp", "GemmStridedBatchedTunableOp", "ScaledGemmTunableOp"]
    )


def test_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "binary.csv"
    path.write_bytes(b"GemmTunableOp_Half_TN,tn_8_8_8\nGemmTunableOp_Half_TN,tn_8_8_\xff8\n")
    with pytest.raises(TunableOpFormatError, match=r"binary.csv:2: not UTF-8"):
        read_file(path)
    assert len(read_file(path, lenient=True).skipped) == 1


@pytest.mark.parametrize(
    "line",
    [
        "GemmTunableOp_float_TN,tn_64_1_1_ld_1_1_1",
        "GemmStridedBatchedTunableOp_float_TN,tn_64_1_1_B_8_ld_1_1_1",
        "GemmTunableOp_Half_NN,nn_64_8_8_ld_32_8_64",
        "GemmTunableOp_BFloat16_TN,tn_4096_1_4096_ld_4096_0_4096",  # ld 0: HF Llama-3 compiled decode at batch 1
    ],
)
def test_keys_under_the_blas_ld_rule_parse_strictly_and_round_trip(line):
    """Whatever torch writes parses in strict mode (a HuggingFace model recorded the first two)."""
    parsed = parse_text(line + "\n", "hf.csv")
    assert format_file({}, parsed.entries) == line + "\n"
    assert parsed.entries[0].problem.ld_notes()

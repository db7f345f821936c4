"""Hypothesis strategies for GemmProblems and TunableOp entries."""

from __future__ import annotations

from hypothesis import strategies as st

from pipeline.formats.tunableop import SCALAR_NAMES, TYPE_NAMES, TunableOpEntry
from pipeline.problem import WILDCARD, GemmProblem

GEMM_TYPE_NAMES = [name for name in TYPE_NAMES if name != "Float"]  # "Float" is a read-only alias
FP8 = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]
SCALAR_DTYPES = sorted(set(SCALAR_NAMES.values()))


def dims(wildcards: bool) -> st.SearchStrategy:
    ints = st.integers(1, 200_000)
    return st.one_of(ints, st.just(WILDCARD)) if wildcards else ints


def _ld(rows, pad: int, wildcard_ld: bool):
    if rows == WILDCARD:
        return WILDCARD
    return WILDCARD if wildcard_ld else rows + pad


@st.composite
def problems(draw: st.DrawFn, wildcards: bool = True) -> GemmProblem:
    op = draw(st.sampled_from(["gemm", "gemm_and_bias", "gemm_strided_batched", "scaled_gemm"]))
    transa, transb = draw(st.sampled_from("NT")), draw(st.sampled_from("NT"))
    m, n, k = draw(dims(wildcards)), draw(dims(wildcards)), draw(dims(wildcards))
    fields: dict = {"op": op, "transa": transa, "transb": transb, "m": m, "n": n, "k": k}
    if op == "gemm_strided_batched":
        fields["batch"] = draw(dims(wildcards))
    has_ld = draw(st.booleans()) if op != "scaled_gemm" else draw(st.integers(0, 4)) > 0
    if has_ld:
        rows = (m if transa == "N" else k, k if transb == "N" else n, m)
        pads = draw(st.lists(st.integers(0, 512), min_size=3, max_size=3))
        wild = draw(st.booleans()) and wildcards
        fields.update(lda=_ld(rows[0], pads[0], wild), ldb=_ld(rows[1], pads[1], wild), ldc=_ld(rows[2], pads[2], wild))
    if op == "scaled_gemm":
        fields.update(
            a_type=draw(st.sampled_from(FP8)),
            b_type=draw(st.sampled_from(FP8)),
            c_type=draw(st.sampled_from(["bfloat16", "float16", "float32", *FP8])),
        )
        if has_ld:
            bias = draw(st.sampled_from([None, "bfloat16", "float16", "float32"]))
            if draw(st.booleans()):
                swizzle = draw(st.one_of(st.none(), st.tuples(st.sampled_from("012"), st.sampled_from("012"))))
                fields.update(rowwise=draw(st.booleans()), bias_type=bias, swizzle=swizzle)
            else:
                fields.update(
                    scale_a_type=draw(st.sampled_from(SCALAR_DTYPES)),
                    scale_b_type=draw(st.sampled_from(SCALAR_DTYPES)),
                    scale_a_recipe=draw(st.integers(0, 3)),
                    scale_b_recipe=draw(st.integers(0, 3)),
                    output_scale=draw(st.booleans()),
                    fast_accum=draw(st.booleans()),
                    bias_type=bias,
                )
    else:
        dtype, compute = TYPE_NAMES[draw(st.sampled_from(GEMM_TYPE_NAMES))]
        fields.update(a_type=dtype, b_type=dtype, c_type=dtype, compute_type=compute)
        if has_ld and draw(st.integers(0, 3)) == 0:
            fields["compute_suffix"] = "bf16x9_r"
    return GemmProblem(**fields)


@st.composite
def entries(draw: st.DrawFn, results: bool) -> TunableOpEntry:
    problem = draw(problems())
    solution = draw(
        st.sampled_from(
            [
                "Default",
                "Gemm_Hipblaslt_572",
                "Gemm_Rocblas_-61",
                "Gemm_Cublaslt_id_66_tile_20_stages_8_splitk_1_red_0_swizzle_0_custom_0",
            ]
        )
    )
    time_ms = draw(st.floats(0, 1e4, allow_nan=False))
    entry = TunableOpEntry.from_problem(problem, solution if results else None, time_ms if results else None)
    if draw(st.integers(0, 4)) == 0:
        entry = TunableOpEntry(
            entry.op_signature,
            entry.params_signature,
            problem,
            entry.solution,
            entry.time_text,
            f"BLAS_PARAMS: - {{ function: matmul, M: {problem.m}, N: 1 }}",
        )
    return entry


validators = st.dictionaries(
    st.from_regex(r"[A-Z][A-Z_]{1,20}", fullmatch=True),
    st.from_regex(r"[0-9A-Za-z.+:\-]{1,30}", fullmatch=True),
    max_size=5,
)

"""Which problems torch's own GEMM path and cuBLASLt take (``unsupported_reason``), and the error a library raises
for one it cannot express when asked (``Unsupported``). Torch-free: the runtime's table reads it without a GPU
stack, and the tuner records a problem it refuses as skipped with the reason."""

from __future__ import annotations

from ..problem import ROWWISE, TENSORWISE, GemmProblem

WORKSPACE_BYTES = 32 * 1024 * 1024  # cuBLASLt's workspace, as torch has it on sm90: every tuned row fits in it


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

"""Where a ``torch._scaled_mm`` call lands as a ``GemmProblem``, from its arguments' metadata alone (no torch).

``_scaled_mm(mat1[M, K], mat2[K, N], scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)`` runs
as the BLAS ``C (N x M) = op(A) op(B)`` with ``A`` the storage of ``mat2`` and ``B`` that of ``mat1``, as every
GEMM does (``frame``); each operand's scale goes with it, so BLAS ``A`` is scaled by torch's ``scale_b``.
That is the pairing of ``ScaledGemmParams`` (``a`` with ``a_scale_ptr``, aten/src/ATen/cuda/tunable/
GemmCommon.h). The key is the newest torch's CUDA grammar (``..._a_<dt>_b_<dt>_c_<dt>_as_<dt>_bs_<dt>_ast_<i>
_bst_<i>_dscale_<0|1>_fast_<0|1>_bias_<None|dt>``; ``docs/tunableop.md`` 1.2): recipe 0 is a tensorwise
scale (one element), 1 a rowwise one (``scale_a`` ``M x 1`` and ``scale_b`` ``1 x N``, fp32). The recorder and
the router both call ``scaled_problem``, so what is recorded is exactly what is looked up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..problem import ROWWISE, TENSORWISE, GemmProblem
from .frame import operand


@dataclass(frozen=True)
class Meta:
    """What a key needs of one tensor: sizes, strides and dtype name (torch's, without ``torch.``)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


def _numel(meta: Meta) -> int:
    count = 1
    for size in meta.shape:
        count *= size
    return count


def _rowwise(scale: Meta, rows: int, row_dim: int) -> bool:
    return scale.dtype == "float32" and len(scale.shape) == 2 and scale.shape[row_dim] == rows and _numel(scale) == rows


def joint_recipe(scale_x: Meta, scale_y: Meta, n: int, m: int) -> int | None:
    """The scaling recipe of both operands, as torch pairs them (tensorwise first, then rowwise): one element
    each, or ``scale_x`` ``n x 1`` with ``scale_y`` ``1 x m``; None for block and MX scales."""
    if _numel(scale_x) == 1 and _numel(scale_y) == 1:
        return TENSORWISE
    if _rowwise(scale_x, n, 0) and _rowwise(scale_y, m, 1):
        return ROWWISE
    return None


def scaled_problem(
    x: Meta,
    y: Meta,
    scale_x: Meta,
    scale_y: Meta,
    bias: Meta | None,
    output_scale: bool,
    out_dtype: str | None,
    fast_accum: bool,
) -> GemmProblem | str:
    """The problem of ``_scaled_mm(x, y, scale_x, scale_y, bias, ...)``, or why it has no key here (a str)."""
    if len(x.shape) != 2 or len(y.shape) != 2 or 0 in x.shape or 0 in y.shape:
        return "empty or unexpected operand shape"
    a, b = operand(y.shape, y.stride), operand(x.shape, x.stride)
    if a is None or b is None:
        return "layout torch copies first"
    (n, k), m = x.shape, y.shape[1]
    recipe = joint_recipe(scale_x, scale_y, n, m)
    if recipe is None:
        return "block or MX scales (only tensorwise and rowwise scales are keyed)"
    return GemmProblem(
        "scaled_gemm",
        a[0],
        b[0],
        m,
        n,
        k,
        a[1],
        b[1],
        m,
        a_type=y.dtype,
        b_type=x.dtype,
        c_type=out_dtype or x.dtype,
        bias_type=bias.dtype if bias is not None else None,
        scale_a_type=scale_y.dtype,
        scale_b_type=scale_x.dtype,
        scale_a_recipe=recipe,
        scale_b_recipe=recipe,
        output_scale=output_scale,
        fast_accum=fast_accum,
    )


def dtype_name(dtype) -> str:
    """torch's name of a dtype, without ``torch.`` (``bfloat16``)."""
    return str(dtype).removeprefix("torch.")


def meta_of(tensor) -> Meta:
    """The ``Meta`` of a torch tensor."""
    return Meta(tuple(tensor.shape), tuple(tensor.stride()), dtype_name(tensor.dtype))


def problem_of_call(
    x, y, scale_x, scale_y, bias=None, scale_result=None, out_dtype=None, fast_accum: bool = False
) -> GemmProblem | str:
    """``scaled_problem`` of a ``_scaled_mm(x, y, scale_x, scale_y, bias, scale_result, out_dtype, use_fast_accum)``
    call (the schema's order, in which the dispatcher hands the arguments to a ``torch.library`` kernel)."""
    if any(t.device != x.device for t in (y, scale_x, scale_y, *(t for t in (bias,) if t is not None))):
        return "operands on different devices"
    return scaled_problem(
        meta_of(x),
        meta_of(y),
        meta_of(scale_x),
        meta_of(scale_y),
        None if bias is None else meta_of(bias),
        scale_result is not None,
        None if out_dtype is None else dtype_name(out_dtype),
        bool(fast_accum),
    )

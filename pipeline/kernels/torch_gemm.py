"""A ``GemmProblem`` as CUDA tensors: BLAS-frame storage with the recorded ld's, torch's own call, reference.

Each operand is stored column-major as the BLAS frame says: an ``r x c`` matrix with leading dimension
``ld`` lives in a ``(c, ld)`` row-major tensor (``(batch, c, ld)`` when batched). torch computes the same
product row-major as ``C^T[n, m] = X[n, k] @ Y[k, m]`` with ``X = op(B)^T`` and ``Y = op(A)^T``, which is
exactly how ``F.linear``/``mm`` reach cuBLAS, so torch's default call records the same TunableOp key.
A scaled GEMM's default is ``torch._scaled_mm(X, Y, scale_X, scale_Y, bias, out_dtype, use_fast_accum)`` on FP8
operands, each operand's scale kept with it (BLAS ``A``'s is torch's ``scale_b``; ``runtime.scaled``).
Needs torch (the ``cuda`` extra); imported only by GPU stages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..problem import ROWWISE, GemmProblem, dtype_bytes

TORCH_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
}
FP8_DTYPES = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
SCALE_VALUES = (0.75, 1.25)  # tensorwise scales of A and B: not 1, so a kernel that ignores them fails numerics


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES.get(name) or FP8_DTYPES[name]


@dataclass
class Shape:
    """Storage geometry of the three operands of a problem."""

    rows_a: int
    cols_a: int
    lda: int
    rows_b: int
    cols_b: int
    ldb: int
    m: int
    n: int
    ldc: int
    batch: int

    @classmethod
    def of(cls, p: GemmProblem) -> Shape:
        lda, ldb, ldc = p.blas_lds()
        rows_a, cols_a = (p.m, p.k) if p.transa == "N" else (p.k, p.m)
        rows_b, cols_b = (p.k, p.n) if p.transb == "N" else (p.n, p.k)
        return cls(rows_a, cols_a, lda, rows_b, cols_b, ldb, p.m, p.n, ldc, p.batch)


@dataclass
class OperandSet:
    """One copy of a problem's operands: storage tensors, the bias vector, the output; a scaled GEMM's scales
    of A (one element, or ``1 x m`` rowwise) and of B (one element, or ``n x 1``)."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    bias: torch.Tensor | None
    scale_a: torch.Tensor | None = None
    scale_b: torch.Tensor | None = None


def set_bytes(problem: GemmProblem) -> int:
    """Bytes one operand set takes on the device."""
    s = Shape.of(problem)
    elements = (
        s.cols_a * s.lda * dtype_bytes(problem.a_type)
        + s.cols_b * s.ldb * dtype_bytes(problem.b_type)
        + s.n * s.ldc * dtype_bytes(problem.c_type)
    )
    return int(s.batch * elements + (problem.m * dtype_bytes(problem.c_type) if problem.has_bias else 0))


def _random(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """Normal values in ``dtype`` (FP8 ones drawn in fp32 and rounded)."""
    if dtype in FP8_DTYPES.values():
        return torch.empty(shape, device=device).normal_(0, 1, generator=gen).to(dtype)
    return torch.empty(shape, device=device, dtype=dtype).normal_(0, 1, generator=gen)


def _scales(problem: GemmProblem, device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The scales of A and B: tensorwise ``SCALE_VALUES``, rowwise values around them."""
    if problem.scale_a_recipe == ROWWISE:
        a = torch.empty((1, problem.m), device=device).uniform_(0.5, 1.0, generator=gen)
        b = torch.empty((problem.n, 1), device=device).uniform_(1.0, 1.5, generator=gen)
        return a, b
    return tuple(torch.tensor(v, device=device) for v in SCALE_VALUES)  # type: ignore[return-value]


def _stored(s: Shape, cols: int, ld: int) -> tuple[int, ...]:
    return (s.batch, cols, ld) if s.batch > 1 else (cols, ld)


def allocate(problem: GemmProblem, copies: int, device: torch.device, seed: int = 0) -> list[OperandSet]:
    """``copies`` sets of random operands (never zeros: tensor cores run zeros faster)."""
    s = Shape.of(problem)
    gen = torch.Generator(device).manual_seed(seed)
    out_dtype = torch_dtype(problem.c_type)
    sets = []
    for _ in range(copies):
        a = _random(_stored(s, s.cols_a, s.lda), torch_dtype(problem.a_type), device, gen)
        b = _random(_stored(s, s.cols_b, s.ldb), torch_dtype(problem.b_type), device, gen)
        c = torch.empty(_stored(s, s.n, s.ldc), device=device, dtype=out_dtype)
        bias = _random((problem.m,), out_dtype, device, gen) if problem.has_bias else None
        scales = _scales(problem, device, gen) if problem.op == "scaled_gemm" else (None, None)
        sets.append(OperandSet(a, b, c, bias, *scales))
    return sets


def torch_views(problem: GemmProblem, ops: OperandSet) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(X, Y, out)`` with ``out[n, m] = X @ Y`` in torch's row-major frame, sharing the BLAS storage."""
    s = Shape.of(problem)
    y = ops.a[..., : s.rows_a]
    y = y if problem.transa == "N" else y.mT
    x = ops.b[..., : s.rows_b]
    x = x if problem.transb == "N" else x.mT
    return x, y, ops.c[..., : s.m]


def torch_launcher(problem: GemmProblem) -> Callable[[OperandSet], None]:
    """torch's default path for ``problem`` (the baseline), writing into the set's output."""
    tf32 = problem.compute_type == "tf32"

    def launch(ops: OperandSet) -> None:
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32  # fp32 problems record "float" or "tf32" by this flag
        try:
            x, y, out = torch_views(problem, ops)
            if problem.op == "scaled_gemm":
                torch._scaled_mm(
                    x,
                    y,
                    ops.scale_b,
                    ops.scale_a,
                    bias=ops.bias,
                    out_dtype=out.dtype,
                    use_fast_accum=bool(problem.fast_accum),
                    out=out,
                )
            elif problem.op == "gemm_and_bias":
                torch.addmm(ops.bias, x, y, out=out)
            elif problem.op == "gemm_strided_batched":
                torch.bmm(x, y, out=out)
            else:
                torch.mm(x, y, out=out)
        finally:  # the process's own setting back: a tf32 problem must not leak TF32 into what runs next
            torch.backends.cuda.matmul.allow_tf32 = saved

    return launch


def with_tunableop(launch: Callable[[OperandSet], None]) -> Callable[[OperandSet], None]:
    """``launch`` with TunableOp enabled (tuning stays as it is set: off for lookups): the results loaded or
    tuned in this process pick the solution."""

    def run(ops: OperandSet) -> None:
        torch.cuda.tunable.enable(True)
        try:
            launch(ops)
        finally:
            torch.cuda.tunable.enable(False)

    return run


def reference(problem: GemmProblem, ops: OperandSet) -> torch.Tensor:
    """The product in float64 (float32 inputs) or float32 (16-bit inputs), torch frame ``[.., n, m]``."""
    x, y, _ = torch_views(problem, ops)
    wide = torch.float64 if problem.a_type in ("float32", "float64") else torch.float32
    x, y = x.to(wide), y.to(wide)
    if problem.op == "scaled_gemm":  # dequantized: B's scale is per row of x, A's per column of y
        x, y = x * ops.scale_b, y * ops.scale_a
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out = torch.matmul(x, y)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    if ops.bias is not None:
        out = out + ops.bias.to(wide)
    return out


def result(problem: GemmProblem, ops: OperandSet) -> torch.Tensor:
    return torch_views(problem, ops)[2]

"""A ``GemmProblem`` as CUDA tensors: BLAS-frame storage with the recorded ld's, torch's own call, reference.

Each operand is stored column-major as the BLAS frame says: an ``r x c`` matrix with leading dimension
``ld`` lives in a ``(c, ld)`` row-major tensor (``(batch, c, ld)`` when batched). torch computes the same
product row-major as ``C^T[n, m] = X[n, k] @ Y[k, m]`` with ``X = op(B)^T`` and ``Y = op(A)^T``, which is
exactly how ``F.linear``/``mm`` reach cuBLAS, so torch's default call records the same TunableOp key.
Needs torch (the ``cuda`` extra); imported only by GPU stages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..problem import GemmProblem, dtype_bytes

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
                "float64": torch.float64}


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
    """One copy of a problem's operands: storage tensors, the bias vector, the output."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    bias: torch.Tensor | None


def set_bytes(problem: GemmProblem) -> int:
    """Bytes one operand set takes on the device."""
    s, size = Shape.of(problem), dtype_bytes(problem.a_type)
    elements = s.cols_a * s.lda + s.cols_b * s.ldb + s.n * s.ldc
    return int(s.batch * elements * size + (problem.m * size if problem.op == "gemm_and_bias" else 0))


def _storage(batch: int, cols: int, ld: int, **kw) -> torch.Tensor:
    shape = (batch, cols, ld) if batch > 1 else (cols, ld)
    return torch.empty(shape, **kw)


def allocate(problem: GemmProblem, copies: int, device: torch.device, seed: int = 0) -> list[OperandSet]:
    """``copies`` sets of random operands (never zeros: tensor cores run zeros faster)."""
    s, dtype = Shape.of(problem), TORCH_DTYPES[problem.a_type]
    gen = torch.Generator(device).manual_seed(seed)
    kw = {"device": device, "dtype": dtype}
    sets = []
    for _ in range(copies):
        a = _storage(s.batch, s.cols_a, s.lda, **kw).normal_(0, 1, generator=gen)
        b = _storage(s.batch, s.cols_b, s.ldb, **kw).normal_(0, 1, generator=gen)
        c = _storage(s.batch, s.n, s.ldc, **kw)
        bias = torch.empty(problem.m, **kw).normal_(0, 1, generator=gen) if problem.op == "gemm_and_bias" else None
        sets.append(OperandSet(a, b, c, bias))
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
            if problem.op == "gemm_and_bias":
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
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out = torch.matmul(x.to(wide), y.to(wide))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    if ops.bias is not None:
        out = out + ops.bias.to(wide)
    return out


def result(problem: GemmProblem, ops: OperandSet) -> torch.Tensor:
    return torch_views(problem, ops)[2]

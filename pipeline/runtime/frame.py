"""Where a torch ``mm``/``addmm``/``bmm`` call lands in the BLAS frame, from sizes and strides alone.

torch computes ``out[n, m] = x[n, k] @ y[k, m]`` into a row-major ``out``, which BLAS sees as the column-major
``C (m x n) = op(A) op(B)`` with ``A`` the storage of ``y`` and ``B`` that of ``x`` (``docs/tunableop.md``;
``pipeline/kernels/torch_gemm.py``). An operand whose rows are contiguous is ``N`` with ``ld`` its row
stride; one whose columns are contiguous is ``T`` with ``ld`` its column stride; torch copies any other
layout first, and the runtime leaves those calls to torch. The ld's come out as torch records them (``1``
for a one-column operand, as in ``tn_64_1_1_ld_1_1_1``); the layout consistency with the strides is what
makes the description exact, not the ld alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from .table import RuntimeKey


def operand(sizes: Sequence[int], strides: Sequence[int]) -> tuple[str, int] | None:
    """``("N", ld)``, ``("T", ld)`` or None for the last two dimensions of an operand."""
    (rows, cols), (s0, s1) = sizes[-2:], strides[-2:]
    if (s1 == 1 or cols == 1) and (s0 >= max(1, cols) or rows == 1):
        return "N", s0
    if (s0 == 1 or rows == 1) and (s1 >= max(1, rows) or cols == 1):
        return "T", s1
    return None


def _packed_batch_stride(trans: str, ld: int, rows: int, cols: int) -> int:
    """The batch stride of an operand stored column-major with ``ld``: ld (raised to the stored rows) x cols."""
    stored_rows, stored_cols = (cols, rows) if trans == "N" else (rows, cols)
    return max(ld, stored_rows) * stored_cols


def gemm_key(
    op: str,
    dtype: str,
    compute: str,
    x_sizes: Sequence[int],
    x_strides: Sequence[int],
    y_sizes: Sequence[int],
    y_strides: Sequence[int],
) -> RuntimeKey | None:
    """The key of ``x @ y`` (2-D, or 3-D for ``gemm_strided_batched``), None where torch would copy an
    operand or a batch is not evenly strided (those calls stay with torch)."""
    a, b = operand(y_sizes, y_strides), operand(x_sizes, x_strides)
    if a is None or b is None:
        return None
    n, k = x_sizes[-2:]
    m = y_sizes[-1]
    batch = 1
    if op == "gemm_strided_batched":
        batch = x_sizes[0]
        if batch > 1 and (
            x_strides[0] != _packed_batch_stride(b[0], b[1], n, k)
            or y_strides[0] != _packed_batch_stride(a[0], a[1], k, m)
        ):
            return None
    return (op, dtype, compute, a[0], b[0], m, n, k, a[1], b[1], m, batch)

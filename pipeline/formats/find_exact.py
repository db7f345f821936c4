"""What hipBLASLt's ``utilities/find_exact.py`` leaves behind (``docs/upstream.md`` 1).

``<out>/0_Bench/result_<TA><TB>_<gemmtype>_<M>x<N>x<B>x<K>.txt`` holds each size's hipblaslt-bench output
(the winner is the bench's ``Winner:`` block); ``<out>/1_LogicYaml/<basename>.yaml`` holds Equality logic
copied from the library's source logic files, whose ExactLogic keys find_exact writes as
``[M, N, B, K, lda, ldb, ldc, ldd]``: not Tensile's ``[M, N, B, K, LDD, LDC, LDA, LDB]`` (upstream
``CreateExact``, hipBLASLt 2024-10 ``7d9fb683`` and 2025 ``07f1acc2``); ``formats.logic.tensile_ld_order``
puts them right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RESULT = re.compile(r"result_(?P<ta>[NT])(?P<tb>[NT])_(?P<type>.+)_(?P<m>\d+)x(?P<n>\d+)x(?P<b>\d+)x(?P<k>\d+)\.txt")


@dataclass(frozen=True)
class ResultName:
    transa: str
    transb: str
    gemm_type: str
    m: int
    n: int
    batch: int
    k: int


def parse_result_name(name: str) -> ResultName | None:
    """The size a ``0_Bench`` result file is named after (None for another file)."""
    match = _RESULT.fullmatch(name)
    if not match:
        return None
    return ResultName(
        match["ta"], match["tb"], match["type"], int(match["m"]), int(match["n"]), int(match["b"]), int(match["k"])
    )

"""What a TunableOp results row's solution name means for the torch that reads it: the platform a validator block
is from, torch's release, hipBLASLt's two spellings across torch versions, and which names a torch cannot
dispatch (docs/tunableop.md section 2, "solution names"; docs/upstream.md)."""

from __future__ import annotations

import re

from ..problem import GemmProblem
from .tunableop import DEFAULT


def validators_platform(validators: dict[str, str]) -> str:
    """``rocm`` for a ROCm torch's validator block (HIP/ROCm/arch keys), else ``cuda`` (PT_VERSION only)."""
    rocm_keys = {"HIP_VERSION", "ROCM_VERSION", "GCN_ARCH_NAME", "HIPBLASLT_VERSION", "ROCBLAS_VERSION"}
    return "rocm" if rocm_keys & set(validators) else "cuda"


def release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a torch version string (``2.11.0+cu130`` -> ``(2, 11)``)."""
    numbers = [int(n) for n in re.findall(r"\d+", version)] + [0, 0]
    return numbers[0], numbers[1]


_HIPBLASLT = re.compile(r"Gemm_Hipblaslt_(?:[NT]{2}_)?(?P<index>-?\d+)")


def hipblaslt_solution(solution: str, problem: GemmProblem, torch_version: str) -> str:
    """``solution`` as torch ``torch_version`` on ROCm names a hipBLASLt solution: ``Gemm_Hipblaslt_<index>``
    from 2.7 (pytorch PR #147900), ``Gemm_Hipblaslt_<TA><TB>_<index>`` up to 2.6, the letters being the op
    signature's layout (``GemmHipblaslt.h``, docs/upstream.md). Other names are returned as they are."""
    match = _HIPBLASLT.fullmatch(solution)
    if match is None:
        return solution
    if release(torch_version) <= (2, 6):
        return f"Gemm_Hipblaslt_{problem.transa}{problem.transb}_{match['index']}"
    return f"Gemm_Hipblaslt_{match['index']}"


def unknown_solution(solution: str, platform: str, torch_version: str) -> str | None:
    """Why torch ``torch_version`` on ``platform`` has no candidate named ``solution`` (None: it has one).
    Such a row is a hard error at dispatch in torch <= 2.13 (docs/tunableop.md section 2: solution names, reading)."""
    target = release(torch_version)
    if solution == DEFAULT:
        return None
    if solution.startswith("Gemm_Cublaslt_"):
        if platform != "cuda":
            return "a cuBLASLt solution on ROCm"
        return None if target >= (2, 14) else f"cuBLASLt solutions arrive in torch 2.14 (this is {torch_version})"
    if solution.startswith("Gemm_Rocblas_"):
        return None if platform == "rocm" else "a rocBLAS solution on CUDA"
    if solution.startswith("Gemm_Hipblaslt_"):
        if platform != "rocm":
            return "a hipBLASLt solution on CUDA"
        legacy = re.fullmatch(r"Gemm_Hipblaslt_[NT]{2}_-?\d+", solution) is not None
        if legacy != (target <= (2, 6)):
            return f"torch {torch_version} names hipBLASLt solutions " + (
                "Gemm_Hipblaslt_<AB>_<index>" if target <= (2, 6) else "Gemm_Hipblaslt_<index>"
            )
        return None
    return f"no torch names a solution {solution}"

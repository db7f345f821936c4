"""hipBLASLt / TensileLite view of a ``GemmProblem``: frame, type letters, ProblemType names, arch table.

torch hands hipBLASLt the BLAS frame it records (``docs/tunableop.md`` 1.3), so the mapping is the
identity on operands and transposes: hipBLASLt ``A`` = TunableOp ``A``, ``transA = transa``, ``M = m``,
``N = n``, ``K = k``, ``batch_count = batch``, ``ldd = ldc`` (torch writes C in place). Packed ld's are
filled in where the key did not record them (torch 2.6). Tensile's exact 8-tuple orders the ld's
``LDD, LDC, LDA, LDB`` (``docs/upstream.md``, "TensileLite library logic"); find_exact takes ``[M, N, B, K]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInput
from ..problem import GemmProblem

# find_exact.py type letters (spec section 1): H, S, FP8 (S24) and B, FP8N (H25/RL); anything else asserts.
FIND_EXACT_TYPES = {
    "float16": "H",
    "float32": "S",
    "bfloat16": "B",
    "float8_e4m3fn": "FP8",
    "float8_e4m3fnuz": "FP8N",
}
# TensileLite ProblemType DataType letters (spec section 4 names h|s|b; d is Tensile's double).
TENSILE_TYPES = {"float16": "h", "float32": "s", "bfloat16": "b", "float64": "d"}
# FP8 DataType letters per TensileLite generation (docs/upstream.md, "TensileLite and FP8"): the 2024 tree has one
# E4M3 type F8 and one E5M2 type B8 (the fnuz ones on gfx942, the OCP ones where the arch runs OCP); the 2025
# tree spells the fnuz types F8N/B8N. A mixed pair is one letter group: F8B8, B8F8 (2025 fnuz: F8B8N, B8F8N).
TENSILE_GENERATIONS = ("2025", "2024")
# The archs each generation's TensileLite writes code for (docs/upstream.md, "TensileLite and the archs"): the
# 2024 tree's assembler-kernel ISA list has gfx90a and gfx942 but no gfx950, which the 2025 tree brings.
TENSILE_ARCHS = {"2024": ("gfx90a", "gfx942"), "2025": ("gfx90a", "gfx942", "gfx950")}


def tensile_arch_refusal(arch: str, generation: str) -> str | None:
    """Why ``generation``'s TensileLite cannot write ``arch``'s kernels (None: it can)."""
    if arch in TENSILE_ARCHS[generation]:
        return None
    have = [g for g, archs in TENSILE_ARCHS.items() if arch in archs]
    return (
        f"--arch {arch} --tensile-generation {generation}: the {generation} TensileLite tree has no {arch} "
        f"(its SupportedISA, docs/upstream.md); {arch} comes with --tensile-generation {' or '.join(have)}"
    )


_TENSILE_FP8 = {
    "float8_e4m3fn": ("F8", ""),
    "float8_e5m2": ("B8", ""),
    "float8_e4m3fnuz": ("F8", "N"),
    "float8_e5m2fnuz": ("B8", "N"),
}
NO_FP8_ARCHS = ("gfx90a",)  # no FP8 matrix instructions (S24's FP8 TensileLite tests are marked skip-gfx90a)
# Letters of Tensile's ProblemType names (e.g. Cijk_Alik_Bljk_HHS_BH).
_NAME_LETTERS = {
    "float16": "H",
    "float32": "S",
    "bfloat16": "B",
    "float64": "D",
    "float8_e4m3fn": "F8",
    "float8_e4m3fnuz": "F8N",
    "float8_e5m2": "B8",
    "float8_e5m2fnuz": "B8N",
}
_INDICES = {"N": ("Ailk", "Bljk"), "T": ("Alik", "Bjlk")}


@dataclass(frozen=True)
class Arch:
    """One GPU architecture as TensileLite's LibraryLogic names it."""

    name: str
    schedule: str
    device_names: tuple[str, ...]
    family: str


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("gfx942", "aquavanjaram", ("Device 0049", "Device 0050"), "MI300"),
        Arch("gfx90a", "aldebaran", ("Device 740c", "Device 740f"), "MI200"),
        Arch("gfx950", "gfx950", ("Device 75a0", "Device 75a3"), "MI350"),
    )
}


class UnknownArchError(BadInput):
    pass


def get_arch(name: str) -> Arch:
    try:
        return ARCHS[name]
    except KeyError:
        raise UnknownArchError(f"unknown arch {name!r}; known: {', '.join(ARCHS)}") from None


@dataclass(frozen=True)
class AmdGemm:
    """A GEMM in hipBLASLt's terms: sizes, packed-or-recorded ld's, transposes."""

    trans_a: bool
    trans_b: bool
    m: int
    n: int
    batch: int
    k: int
    lda: int
    ldb: int
    ldc: int
    ldd: int

    @property
    def find_exact_size(self) -> list[int]:
        return [self.m, self.n, self.batch, self.k]

    @property
    def tensile_exact(self) -> list[int]:
        return [self.m, self.n, self.batch, self.k, self.ldd, self.ldc, self.lda, self.ldb]


def packed_lds(problem: GemmProblem) -> tuple[int, int, int]:
    """Leading dimensions of densely stored operands: rows of A, B and C as stored."""
    return problem.stored_rows()  # type: ignore[return-value]


def to_amd(problem: GemmProblem) -> AmdGemm:
    """The hipBLASLt frame of a concrete (non-wildcard) problem."""
    if problem.is_wildcard:
        raise ValueError("a wildcard problem has no concrete size")
    lda, ldb, ldc = problem.blas_lds()  # hipBLASLt and Tensile refuse ld < rows
    return AmdGemm(
        problem.transa == "T", problem.transb == "T", problem.m, problem.n, problem.batch, problem.k, lda, ldb, ldc, ldc
    )


def is_packed(problem: GemmProblem) -> bool:
    return problem.lda is None or problem.blas_lds() == packed_lds(problem)


# (DataType, DestDataType, ComputeDataType) that TensileLite names with the Dest and Compute letters (its HPA types):
# S24 ``Tensile/Common.py:469-477`` ``HPATypes``; RL ``tensilelite/Tensile/SolutionStructs/Problem.py`` ``_HPATypes``
# (docs/upstream.md, "TensileLite ProblemType names"): the 2025 list adds the fnuz N forms.
_HPA_2024 = {
    *(("H", d, "S") for d in ("S", "H", "F8")),
    *(("B", d, "S") for d in ("B", "S", "H")),
    *((t, d, "S") for t in ("F8", "B8", "F8B8", "B8F8") for d in ("S", "H", "F8", "B8")),
    ("F8", "B", "S"),
    ("F8B8", "B", "S"),
    ("I8", "I", "I"),
    ("4xi8", "I", "I"),
    *(("I8", d, "S") for d in ("I", "I8", "H", "B")),
}
HPA_TYPES = {
    "2024": _HPA_2024,
    "2025": _HPA_2024
    | {(t, d, "S") for t in ("F8N", "B8N", "F8B8N", "B8F8N") for d in ("S", "H", "F8N", "B8N")}
    | {("H", "F8N", "S"), ("F8N", "B", "S"), ("F8B8N", "B", "S")},
}


def _bias_list_shown(data: str, dest: str, compute: str, bias: str, generation: str) -> bool:
    """Whether TensileLite spells the bias list in the name: it does where the config's list (one type here)
    differs from its default, the set of DataType, Compute and Dest types without int8 (and, in 2025, without
    8-bit floats): S24 ``SolutionStructs.py:959-970``, RL ``Problem.py`` ``getBiasDataTypeListDefault``."""
    default = {t for t in (data, dest, compute) if t != "I8"}
    if generation == "2025":
        default = {t for t in default if "8" not in t}
    return default != {bias}


def problem_type_name(problem: GemmProblem, generation: str = "2025") -> str:
    """The ProblemType name TensileLite gives the config the project writes for ``problem`` (Batched, UseBeta,
    HPA for 16-bit and FP8 inputs, the bias list the config names, UseScaleAB, SupportUserArgs by default) in
    ``generation``: S24 ``SolutionStructs.py:459-554`` concatenates (``Cijk_Alik_Bljk_BBS_BH_BiasB_UserArgs``,
    ``Cijk_Ailk_Bjlk_SB_UserArgs``), RL ``Problem.py`` ``ProblemType.__str__`` joins its parts with ``_``
    (``Cijk_Alik_Bljk_BBS_BH_Bias_B_UserArgs``, ``Cijk_Ailk_Bjlk_S_B_UserArgs``); docs/upstream.md,
    "TensileLite ProblemType names". A type the generation has no letter for keeps the project's letters."""
    a_index, b_index = _INDICES[problem.transa][0], _INDICES[problem.transb][1]
    data = (tensile_data_type(problem.a_type, generation, problem.b_type) or "").upper()
    if not data:
        a, b = _NAME_LETTERS[problem.a_type], _NAME_LETTERS[problem.b_type]
        data = a if a == b else a + b
    dest = _NAME_LETTERS[problem.c_type]
    compute = "D" if data == "D" else "S"
    types = data + (dest + compute if (data, dest, compute) in HPA_TYPES[generation] else "")
    flags = "B" + ("" if data in ("S", "D") else "H")
    bias = _NAME_LETTERS[problem.bias_type or problem.c_type] if problem.has_bias else ""
    bias_parts = ["Bias", *([bias] if _bias_list_shown(data, dest, compute, bias, generation) else [])] if bias else []
    if generation == "2024":  # S24 runs the types into the flags (unless HPA) and the bias list into "Bias"
        types, flags = types + ("_" if types != data else "") + flags, ""
        bias_parts = ["".join(bias_parts)] if bias_parts else []
    scale = scale_ab_suffix(problem).lstrip("_")
    parts = ["Cijk", a_index, b_index, types, flags, *bias_parts, scale, "UserArgs"]
    return "_".join(part for part in parts if part)


def scale_ab(problem: GemmProblem) -> str:
    """TensileLite's ``UseScaleAB`` of a scaled GEMM: ``Scalar`` (tensorwise), ``Vector`` (rowwise); else ``""``."""
    if problem.op != "scaled_gemm":
        return ""
    return "Vector" if problem.rowwise else "Scalar"


def scale_ab_suffix(problem: GemmProblem) -> str:
    """The name part TensileLite gives ``UseScaleAB`` (S24 ``SolutionStructs.py:547-548``): ``_SAB``, ``_SABV``."""
    return {"Scalar": "_SAB", "Vector": "_SABV"}.get(scale_ab(problem), "")


def tensile_data_type(dtype: str, generation: str, b_type: str | None = None) -> str | None:
    """TensileLite's DataType letter of ``dtype`` (and of the pair with ``b_type`` where it differs) in
    ``generation``; None where that generation has none."""
    if b_type is None or b_type == dtype:
        if dtype in TENSILE_TYPES:
            return TENSILE_TYPES[dtype]
        b_type = dtype
    if dtype not in _TENSILE_FP8 or b_type not in _TENSILE_FP8:
        return None
    (a_letter, a_flavour), (b_letter, b_flavour) = _TENSILE_FP8[dtype], _TENSILE_FP8[b_type]
    if a_flavour != b_flavour:
        return None  # an fnuz operand beside an OCP one: no TensileLite type holds the pair
    flavour = a_flavour if generation == "2025" else ""
    return (a_letter if a_letter == b_letter else a_letter + b_letter) + flavour

"""`GemmProblem`: the one description of a GEMM that flows through every stage.

The frame is the BLAS (column-major) frame that TunableOp records: ``C[m, n] = op(A)[m, k] @ op(B)[k, n]``
where ``op(X)`` is ``X`` for ``"N"`` and ``X^T`` for ``"T"``. For a row-major torch ``x[M, K] @ W[N, K].t()``
this is ``m = N``, ``n = M``, BLAS ``A`` = ``W`` (see ``docs/tunableop.md`` section 1.3).

Dtypes use torch's names without the ``torch.`` prefix (``bfloat16``, ``float8_e4m3fn``...). Every format
module converts its own spelling at its edge.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Literal

OpKind = Literal["gemm", "gemm_and_bias", "gemm_strided_batched", "scaled_gemm"]
OP_KINDS: tuple[OpKind, ...] = ("gemm", "gemm_and_bias", "gemm_strided_batched", "scaled_gemm")

WILDCARD = "*"
TENSORWISE, ROWWISE = 0, 1  # scale recipes of the 2.15 CUDA scaled key (``ast_``/``bst_``: torch's ScalingType)
TENSORWISE_E4M3 = {  # a scaled_gemm's fields for torch._scaled_mm of e4m3 operands, fp32 tensorwise scales, bf16 out
    "a_type": "float8_e4m3fn",
    "b_type": "float8_e4m3fn",
    "c_type": "bfloat16",
    "scale_a_type": "float32",
    "scale_b_type": "float32",
    "scale_a_recipe": TENSORWISE,
    "scale_b_recipe": TENSORWISE,
    "output_scale": False,
    "fast_accum": False,
}
Dim = int | Literal["*"]

DTYPES: dict[str, int] = {
    # name -> size in bits
    "float64": 64,
    "float32": 32,
    "float16": 16,
    "bfloat16": 16,
    "complex64": 64,
    "complex128": 128,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
    "float8_e4m3fnuz": 8,
    "float8_e5m2fnuz": 8,
    "float8_e8m0fnu": 8,
    "float4_e2m1fn_x2": 8,
}
COMPUTE_TYPES = ("float32", "tf32", "float64", "complex64", "complex128")

# Datasheet peaks, dense 16-bit matrix flop/s and HBM bytes/s, by a name the device reports (first match).
PEAKS = (
    ("H200", (989e12, 4.8e12)),
    ("H100", (989e12, 3.35e12)),
    ("MI350", (2.3e15, 8.0e12)),
    ("MI325", (1.307e15, 6.0e12)),
    ("MI300", (1.307e15, 5.3e12)),
)
DEFAULT_PEAK = PEAKS[1][1]


def peak_of(device_name: str) -> tuple[float, float]:
    """The datasheet peaks of ``device_name`` (an H100's where the name is not known)."""
    return next((peak for name, peak in PEAKS if name in device_name), DEFAULT_PEAK)


def dtype_bytes(dtype: str) -> float:
    """Bytes one element of ``dtype`` takes in memory."""
    return DTYPES[dtype] / 8


@dataclass(frozen=True)
class GemmProblem:
    """One GEMM in the BLAS frame, as TunableOp keys it.

    ``lda``/``ldb``/``ldc`` are ``None`` where the source did not record them (torch 2.6 keys); any
    dimension may be ``"*"`` in a wildcard key (torch 2.15 ``dynamic_dims_mask``). They are kept as torch
    recorded them, also under the BLAS minimum (torch writes ``ld = 1`` for one-column operands): the
    edges that hand them to a library use ``blas_lds``.

    Scaled-GEMM fields stay ``None`` for other ops: ``rowwise`` is the 2.7-2.14 ``rw_`` flag; the 2.15
    CUDA key instead carries the scale dtypes and recipes (``scale_a_recipe``: 0 tensorwise, 1 rowwise),
    ``output_scale`` (``dscale_``) and ``fast_accum``. ``swizzle`` is the ROCm 2.15 MX ``_swz_a_b`` pair.
    ``compute_suffix`` is the 2.15 ``_compute_<x>`` tag (``"bf16x9_r"`` for BF16x9-emulated fp32).
    """

    op: OpKind
    transa: Literal["N", "T"]
    transb: Literal["N", "T"]
    m: Dim
    n: Dim
    k: Dim
    lda: Dim | None = None
    ldb: Dim | None = None
    ldc: Dim | None = None
    batch: Dim = 1
    a_type: str = "bfloat16"
    b_type: str = "bfloat16"
    c_type: str = "bfloat16"
    compute_type: str = "float32"
    compute_suffix: str | None = None
    bias_type: str | None = None
    rowwise: bool | None = None
    scale_a_type: str | None = None
    scale_b_type: str | None = None
    scale_a_recipe: int | None = None
    scale_b_recipe: int | None = None
    output_scale: bool | None = None
    fast_accum: bool | None = None
    swizzle: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.op not in OP_KINDS:
            raise ValueError(f"unknown op kind {self.op!r}; known: {', '.join(OP_KINDS)}")
        for name in ("transa", "transb"):
            if getattr(self, name) not in ("N", "T"):
                raise ValueError(f"{name} must be 'N' or 'T', not {getattr(self, name)!r}")
        for name in ("m", "n", "k", "batch"):
            _check_dim(name, getattr(self, name))
        lds = (self.lda, self.ldb, self.ldc)
        if any(ld is None for ld in lds) and not all(ld is None for ld in lds):
            raise ValueError("lda, ldb and ldc are recorded together or not at all")
        for name, ld in zip(("lda", "ldb", "ldc"), lds, strict=True):
            if ld is not None:
                _check_dim(name, ld, low=0)  # torch records ld 0 for a one-column operand (blas_lds raises it)
        if self.op != "gemm_strided_batched" and self.batch != 1:
            raise ValueError(f"batch {self.batch} on a {self.op}: only gemm_strided_batched is batched")
        for name in ("a_type", "b_type", "c_type", "bias_type", "scale_a_type", "scale_b_type"):
            value = getattr(self, name)
            if value is not None and value not in DTYPES:
                raise ValueError(f"unknown {name} {value!r}")
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"unknown compute_type {self.compute_type!r}; known: {', '.join(COMPUTE_TYPES)}")
        scaled_fields = (self.rowwise, self.scale_a_type, self.output_scale, self.swizzle, self.bias_type)
        if self.op != "scaled_gemm" and any(f is not None for f in scaled_fields):
            raise ValueError(f"scale, bias-dtype and swizzle fields belong to scaled_gemm, not {self.op}")

    def stored_rows(self) -> tuple[Dim, Dim, Dim]:
        """Rows of A, B and C as stored (column-major): the least leading dimensions BLAS allows."""
        return (self.m if self.transa == "N" else self.k, self.k if self.transb == "N" else self.n, self.m)

    def blas_lds(self) -> tuple[int, int, int]:
        """``(lda, ldb, ldc)`` as a BLAS library accepts them: packed where the key recorded none, and never
        under the stored row count. torch records ``ld = 1`` for an operand with one column (e.g. the
        rotary outer product ``tn_64_1_1_ld_1_1_1``), and ``ld = 0`` for one in a compiled decode at batch 1;
        one column makes every ld >= rows equivalent, so raising it changes nothing in memory. ``ld_notes``
        says which were raised."""
        if self.is_wildcard or WILDCARD in (self.lda, self.ldb, self.ldc):
            raise ValueError("a wildcard problem has no concrete leading dimensions")
        rows = self.stored_rows()
        if self.lda is None:
            return rows  # type: ignore[return-value]
        return tuple(max(ld, need) for ld, need in zip((self.lda, self.ldb, self.ldc), rows, strict=True))  # type: ignore[return-value]

    def ld_notes(self) -> list[str]:
        """One line per recorded leading dimension under its operand's row count (raised by ``blas_lds``)."""
        if self.lda is None or self.is_wildcard or WILDCARD in (self.lda, self.ldb, self.ldc):
            return []
        return [
            f"{name}={ld} < {need} rows: raised to {need} for BLAS"
            for name, ld, need in zip(
                ("lda", "ldb", "ldc"), (self.lda, self.ldb, self.ldc), self.stored_rows(), strict=True
            )
            if ld < need
        ]

    @property
    def has_bias(self) -> bool:
        """Whether a bias vector is added to the product (``gemm_and_bias``, or a scaled GEMM keyed with one)."""
        return self.op == "gemm_and_bias" or (self.op == "scaled_gemm" and self.bias_type is not None)

    @property
    def layout(self) -> str:
        """The op-signature layout, e.g. ``"TN"``."""
        return self.transa + self.transb

    @property
    def is_wildcard(self) -> bool:
        return WILDCARD in (self.m, self.n, self.k, self.batch)

    def token_family(self) -> GemmProblem | None:
        """This GEMM at every token count (BLAS ``n``, the rows of ``F.linear``'s activation): itself with
        ``n = 1``, and the one leading dimension that can follow ``n`` (``ldb`` of a ``transb = T`` operand,
        whose stored rows are ``n``) as 0 where it is packed (it moves with ``n``); any other ld is a stride of
        a larger buffer and stays. None for a wildcard key, served only as recorded."""
        if self.is_wildcard or WILDCARD in (self.lda, self.ldb, self.ldc):
            return None
        packed_b = self.transb == "T" and self.ldb == self.n
        return replace(self, n=1, ldb=0 if packed_b else self.ldb)

    def with_tokens(self, n: int) -> GemmProblem | None:
        """This GEMM at ``n`` tokens, a packed n-bound ``ldb`` moved with ``n``; None where a fixed ``ldb`` could
        not hold them."""
        if self.transb != "T" or self.ldb is None:
            return replace(self, n=n)
        if self.ldb == self.n:
            return replace(self, n=n, ldb=n)
        return replace(self, n=n) if self.ldb >= n else None  # type: ignore[operator]

    def flops(self) -> int:
        """Floating-point operations of one call (2 per multiply-add); 0 for a wildcard problem."""
        if self.is_wildcard:
            return 0
        return 2 * self.m * self.n * self.k * self.batch

    def touched_bytes(self) -> float:
        """Bytes one call must move at least: A, B and C once each (no ld padding; bias and scales ignored)."""
        m, n, k = self.m, self.n, self.k
        return (
            m * k * dtype_bytes(self.a_type) + k * n * dtype_bytes(self.b_type) + m * n * dtype_bytes(self.c_type)
        ) * self.batch

    def roofline_us(self, flop_rate: float, byte_rate: float) -> float:
        """The least time one call can take at these rates (flop/s, bytes/s): its flops or its bytes, whichever
        is longer, in us."""
        return max(self.flops() / flop_rate, self.touched_bytes() / byte_rate) * 1e6

    def floor_us(self, device_name: str = "") -> float:
        """The datasheet roofline floor of one call on ``device_name`` (``roofline_us`` at its peaks; FP8
        operands run at twice the 16-bit rate on the GPUs listed)."""
        flops, bandwidth = peak_of(device_name)
        return self.roofline_us(flops * (2 if dtype_bytes(self.a_type) == 1 else 1), bandwidth)

    def label(self, with_lds: bool = False) -> str:
        """A short readable name: ``gemm 28672x1x4096 bf16``, ``scaled_gemm 28672x512x4096 e4m3 -> bf16``,
        ``gemm_strided_batched 64x64x128 B=32 f16``, plus ``ld 4096/4096/28672`` with ``with_lds``."""
        a, c = _short_type(self.a_type), _short_type(self.c_type)
        types = f"{a} -> {c}" if a != c else a
        text = f"{self.op} {self.m}x{self.n}x{self.k}" + (f" B={self.batch}" if self.batch != 1 else "") + f" {types}"
        if self.op == "scaled_gemm" and (self.rowwise or ROWWISE in (self.scale_a_recipe, self.scale_b_recipe)):
            text += " rowwise"
        if self.bias_type:
            text += f" +bias {_short_type(self.bias_type)}"
        if with_lds and self.lda is not None:
            text += f" ld {self.lda}/{self.ldb}/{self.ldc}"
        return text

    def sort_key(self) -> tuple:
        """A total order over problems (wildcards sort after numbers)."""
        return tuple(
            (1, 0) if v == WILDCARD else (0, v) if isinstance(v, int) else (2, str(v))
            for v in (
                self.op,
                self.a_type,
                self.c_type,
                self.layout,
                self.m,
                self.n,
                self.k,
                self.batch,
                self.lda,
                self.ldb,
                self.ldc,
                self.compute_type,
                self.compute_suffix,
                self.bias_type,
                self.rowwise,
                self.scale_a_type,
                self.scale_a_recipe,
                self.scale_b_recipe,
            )
        )

    def to_dict(self) -> dict:
        """Plain JSON-able fields (the swizzle pair as a list)."""
        data = asdict(self)
        if self.swizzle is not None:
            data["swizzle"] = list(self.swizzle)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> GemmProblem:
        data = dict(data)
        if data.get("swizzle") is not None:
            data["swizzle"] = tuple(data["swizzle"])
        return cls(**data)


def _check_dim(name: str, value: object, low: int = 1) -> None:
    if value == WILDCARD:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a positive" if low == 1 else "a non-negative"
        raise ValueError(f"{name} must be {kind} integer or '*', not {value!r}")


def _short_type(dtype: str) -> str:
    """``bfloat16`` -> ``bf16``, ``float8_e4m3fn`` -> ``e4m3``, ``float8_e5m2fnuz`` -> ``e5m2fnuz``."""
    short = {
        "bfloat16": "bf16",
        "float16": "f16",
        "float32": "f32",
        "float64": "f64",
        "float8_e4m3fn": "e4m3",
        "float8_e5m2": "e5m2",
        "float8_e4m3fnuz": "e4m3fnuz",
        "float8_e5m2fnuz": "e5m2fnuz",
    }
    return short.get(dtype, dtype)


def distinct_labels(keys: dict[str, GemmProblem]) -> dict[str, str]:
    """Each key's ``label``, with the leading dimensions added where two keys would otherwise read alike."""
    plain = {key: problem.label() for key, problem in keys.items()}
    counts = Counter(plain.values())
    return {key: keys[key].label(with_lds=True) if counts[text] > 1 else text for key, text in plain.items()}

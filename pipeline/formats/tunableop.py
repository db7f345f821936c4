"""PyTorch TunableOp files: untuned (``PYTORCH_TUNABLEOP_RECORD_UNTUNED``) and results CSVs.

Grammar (``docs/tunableop.md`` sections 1-2), every torch version from 2.6 to 2.15::

    Validator,<KEY>,<VALUE>
    <OpSig>,<ParamSig>[,<Solution>[,<TimeMs>]][,BLAS_PARAMS: <yaml with commas>]

    OpSig    GemmTunableOp_<T>_<A><B> | GemmAndBiasTunableOp_<T>_<A><B>
             | GemmStridedBatchedTunableOp_<T>_<A><B> | ScaledGemmTunableOp_<AT>_<BT>_<CT>_<A><B>
    ParamSig <a><b>_M_N_K[_B_<batch>][_ld_LDA_LDB_LDC][<scaled part> | _compute_<suffix>]

The scaled part is ``_rw_<0|1>_bias_<None|dt>[_swz_<a>_<b>]`` (2.7-2.14, ROCm 2.15) or the 2.15 CUDA form
``_a_<dt>_b_<dt>_c_<dt>_as_<dt>_bs_<dt>_ast_<i>_bst_<i>_dscale_<0|1>_fast_<0|1>_bias_<None|dt>``. Any of
M, N, K, batch and the ld's may be ``*`` (2.15 wildcard keys). Keys are kept verbatim, so a file that
torch wrote round-trips byte for byte; ``format_key`` rebuilds the canonical key of a ``GemmProblem``.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import atomic_write_text
from ..errors import BadInput, clip
from ..problem import WILDCARD, GemmProblem, OpKind

OP_NAMES: dict[str, OpKind] = {
    "GemmTunableOp": "gemm",
    "GemmAndBiasTunableOp": "gemm_and_bias",
    "GemmStridedBatchedTunableOp": "gemm_strided_batched",
    "ScaledGemmTunableOp": "scaled_gemm",
}
OP_SIGNATURE_NAMES: dict[OpKind, str] = {kind: name for name, kind in OP_NAMES.items()}

# ``TypeName<T>()`` spellings of the op signature -> (dtype, compute type). ``Float`` is read as an alias
# (torch 2.14+ ``dtype_dict`` accepts it); the writer always spells fp32 ``float`` or ``tf32``.
TYPE_NAMES: dict[str, tuple[str, str]] = {
    "float": ("float32", "float32"),
    "tf32": ("float32", "tf32"),
    "Float": ("float32", "float32"),
    "double": ("float64", "float64"),
    "Half": ("float16", "float32"),
    "BFloat16": ("bfloat16", "float32"),
    "c10::complex<float>": ("complex64", "complex64"),
    "c10::complex<double>": ("complex128", "complex128"),
    "Float8_e4m3fn": ("float8_e4m3fn", "float32"),
    "Float8_e5m2": ("float8_e5m2", "float32"),
    "Float8_e4m3fnuz": ("float8_e4m3fnuz", "float32"),
    "Float8_e5m2fnuz": ("float8_e5m2fnuz", "float32"),
    "Float8_e8m0fnu": ("float8_e8m0fnu", "float32"),
    "Float4_e2m1fn_x2": ("float4_e2m1fn_x2", "float32"),
}
_TYPE_NAME_OF = {
    "float64": "double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
}

# ``at::toString(ScalarType)`` spellings used inside parameter signatures (bias and 2.15 CUDA fields).
SCALAR_NAMES: dict[str, str] = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2": "float8_e5m2",
    "Float8_e4m3fnuz": "float8_e4m3fnuz",
    "Float8_e5m2fnuz": "float8_e5m2fnuz",
    "Float8_e8m0fnu": "float8_e8m0fnu",
    "Float4_e2m1fn_x2": "float4_e2m1fn_x2",
}
_SCALAR_NAME_OF = {dtype: name for name, dtype in SCALAR_NAMES.items()}

DEFAULT = "Default"  # TunableOp's solution name of the library's own pick

BLAS_PARAMS_PREFIX = "BLAS_PARAMS:"


def _alternation(names: Iterable[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


_T = _alternation(TYPE_NAMES)
_S = _alternation(SCALAR_NAMES)
_OP_RE = re.compile(r"(?P<name>[A-Za-z]+TunableOp)_(?P<types>.+)_(?P<layout>[^_]*)")
_TYPES_RE = {
    1: re.compile(rf"(?P<a>{_T})"),
    3: re.compile(rf"(?P<a>{_T})_(?P<b>{_T})_(?P<c>{_T})"),
}
_DIM = re.compile(r"[1-9][0-9]*|\*")
_LD = re.compile(r"0|[1-9][0-9]*|\*")  # torch records ld 0 for a one-column operand (compiled decode at batch 1, H100)
_HEAD_RE = re.compile(r"(?P<ta>[^_])(?P<tb>[^_])_(?P<m>[^_]*)_(?P<n>[^_]*)_(?P<k>[^_]*)")
_BATCH_RE = re.compile(r"_B_(?P<batch>[^_]*)")
_LD_RE = re.compile(r"_ld_(?P<lda>[^_]*)_(?P<ldb>[^_]*)_(?P<ldc>[^_]*)")
_COMPUTE_RE = re.compile(r"_compute_(?P<suffix>[A-Za-z0-9_]+)")
_ROWWISE_RE = re.compile(rf"_rw_(?P<rw>[01])_bias_(?P<bias>None|{_S})(?:_swz_(?P<swa>[^_]+)_(?P<swb>[^_]+))?")
_CUDA_SCALED_RE = re.compile(
    rf"_a_(?P<a>{_S})_b_(?P<b>{_S})_c_(?P<c>{_S})_as_(?P<sa>{_S})_bs_(?P<sb>{_S})"
    rf"_ast_(?P<ast>[0-9]+)_bst_(?P<bst>[0-9]+)_dscale_(?P<dscale>[01])_fast_(?P<fast>[01])"
    rf"_bias_(?P<bias>None|{_S})"
)


class TunableOpFormatError(BadInput):
    """A line that is not TunableOp grammar; the message starts with ``path:line:``."""


def _dim(name: str, token: str, pattern: re.Pattern = _DIM, what: str = "a positive") -> int | str:
    if not pattern.fullmatch(token):
        raise ValueError(f"{name} {token!r} is not {what} integer or '*'")
    return token if token == WILDCARD else int(token)


@functools.lru_cache(maxsize=256)  # a file holds a few op signatures over thousands of rows
def _parse_op_signature(op_signature: str) -> tuple[OpKind, str, dict[str, str]]:
    """Return the op kind, its layout (e.g. ``"TN"``) and the dtype fields of the signature (read only: the
    cache shares them)."""
    match = _OP_RE.fullmatch(op_signature)
    if not match:
        raise ValueError(f"op signature {op_signature!r} is not <Op>TunableOp_<dtype>_<layout>")
    name, types, layout = match["name"], match["types"], match["layout"]
    if name not in OP_NAMES:
        raise ValueError(f"unknown op {name!r}; known: {', '.join(OP_NAMES)}")
    if not re.fullmatch("[NT][NT]", layout):
        raise ValueError(f"layout {layout!r} in {op_signature!r} must be two of N/T, e.g. 'TN'")
    kind = OP_NAMES[name]
    count = 3 if kind == "scaled_gemm" else 1
    typed = _TYPES_RE[count].fullmatch(types)
    if not typed:
        wanted = "<AT>_<BT>_<CT>" if count == 3 else "<T>"
        raise ValueError(f"dtype {types!r} of {name} is not {wanted} with T one of: {', '.join(TYPE_NAMES)}")
    return kind, layout, typed.groupdict()


def parse_key(op_signature: str, params_signature: str) -> GemmProblem:
    """Parse one TunableOp key into a ``GemmProblem``; ``ValueError`` says what is wrong."""
    kind, layout, types = _parse_op_signature(op_signature)
    head = _HEAD_RE.match(params_signature)
    if not head:
        raise ValueError(f"params {params_signature!r} do not start with <ta><tb>_M_N_K")
    if head["ta"] + head["tb"] != layout.lower():
        raise ValueError(f"params layout {head['ta'] + head['tb']!r} does not match op layout {layout!r}")
    fields: dict = {name: _dim(name, head[name]) for name in ("m", "n", "k")}
    rest = params_signature[head.end() :]

    batch = _BATCH_RE.match(rest)
    if kind == "gemm_strided_batched":
        if not batch:
            raise ValueError("a GemmStridedBatched key needs _B_<batch> after M_N_K")
        fields["batch"] = _dim("batch", batch["batch"])
        rest = rest[batch.end() :]
    elif batch:
        raise ValueError(f"_B_<batch> on a non-batched op {op_signature!r}")

    ld = _LD_RE.match(rest)
    if ld:
        fields.update({name: _dim(name, ld[name], _LD, "a non-negative") for name in ("lda", "ldb", "ldc")})
        rest = rest[ld.end() :]
    elif rest.startswith("_ld_"):
        raise ValueError(f"{rest!r} is not _ld_LDA_LDB_LDC")

    dtype, compute = TYPE_NAMES[types["a"]]
    fields.update(a_type=dtype, b_type=dtype, c_type=dtype, compute_type=compute)
    if kind == "scaled_gemm":
        fields.update(
            a_type=TYPE_NAMES[types["a"]][0],
            b_type=TYPE_NAMES[types["b"]][0],
            c_type=TYPE_NAMES[types["c"]][0],
            compute_type="float32",
        )
        rest = _parse_scaled_part(rest, fields, has_ld=ld is not None)
    else:
        compute_suffix = _COMPUTE_RE.fullmatch(rest)
        if compute_suffix:
            fields["compute_suffix"] = compute_suffix["suffix"]
            rest = ""
    if rest:
        raise ValueError(f"unexpected {rest!r} at the end of params {params_signature!r}")
    return GemmProblem(op=kind, transa=layout[0], transb=layout[1], **fields)


def _parse_scaled_part(rest: str, fields: dict, *, has_ld: bool) -> str:
    """Fill the scaled-GEMM fields from ``rest``; return what was not consumed."""
    if not rest and not has_ld:
        return rest  # torch 2.6: tn_M_N_K only
    rowwise = _ROWWISE_RE.fullmatch(rest)
    if rowwise:
        fields["rowwise"] = rowwise["rw"] == "1"
        fields["bias_type"] = SCALAR_NAMES.get(rowwise["bias"])
        if rowwise["swa"] is not None:
            fields["swizzle"] = (rowwise["swa"], rowwise["swb"])
        return ""
    cuda = _CUDA_SCALED_RE.fullmatch(rest)
    if not cuda:
        raise ValueError(
            f"scaled GEMM params end {rest!r}, neither _rw_<0|1>_bias_<dt> nor the 2.15 CUDA "
            "_a_.._b_.._c_.._as_.._bs_.._ast_.._bst_.._dscale_.._fast_.._bias_.. form"
        )
    for letter in "abc":
        if SCALAR_NAMES[cuda[letter]] != fields[f"{letter}_type"]:
            raise ValueError(
                f"params {letter}_{cuda[letter]} disagrees with the op signature's {fields[f'{letter}_type']}"
            )
    fields.update(
        scale_a_type=SCALAR_NAMES[cuda["sa"]],
        scale_b_type=SCALAR_NAMES[cuda["sb"]],
        scale_a_recipe=int(cuda["ast"]),
        scale_b_recipe=int(cuda["bst"]),
        output_scale=cuda["dscale"] == "1",
        fast_accum=cuda["fast"] == "1",
        bias_type=SCALAR_NAMES.get(cuda["bias"]),
    )
    return ""


def type_name(dtype: str, compute_type: str = "float32") -> str:
    """The ``TypeName<T>()`` spelling of a dtype in an op signature."""
    if dtype == "float32":
        return "tf32" if compute_type == "tf32" else "float"
    return _TYPE_NAME_OF.get(dtype) or _SCALAR_NAME_OF[dtype]


def dtype_signature(problem: GemmProblem) -> str:
    """The dtype part of the op signature: ``BFloat16``, or ``AT_BT_CT`` for a scaled GEMM."""
    if problem.op == "scaled_gemm":
        return "_".join(type_name(t) for t in (problem.a_type, problem.b_type, problem.c_type))
    return type_name(problem.a_type, problem.compute_type)


def format_key(problem: GemmProblem) -> tuple[str, str]:
    """The canonical ``(op signature, params signature)`` torch records for ``problem``."""
    op_signature = f"{OP_SIGNATURE_NAMES[problem.op]}_{dtype_signature(problem)}_{problem.layout}"
    params = f"{problem.layout.lower()}_{problem.m}_{problem.n}_{problem.k}"
    if problem.op == "gemm_strided_batched":
        params += f"_B_{problem.batch}"
    if problem.lda is not None:
        params += f"_ld_{problem.lda}_{problem.ldb}_{problem.ldc}"
    bias = _SCALAR_NAME_OF[problem.bias_type] if problem.bias_type else "None"
    if problem.rowwise is not None:
        params += f"_rw_{int(problem.rowwise)}_bias_{bias}"
        if problem.swizzle:
            params += f"_swz_{problem.swizzle[0]}_{problem.swizzle[1]}"
    elif problem.scale_a_type is not None:
        s = _SCALAR_NAME_OF
        params += (
            f"_a_{s[problem.a_type]}_b_{s[problem.b_type]}_c_{s[problem.c_type]}"
            f"_as_{s[problem.scale_a_type]}_bs_{s[problem.scale_b_type]}"
            f"_ast_{problem.scale_a_recipe}_bst_{problem.scale_b_recipe}"
            f"_dscale_{int(bool(problem.output_scale))}_fast_{int(bool(problem.fast_accum))}_bias_{bias}"
        )
    if problem.compute_suffix:
        params += f"_compute_{problem.compute_suffix}"
    return op_signature, params


@dataclass(frozen=True)
class TunableOpEntry:
    """One GEMM row: a key, and for results files the solution and its time (text kept verbatim)."""

    op_signature: str
    params_signature: str
    problem: GemmProblem
    solution: str | None = None
    time_text: str | None = None
    blas_params: str | None = None

    @classmethod
    def from_problem(
        cls, problem: GemmProblem, solution: str | None = None, time_ms: float | None = None
    ) -> TunableOpEntry:
        op_signature, params = format_key(problem)
        time_text = None if time_ms is None else f"{time_ms:.6g}"
        return cls(op_signature, params, problem, solution, time_text)

    @property
    def time_ms(self) -> float | None:
        """Recorded time in milliseconds; torch reads a missing time as 0."""
        if self.solution is None:
            return None
        return float(self.time_text) if self.time_text is not None else 0.0

    def to_line(self) -> str:
        fields = [self.op_signature, self.params_signature]
        if self.solution is not None:
            fields.append(self.solution)
            if self.time_text is not None:
                fields.append(self.time_text)
        if self.blas_params is not None:
            fields.append(self.blas_params)
        return ",".join(fields)


@dataclass(frozen=True)
class SkippedLine:
    path: str
    line: int
    reason: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class TunableOpFile:
    """A parsed file: validators in file order, GEMM entries in file order, lines skipped (lenient)."""

    path: str
    validators: dict[str, str] = field(default_factory=dict)
    entries: list[TunableOpEntry] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)

    @property
    def is_results(self) -> bool:
        return bool(self.validators) or any(e.solution is not None for e in self.entries)

    def distinct_counts(self) -> list[tuple[TunableOpEntry, int]]:
        """Each distinct entry object (repeated lines share one) with how often it occurs, in file order."""
        counts = Counter(map(id, self.entries))
        by_id = dict(zip(map(id, self.entries), self.entries, strict=True))
        return [(by_id[key], count) for key, count in counts.items()]


def _parse_entry(line: str) -> TunableOpEntry:
    fields = line.split(",", 4)
    if len(fields) < 2:
        raise ValueError("expected at least <op signature>,<params signature>")
    op_signature, params = fields[0], fields[1]
    extra = fields[2:]
    blas_params = None
    for i, text in enumerate(extra):
        if text.startswith(BLAS_PARAMS_PREFIX):
            blas_params = ",".join(extra[i:])
            extra = extra[:i]
            break
    if len(extra) > 2:
        raise ValueError(f"unexpected field {extra[2]!r} after the time (only BLAS_PARAMS may follow)")
    solution = extra[0] if extra else None
    time_text = extra[1] if len(extra) > 1 else None
    if solution is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", solution):
        raise ValueError(f"solution name {solution!r} is empty or not an identifier")
    if time_text is not None:
        try:
            time_ms = float(time_text)
        except ValueError:
            raise ValueError(f"time {time_text!r} is not a number of milliseconds") from None
        if not math.isfinite(time_ms) or time_ms < 0 or time_text != time_text.strip():
            raise ValueError(f"time {time_text!r} must be a finite, non-negative number")
    problem = parse_key(op_signature, params)
    return TunableOpEntry(op_signature, params, problem, solution, time_text, blas_params)


_BLANK = object()


def _classify(raw: bytes | str) -> object:
    """One line as it stands, parsed once however often it repeats: an entry, ``_BLANK``, a validator line
    (``("validator", text)``), or the ``ValueError`` that says what is wrong with it."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as err:
        return ValueError(f"not UTF-8 text ({err.reason})")
    line = text.removesuffix("\n").removesuffix("\r")
    if not line.strip():
        return _BLANK
    if line.startswith("Validator,"):
        return ("validator", line)
    try:
        return _parse_entry(line)
    except ValueError as err:
        return err


def parse_lines(lines: Iterable[bytes | str], path: str = "<text>", *, lenient: bool = False) -> TunableOpFile:
    """Parse TunableOp CSV lines (with or without their newline). Strict: the first bad line raises
    ``TunableOpFormatError`` naming ``path:line``; lenient: it is skipped and listed. A line that repeats
    (record mode writes the same keys again on every run) is parsed once and shares its entry object.

    torch ends every line with a newline (docs/upstream.md, "How torch writes TunableOp files"), so a last line
    without one was cut (a full disk, a killed writer): it is kept only where it is as whole as the file's
    other entries (``_truncated``)."""
    result = TunableOpFile(path)
    seen: dict[bytes | str, object] = {}
    append = result.entries.append
    number, raw, item = 0, "", _BLANK
    for number, raw in enumerate(lines, start=1):
        item = seen.get(raw)
        if item is None:
            item = seen[raw] = _classify(raw)
        if type(item) is TunableOpEntry:
            append(item)
            continue
        if item is _BLANK or (isinstance(item, ValueError) and not _ended(raw)):
            continue  # a line without its newline is the last: judged below
        _refuse(result, number, raw, str(item) if isinstance(item, ValueError) else None, lenient, item)
    why = None if item is _BLANK or _ended(raw) else _truncated(result, item)
    if why:
        if type(item) is TunableOpEntry:
            result.entries.pop()
        _refuse(result, number, raw, f"truncated line (no newline at the end of the file: {why})", lenient)
    return result


def _ended(raw: bytes | str) -> bool:
    return raw.endswith(b"\n" if isinstance(raw, bytes) else "\n")


def _refuse(
    result: TunableOpFile, number: int, raw: bytes | str, reason: str | None, lenient: bool, item: object = None
) -> None:
    """Raise (strict) or list (lenient) line ``number``; ``reason`` None: it is a validator line to add."""
    try:
        if reason is None:
            _add_validator(result.validators, item[1])  # type: ignore[index]
            return
        raise ValueError(reason)
    except ValueError as err:
        if not lenient:
            raise TunableOpFormatError(f"{result.path}:{number}: {clip(str(err))}") from None
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        result.skipped.append(SkippedLine(result.path, number, clip(str(err)), clip(text.rstrip("\r\n"))))


def _truncated(result: TunableOpFile, item: object) -> str | None:
    """Why the file's last line, which lacks its newline, is not whole (None: it is): it does not parse, or
    it lacks what every other entry of the file has (leading dimensions, a solution, a time)."""
    if isinstance(item, ValueError):
        return str(item)
    if type(item) is not TunableOpEntry:
        return None
    others = [e for e in result.entries if e is not item]
    if not others:
        return None
    if "_ld_" not in item.params_signature and all("_ld_" in e.params_signature for e in others):
        return "its key has no _ld_ part, which every other key of the file has"
    if item.time_text is None and all(e.time_text is not None for e in others):
        return "it has no time, which every other row of the file has"
    return None


def parse_text(text: str, path: str = "<text>", *, lenient: bool = False) -> TunableOpFile:
    """Parse TunableOp CSV text (see ``parse_lines``)."""
    parts = text.split("\n")
    return parse_lines([part + "\n" for part in parts[:-1]] + parts[-1:], path, lenient=lenient)


def _add_validator(validators: dict[str, str], line: str) -> None:
    parts = line.split(",", 2)
    if len(parts) < 3 or not parts[1] or not parts[2]:
        raise ValueError("a validator line is Validator,<KEY>,<VALUE> with both non-empty")
    key, value = parts[1], parts[2]
    if key in validators:
        raise ValueError(f"validator {key} given twice ({validators[key]!r} and {value!r})")
    validators[key] = value


def read_file(path: str | Path, *, lenient: bool = False) -> TunableOpFile:
    """Read one untuned or results file, streamed line by line (see ``parse_lines``)."""
    with open(path, "rb") as handle:
        return parse_lines(handle, str(path), lenient=lenient)


def format_file(validators: dict[str, str], entries: Iterable[TunableOpEntry]) -> str:
    """CSV text: the validator block first, then one line per entry, as torch writes it."""
    lines = [f"Validator,{key},{value}" for key, value in validators.items()]
    lines += [entry.to_line() for entry in entries]
    return "".join(line + "\n" for line in lines)


def write_file(path: str | Path, validators: dict[str, str], entries: Iterable[TunableOpEntry]) -> None:
    """Write a results (validators given) or untuned (no validators) file atomically."""
    atomic_write_text(path, format_file(validators, entries))

"""hipblaslt-bench: its command line built from a ``GemmProblem``, and its output parsed.

Contract: ``docs/upstream.md``, "hipblaslt-bench" (hipBLASLt ``clients/benchmarks/client.cpp``,
``clients/include/argument_model.hpp``, ``testing_matmul.hpp``), checked against bench output published
for hipBLASLt 100200 (git ``de5c1aebb6``, MI350X) and 600 (``52776da``, MI300X):

* ``hipBLASLt version: N`` and ``hipBLASLt git version: G`` come first, then device lines.
* Per benchmarked solution: a header line ``[i]:transA,transB,...`` (``[i]transA,...`` without the colon in
  older builds) and a value line (indented in newer builds; values may carry a leading space). Columns are
  read by name: ``rotating_buffer``, ``flush``, ``splitK``, efficiency and adaptive-timing columns come and
  go between versions. Grouped GEMMs print ``(a,b,...)`` values that contain commas.
* With ``--print_kernel_info`` three lines follow: ``--Solution index: N``, ``--Solution name: S``,
  ``--kernel name: K``.
* When more than one solution ran, a ``Winner:`` line and the fastest solution's block close the output;
  a run of one solution has none.

The hipBLASLt frame is the BLAS frame TunableOp records (``formats/rocm.py``); leading dimensions are
handed over as ``GemmProblem.blas_lds`` (the bench refuses ld < rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import ToolError
from ..problem import GemmProblem

BENCH_TYPES = {
    "float16": "f16_r",
    "bfloat16": "bf16_r",
    "float32": "f32_r",
    "float64": "f64_r",
    "float8_e4m3fn": "f8_r",
    "float8_e5m2": "bf8_r",
    "float8_e4m3fnuz": "f8_fnuz_r",
    "float8_e5m2fnuz": "bf8_fnuz_r",
}  # the 2025 client's names (docs/upstream.md, hipblaslt-bench)
COMPUTE_TYPES = {"float32": "f32_r", "tf32": "xf32_r", "float64": "f64_r"}
TUNING_FILE_VERSION = 1200  # hipBLASLt 0.12.0 (ROCm 6.4) added HIPBLASLT_TUNING_FILE and the override file
NO_OCP_FP8 = ("gfx94", "gfx90")  # archs whose bench runs f8_r/bf8_r as the fnuz types (docs/upstream.md)


@dataclass(frozen=True)
class Generation:
    """What one hipblaslt-bench generation takes, by the ``hipBLASLt version`` it prints (major * 100000 +
    minor * 100 + patch): the 2024 tree (< 0.12, ROCm <= 6.3) spells the fnuz FP8 types ``f8_r``/``bf8_r``
    and has no tuning file; the 2025 tree (>= 0.12, ROCm 6.4+) takes ``f8_fnuz_r``/``bf8_fnuz_r`` and writes
    ``HIPBLASLT_TUNING_FILE`` (docs/upstream.md)."""

    version: int | None = None
    scales: str | None = None  # how its --scaleA takes a value, as its --help says (``scale_spelling_from_help``)

    @property
    def scale_spelling(self) -> str:
        """``letters`` (s|v) or ``numbers`` (1|2): what the help said, else what the version suggests."""
        return self.scales or ("numbers" if self.tuning_file else "letters")

    @property
    def tuning_file(self) -> bool:
        return self.version is not None and self.version >= TUNING_FILE_VERSION

    @property
    def name(self) -> str:
        return "2025" if self.tuning_file else "2024"

    def type_name(self, dtype: str) -> str | None:
        """The bench's name of ``dtype`` in this generation (None: it has none)."""
        if not self.tuning_file and dtype in ("float8_e4m3fnuz", "float8_e5m2fnuz"):
            return {"float8_e4m3fnuz": "f8_r", "float8_e5m2fnuz": "bf8_r"}[dtype]
        return BENCH_TYPES.get(dtype)

    @classmethod
    def of(cls, version: str | int | None) -> Generation:
        try:
            return cls(int(version)) if version is not None else cls()
        except ValueError:
            return cls()


_HEADER = re.compile(r"^\s*\[(?P<index>\d+)\]:?(?P<columns>.*transA.*)$")
_VERSION = re.compile(r"hipBLASLt version:\s*(?P<value>\S+)")
_GIT = re.compile(r"hipBLASLt git version:\s*(?P<value>\S+)")
_DEVICE = re.compile(r"Device ID \d+ : (?P<name>.*?)\s+(?P<arch>gfx[0-9a-f]+)\S*")
_KERNEL_INFO = re.compile(r"^\s*-*\s*(?P<what>Solution index|Solution name|kernel name):\s*(?P<value>.*?)\s*$")


class BenchFormatError(ToolError, ValueError):
    """Output that is not hipblaslt-bench's; the message starts with ``source:line:``."""


@dataclass(frozen=True)
class BenchOptions:
    """How each problem is benchmarked (the settings find_exact's template uses, by default). ``flush`` is on
    for every run: the 2025 bench turns it on by itself under ``HIPBLASLT_TUNING_FILE`` (a bool option is a pure
    flag, it cannot be turned off), so the heuristic and index runs take it too, and all runs compare alike."""

    cold_iters: int = 20
    iters: int = 100
    rotating_mb: int = 512
    flush: bool = True
    splitk: tuple[int, ...] = ()


def unsupported_reason(
    problem: GemmProblem, generation: Generation | None = None, arch: str | None = None
) -> str | None:
    """Why hipblaslt-bench of ``generation`` on ``arch`` cannot run ``problem`` as recorded (None when it can)."""
    generation = generation or Generation()
    if problem.is_wildcard:
        return "wildcard key: tune the concrete shapes it stands for"
    if problem.op == "scaled_gemm":
        reason = scaled_reason(problem)
        if reason:
            return reason
    for name in ("a_type", "b_type", "c_type"):
        dtype = getattr(problem, name)
        if generation.type_name(dtype) is None:
            return f"{name} {dtype} has no hipblaslt-bench type"
        if ocp_fp8_on_fnuz_arch(dtype, arch):
            return (
                f"{name} {dtype} is OCP FP8, which {arch} does not run: its bench runs f8_r/bf8_r as the fnuz "
                "types, another problem"
            )
    if problem.compute_type not in COMPUTE_TYPES or problem.compute_suffix:
        return f"compute type {problem.compute_type}{problem.compute_suffix or ''} has no hipblaslt-bench type"
    return None


FP8_TYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


OCP_FP8_ONLY = ("gfx95",)  # FP8 is OCP alone there: upstream gfx950 logic names F8/B8, never F8N (docs/upstream.md)


def fnuz_fp8_on_ocp_arch(dtype: str, arch: str | None) -> bool:
    """Whether ``dtype`` is an fnuz FP8 type on an arch whose FP8 is OCP alone (``OCP_FP8_ONLY``)."""
    return dtype in ("float8_e4m3fnuz", "float8_e5m2fnuz") and (arch or "").startswith(OCP_FP8_ONLY)


def ocp_fp8_on_fnuz_arch(dtype: str, arch: str | None) -> bool:
    """Whether ``dtype`` is an OCP FP8 type on an arch whose FP8 is the fnuz kind (``NO_OCP_FP8``)."""
    return dtype in ("float8_e4m3fn", "float8_e5m2") and (arch or "").startswith(NO_OCP_FP8)


def scaled_reason(problem: GemmProblem) -> str | None:
    """Why a scaled GEMM key cannot be run as what it is (None: it can): the bench expresses FP8 inputs with one
    float scale for A and one for B (tensorwise: a scalar; rowwise: a vector), nothing else. Never run it
    as a plain GEMM: without its scales it is another problem."""
    if problem.scale_a_recipe is not None:
        return (
            "a CUDA scaled-GEMM key (torch 2.15's _a_.._ast_.. form): ROCm torch records _rw_<0|1>, so this "
            "key is not one a ROCm workload looks up"
        )
    if problem.swizzle:
        return "MX block-scaled GEMM (swizzled e8m0 scales, _swz_): hipblaslt-bench runs here take no block scales"
    if problem.a_type not in FP8_TYPES or problem.b_type not in FP8_TYPES:
        return (
            f"scaled GEMM of {problem.a_type} x {problem.b_type}: only FP8 inputs with tensorwise or rowwise "
            "float scales are driven"
        )
    return None


SCALE_VALUES = {"letters": ("s", "v"), "numbers": ("1", "2")}  # (scalar, vector) per spelling


def scale_spelling_from_help(text: str) -> str | None:
    """How ``--scaleA`` takes its value, read from the bench's ``--help`` (docs/upstream.md, "hipblaslt-bench"):
    ``letters`` where its line says ``s = scalar`` (the 2024 client), ``numbers`` where it says ``0 = None`` or
    ``1 = scalar`` (the 2025 one); None where the help has no such line or says neither."""
    line = next((line for line in text.splitlines() if line.lstrip().startswith("--scaleA")), "")
    if re.search(r"\bs = scalar\b", line):
        return "letters"
    if re.search(r"\b(0 = None|1 = scalar)\b", line):
        return "numbers"
    return None


def scale_args(problem: GemmProblem, generation: Generation) -> list[str]:
    """The A and B scale options of a scaled GEMM, as ``generation`` spells them (docs/upstream.md): a scalar
    each for tensorwise (``_rw_0``, and torch 2.6's keys, which had no rowwise), a vector each for rowwise
    (``_rw_1``); s|v or 1|2 as the installed bench's help says (a bench that reads letters takes ``1`` for no
    scale, silently)."""
    scalar, vector = SCALE_VALUES[generation.scale_spelling]
    value = vector if problem.rowwise else scalar
    return ["--scaleA", value, "--scaleB", value]


def problem_args(problem: GemmProblem, generation: Generation | None = None) -> list[str]:
    """The problem's options: transposes, sizes, ld's, batch and strides, types (as ``generation`` names them),
    bias."""
    generation = generation or Generation()
    lda, ldb, ldc = problem.blas_lds()
    cols = (
        problem.k if problem.transa == "N" else problem.m,
        problem.n if problem.transb == "N" else problem.k,
        problem.n,
    )
    args = [
        "--transA",
        problem.transa,
        "--transB",
        problem.transb,
        "-m",
        str(problem.m),
        "-n",
        str(problem.n),
        "-k",
        str(problem.k),
        "--lda",
        str(lda),
        "--ldb",
        str(ldb),
        "--ldc",
        str(ldc),
        "--ldd",
        str(ldc),
        "--batch_count",
        str(problem.batch),
    ]
    if problem.batch != 1:
        strides = [ld * col for ld, col in zip((lda, ldb, ldc, ldc), (*cols, cols[2]), strict=True)]
        args += [
            item for flag, s in zip(("a", "b", "c", "d"), strides, strict=True) for item in (f"--stride_{flag}", str(s))
        ]
    name = generation.type_name
    args += [
        "--a_type",
        name(problem.a_type),
        "--b_type",
        name(problem.b_type),
        "--c_type",
        name(problem.c_type),
        "--d_type",
        name(problem.c_type),
        "--compute_type",
        COMPUTE_TYPES[problem.compute_type],
    ]
    if problem.op == "gemm_and_bias":
        args += ["--bias_vector", "--bias_type", name(problem.c_type)]
    if problem.op == "scaled_gemm":
        args += scale_args(problem, generation)
        if problem.bias_type:
            args += ["--bias_vector", "--bias_type", name(problem.bias_type)]
    return args


def bench_args(
    problem: GemmProblem,
    options: BenchOptions,
    device: int,
    method: str = "all",
    solution_index: int | None = None,
    generation: Generation | None = None,
) -> list[str]:
    """Arguments of one hipblaslt-bench run: ``method`` is ``all`` (every solution, the search),
    ``heuristic`` (the library's default pick, the baseline) or ``index`` (one solution by index)."""
    selection = {
        "all": ["--algo_method", "all", "--requested_solution", "-1"],
        "heuristic": ["--algo_method", "heuristic", "--requested_solution", "1"],
        "index": ["--algo_method", "index", "--solution_index", str(solution_index)],
    }[method]
    args = [
        *problem_args(problem, generation),
        *selection,
        "--api_method",
        "cpp",
        "--print_kernel_info",
        "--device",
        str(device),
        "-j",
        str(options.cold_iters),
        "-i",
        str(options.iters),
    ]
    if options.rotating_mb:
        args += ["--rotating", str(options.rotating_mb)]
    if options.flush:
        args.append("--flush")
    for value in options.splitk:
        args += ["--splitk", str(value)]
    return args


@dataclass
class BenchSolution:
    """One benchmarked solution: its columns by name, and the kernel info lines."""

    fields: dict[str, str]
    index: int | None = None
    name: str | None = None
    kernel: str | None = None

    @property
    def us(self) -> float:
        return float(self.fields["us"])

    @property
    def gflops(self) -> float | None:
        value = self.fields.get("hipblaslt-Gflops")
        return float(value) if value else None


@dataclass
class BenchRun:
    version: str | None = None
    git_version: str | None = None
    device: str | None = None
    arch: str | None = None
    solutions: list[BenchSolution] = field(default_factory=list)
    winner: BenchSolution | None = None

    @property
    def fastest(self) -> BenchSolution:
        """The bench's ``Winner:`` block, or the only (or fastest) solution of a run without one."""
        return self.winner or min(self.solutions, key=lambda s: s.us)


def split_values(line: str) -> list[str]:
    """Comma-separated values, where a parenthesised group ``(a,b,...)`` (grouped GEMM) stays one value."""
    values, depth, current = [], 0, []
    for char in line.strip():
        if char == "," and depth == 0:
            values.append("".join(current).strip())
            current = []
            continue
        depth += char == "("
        depth -= char == ")"
        current.append(char)
    values.append("".join(current).strip())
    return values


def parse_output(text: str, source: str = "<hipblaslt-bench>") -> BenchRun:
    """Parse what one hipblaslt-bench run printed; ``BenchFormatError`` when it holds no result."""
    run = BenchRun()
    lines = text.splitlines()
    in_winner = False
    number = 0
    while number < len(lines):
        line = lines[number]
        number += 1
        if (match := _VERSION.search(line)) and run.version is None:
            run.version = match["value"]
        elif (match := _GIT.search(line)) and run.git_version is None:
            run.git_version = match["value"]
        elif (match := _DEVICE.search(line)) and run.device is None:
            run.device, run.arch = match["name"].strip(), match["arch"]
        elif line.strip().startswith("Winner:"):
            in_winner = True
        elif match := _HEADER.match(line):
            columns = [c.strip() for c in match["columns"].split(",")]
            if number >= len(lines):
                raise BenchFormatError(f"{source}:{number}: a header line with no value line after it")
            values = split_values(lines[number])
            number += 1
            if len(values) != len(columns) or "us" not in columns:
                raise BenchFormatError(
                    f"{source}:{number}: {len(values)} values for {len(columns)} columns "
                    f"({'no us column' if 'us' not in columns else 'a torn line'})"
                )
            solution = BenchSolution(dict(zip(columns, values, strict=True)))
            try:
                solution.us  # noqa: B018 (a number, or the output is corrupt)
            except ValueError:
                raise BenchFormatError(f"{source}:{number}: us {solution.fields['us']!r} is not a number") from None
            number = _kernel_info(lines, number, solution)
            if in_winner:
                run.winner = solution
            else:
                run.solutions.append(solution)
    if not run.solutions and run.winner is None:
        raise BenchFormatError(f"{source}: no result line (no '[i]:transA,...' header and values)")
    if run.winner is not None and not run.solutions:
        run.solutions.append(run.winner)
    return run


def _kernel_info(lines: list[str], number: int, solution: BenchSolution) -> int:
    """Read the ``--Solution index/name`` and ``--kernel name`` lines after a value line."""
    while number < len(lines) and (match := _KERNEL_INFO.match(lines[number])):
        if match["what"] == "Solution index":
            found = re.search(r"-?\d+", match["value"])
            solution.index = int(found[0]) if found else None
        elif match["what"] == "Solution name":
            solution.name = match["value"]
        else:
            solution.kernel = match["value"]
        number += 1
    return number

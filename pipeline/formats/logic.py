"""TensileLite library-logic YAML: load, validate, dump, and build Equality logic from tuning winners.

Two layouts (``docs/upstream.md``, "TensileLite library logic"):

* the 12-item list: ``[0] {MinimumRequiredVersion}``, ``[1]`` ScheduleName, ``[2]`` ArchitectureName (or
  ``{Architecture, CUCount}``), ``[3]`` DeviceNames, ``[4]`` ProblemType, ``[5]`` Solutions, ``[6]``
  IndexOrder, ``[7]`` ExactLogic, ``[8]`` RangeLogic, ``[9]`` TileSelection, ``[10]`` PerfMetric, ``[11]``
  LibraryType (``Equality``, ``GridBased``, ``FreeSize``...);
* the newer mapping with the same fields by name (``Solutions`` hold only what differs from
  ``DefaultSolution``).

ExactLogic rows are ``[[M, N, B, K] or [M, N, B, K, LDD, LDC, LDA, LDB], [solution index, efficiency]]``;
the runtime keys on the first four values only. The list layout is dumped as upstream ``merge.py`` does
(``yaml.safe_dump(default_flow_style=None)``: keys sorted), so equal data gives byte-identical files.

The same container holds cuBLASLt winners for the NVIDIA backend (``cublaslt_equality``): ScheduleName
``cublaslt``, ArchitectureName ``sm_<cc>``, DeviceNames the GPU names, and one solution per algorithm with
``SolutionIndex``, ``SolutionNameMin`` (torch's ``Gemm_Cublaslt_id_..`` name), ``Backend: cublaslt``,
``AlgoId``, ``Tile``, ``Stages``, ``SplitK``, ``ReductionScheme``, ``Swizzle``, ``CustomOption``,
``InnerShape``, ``ClusterShape`` (cuBLASLt enum values) and ``AlgoBytes`` (the opaque ``cublasLtMatmulAlgo_t``
as hex, valid for the cuBLASLt version that produced it).
"""

from __future__ import annotations

import copy
import re
import shutil
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

import yaml

from ..atomic import atomic_write_bytes, atomic_write_text
from ..errors import BadInput
from . import logic_sidecar, yaml_text

LIST_FIELDS = (
    "MinimumRequiredVersion",
    "ScheduleName",
    "ArchitectureName",
    "DeviceNames",
    "ProblemType",
    "Solutions",
    "IndexOrder",
    "ExactLogic",
    "RangeLogic",
    "TileSelection",
    "PerfMetric",
    "LibraryType",
)
LIBRARY_TYPES = ("Equality", "GridBased", "FreeSize", "Range", "Prediction", "MLPClassification")
INDEX_ORDER = [2, 3, 0, 1]
_MIN_VERSION = "4.33.0"


class LogicFormatError(BadInput):
    """A logic file that is not TensileLite logic; the message starts with the path."""


@dataclass
class LogicFile:
    """A loaded logic file; ``data`` is the YAML structure itself, edited in place through the accessors."""

    data: list | dict
    path: str = "<logic>"
    sidecar: str | None = None  # the suffix of the ExactLogic sidecar its table came from (``logic_sidecar``)

    @property
    def layout(self) -> str:
        return "list" if isinstance(self.data, list) else "mapping"

    def _get(self, name: str) -> Any:
        if isinstance(self.data, list):
            return self.data[LIST_FIELDS.index(name)]
        return self.data.get(name)

    def _set(self, name: str, value: Any) -> None:
        if isinstance(self.data, list):
            self.data[LIST_FIELDS.index(name)] = value
        else:
            self.data[name] = value

    problem_type = property(lambda self: self._get("ProblemType"), lambda self, v: self._set("ProblemType", v))
    solutions = property(lambda self: self._get("Solutions"), lambda self, v: self._set("Solutions", v))
    exact_logic = property(lambda self: self._get("ExactLogic"), lambda self, v: self._set("ExactLogic", v))
    library_type = property(lambda self: self._get("LibraryType"))

    @property
    def default_solution(self) -> dict:
        """Keys every solution shares (mapping layout); empty for the list layout."""
        return {} if isinstance(self.data, list) else dict(self.data.get("DefaultSolution") or {})

    def full_solution(self, index: int) -> dict:
        """Solution ``index`` with the ``DefaultSolution`` keys filled in."""
        return {**self.default_solution, **self.solutions[index]}

    def copy(self) -> LogicFile:
        return LogicFile(copy.deepcopy(self.data), self.path, self.sidecar)


def _fail(path: str, reason: str) -> LogicFormatError:
    return LogicFormatError(f"{path}: {reason}")


def parse_logic(text: str, path: str = "<logic>", beside: Path | None = None) -> LogicFile:
    """Parse and validate logic YAML text; ``beside``: the file it was read from, whose ExactLogic sidecar (if it
    has one) holds its table (``logic_sidecar``)."""
    try:
        data = yaml_text.load(text)
    except yaml.YAMLError as err:
        raise _fail(path, f"not YAML: {err}") from None
    sidecar = logic_sidecar.attach(data, beside) if beside is not None and isinstance(data, list | dict) else None
    if isinstance(data, list):
        if len(data) != len(LIST_FIELDS):
            raise _fail(path, f"a list-format logic file has {len(LIST_FIELDS)} items, this one {len(data)}")
        if not isinstance(data[0], dict) or "MinimumRequiredVersion" not in data[0]:
            raise _fail(path, "item [0] must be {MinimumRequiredVersion: ...}")
    elif isinstance(data, dict):
        missing = [k for k in ("ProblemType", "Solutions", "LibraryType") if k not in data]
        if missing:
            raise _fail(path, f"mapping-format logic misses {', '.join(missing)}")
    else:
        raise _fail(path, "neither a 12-item list nor a mapping of logic fields")
    logic = LogicFile(data, path, sidecar)
    validate(logic)
    return logic


def validate(logic: LogicFile) -> None:
    """Check the fields the merge relies on; raise ``LogicFormatError`` naming the first problem."""
    path = logic.path
    if logic.library_type not in LIBRARY_TYPES:
        raise _fail(path, f"LibraryType {logic.library_type!r} is not one of {', '.join(LIBRARY_TYPES)}")
    if not isinstance(logic.problem_type, dict):
        raise _fail(path, "ProblemType must be a mapping")
    solutions = logic.solutions
    if not isinstance(solutions, list) or not all(isinstance(s, dict) for s in solutions):
        raise _fail(path, "Solutions must be a list of mappings")
    rows = logic.exact_logic
    if rows is None:
        if logic.library_type in ("Equality", "GridBased"):
            raise _fail(path, f"{logic.library_type} logic needs ExactLogic rows")
        return
    if not isinstance(rows, list):
        raise _fail(path, "ExactLogic must be a list of [[size...], [index, efficiency]] rows")
    for number, row in enumerate(rows):
        where = f"ExactLogic row {number}"
        if not (
            isinstance(row, list)
            and len(row) == 2
            and isinstance(row[0], list)
            and isinstance(row[1], list)
            and len(row[1]) == 2
        ):
            raise _fail(path, f"{where} is not [[size...], [index, efficiency]]: {row!r}")
        key, (index, eff) = row
        if len(key) not in (4, 8) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in key):
            raise _fail(path, f"{where}: size {key!r} is not 4 or 8 non-negative integers")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(solutions):
            raise _fail(path, f"{where}: solution index {index!r} is not one of the {len(solutions)} solutions")
        if not _efficiency(eff):
            raise _fail(path, f"{where}: efficiency {eff!r} is not a number, a quoted one ('.inf') or null")


def _efficiency(value: object) -> bool:
    """A number, null, or a number quoted as a string (upstream files carry '.inf' and '.nan':
    ``ExactLogicSidecar.py`` keeps them so)."""
    if isinstance(value, bool):
        return False
    if value is None or isinstance(value, Real):
        return True
    return isinstance(value, str) and isinstance(yaml.safe_load(value), float)


def load_logic(path: str | Path) -> LogicFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise _fail(str(path), f"cannot read: {err}") from None
    return parse_logic(text, str(path), Path(path))


def dump_logic(logic: LogicFile) -> str:
    """YAML text: the list layout as upstream merge.py writes it; the mapping layout in field order."""
    if isinstance(logic.data, list):
        return yaml.safe_dump(logic.data, default_flow_style=None)
    return yaml.safe_dump(logic.data, default_flow_style=None, sort_keys=False)


def write_logic(logic: LogicFile, path: Path) -> list[Path]:
    """Write ``logic`` to ``path`` as it was read: a table that came from a sidecar goes back into one of the same
    generation (the YAML keeps a null table), where every key is [M, N, B, K]; else inline. Returns the files."""
    rows = logic.exact_logic
    if logic.sidecar and logic.library_type == "GridBased" and rows and all(len(r[0]) == 4 for r in rows):
        bare = logic.copy()
        bare.exact_logic = None
        sidecar = Path(f"{path}{logic.sidecar}")
        atomic_write_bytes(sidecar, logic_sidecar.encode(rows, logic.sidecar))
        atomic_write_text(path, dump_logic(bare))
        return [path, sidecar]
    atomic_write_text(path, dump_logic(logic))
    return [path]


def copy_logic_file(path: Path, directory: Path) -> list[Path]:
    """Copy a logic file into ``directory`` with its ExactLogic sidecar, if it has one."""
    sidecar = logic_sidecar.sidecar_of(path)
    copied = []
    for source in (path, *([sidecar] if sidecar else [])):
        shutil.copyfile(source, Path(directory) / source.name)
        copied.append(Path(directory) / source.name)
    return copied


@dataclass(frozen=True)
class Winner:
    """A tuned size and the source solution that won it (find_exact's CreateExact input)."""

    size: tuple[int, ...]  # [M, N, B, K] or Tensile-order [M, N, B, K, LDD, LDC, LDA, LDB]
    solution: int  # local index in the source logic file
    gflops: float
    split_k: int = 0  # 0 keeps the solution's GlobalSplitU


def create_equality(source: LogicFile, winners: list[Winner]) -> LogicFile:
    """find_exact's CreateExact: the source header, its solutions reduced to the winners, Equality rows.

    One solution per distinct (source index, split-K) in order of first appearance, renumbered from 0; a
    non-zero split-K overwrites ``GlobalSplitU`` and the ``_GSU<n>`` part of ``SolutionNameMin``. Unlike
    find_exact, IndexOrder is always ``[2, 3, 0, 1]`` (a FreeSize source has none).
    """
    out = source.copy()
    chosen: dict[tuple[int, int], int] = {}
    solutions, rows = [], []
    for winner in winners:
        if not 0 <= winner.solution < len(source.solutions):
            raise _fail(source.path, f"winner {winner} names solution {winner.solution}, which the file lacks")
        pair = (winner.solution, winner.split_k)
        if pair not in chosen:
            solution = copy.deepcopy(source.solutions[winner.solution])
            if winner.split_k:
                old = source.full_solution(winner.solution).get("GlobalSplitU")
                solution["GlobalSplitU"] = winner.split_k
                if "SolutionNameMin" in solution:
                    solution["SolutionNameMin"] = re.sub(
                        f"_GSU{old}(?![0-9])", f"_GSU{winner.split_k}", solution["SolutionNameMin"]
                    )
            solution["SolutionIndex"] = chosen[pair] = len(solutions)
            solutions.append(solution)
        rows.append([list(winner.size), [chosen[pair], winner.gflops]])
    out.solutions, out.exact_logic = solutions, rows
    out._set("IndexOrder", list(INDEX_ORDER))
    out._set("RangeLogic", None)
    out._set("LibraryType", "Equality")
    return out


RECORD_BACKENDS = ("cublaslt", "hipblaslt")


def is_record(logic: LogicFile) -> bool:
    """A winner record (ScheduleName ``cublaslt`` or ``hipblaslt``: what a library backend's Bench crowned,
    ``record_equality``), not TensileLite logic: it lives beside a logic tree, never inside one that
    TensileCreateLibrary compiles (its reader has no ``KernelLanguage`` for it)."""
    return logic.layout == "list" and logic.data[1] in RECORD_BACKENDS


def cublaslt_equality(
    problem_type: dict,
    architecture: str,
    device_names: list[str],
    winners: list[tuple[tuple[int, int, int, int], dict, float]],
) -> LogicFile:
    """An Equality file of cuBLASLt winners (see ``record_equality``)."""
    return record_equality("cublaslt", problem_type, architecture, device_names, winners)


def record_equality(
    backend: str,
    problem_type: dict,
    architecture: str,
    device_names: list[str],
    winners: list[tuple[tuple[int, int, int, int], dict, float]],
) -> LogicFile:
    """An Equality file of one backend's winners: ``(size [M, N, B, K], winner config, GFLOPS)`` each, in
    the list layout with ScheduleName ``backend`` and ``Backend: <backend>`` in every solution.

    Configs equal in every field share one solution; ``SolutionIndex`` is assigned here (a hipBLASLt
    winner keeps the library's own index as ``HipblasltSolutionIndex``).
    """
    solutions: list[dict] = []
    rows = []
    for size, config, gflops in winners:
        solution = {"Backend": backend, **config}
        if backend == "hipblaslt" and "SolutionIndex" in solution:
            solution["HipblasltSolutionIndex"] = solution["SolutionIndex"]
        solution.pop("SolutionIndex", None)
        if solution in solutions:
            index = solutions.index(solution)
        else:
            index = len(solutions)
            solutions.append(solution)
        rows.append([list(size), [index, gflops]])
    for index, solution in enumerate(solutions):
        solution["SolutionIndex"] = index
    data = [
        {"MinimumRequiredVersion": _MIN_VERSION},
        backend,
        architecture,
        list(device_names),
        dict(problem_type),
        solutions,
        list(INDEX_ORDER),
        rows,
        None,
        None,
        "DeviceEfficiency",
        "Equality",
    ]
    logic = LogicFile(data, f"<{backend}>")
    validate(logic)
    return logic


def tensile_ld_order(logic: LogicFile) -> int:
    """Reorder find_exact's 8-value ExactLogic keys ``[M, N, B, K, lda, ldb, ldc, ldd]`` to Tensile's
    ``[M, N, B, K, LDD, LDC, LDA, LDB]`` in place (hipBLASLt ``find_exact.py`` CreateExact writes the
    former); return how many keys changed."""
    rows = logic.exact_logic or []
    changed = 0
    for row in rows:
        key = row[0]
        if len(key) == 8:
            m, n, b, k, lda, ldb, ldc, ldd = key
            row[0] = [m, n, b, k, ldd, ldc, lda, ldb]
            changed += 1
    return changed


GRID_ASSERTS = ("AssertFree0ElementMultiple", "AssertFree1ElementMultiple", "AssertSummationElementMultiple")


def grid_refusals(logic: LogicFile) -> list[str]:
    """The GridBased rows whose kernel TensileLite's own predicates refuse at some size the row serves
    (docs/upstream.md, "GridBased logic"). A row serves the sizes from the previous grid N of its (M, B, K) + 1
    to its own N. A kernel asserting a size multiple other than 1 serves its grid point alone (upstream's
    UpdateGrid writes none of them), and one that loads B along N (``TLUB``) needs N >= GlobalReadVectorWidthB
    (``LeadingFree1SizesGreaterOrEqual``). Empty for other logic."""
    if logic.library_type != "GridBased":
        return []
    position = {s.get("SolutionIndex", i): i for i, s in enumerate(logic.solutions)}
    previous: dict[tuple, int] = {}
    found = []
    for row in sorted(logic.exact_logic or [], key=lambda r: (r[0][0], r[0][2], r[0][3], r[0][1])):
        m, n, batch, k = row[0][:4]
        lo = previous.get((m, batch, k), 0) + 1
        previous[(m, batch, k)] = n
        if lo >= n or row[1][0] not in position:
            continue
        solution = logic.full_solution(position[row[1][0]])
        name = solution.get("SolutionNameMin", f"solution {row[1][0]}")
        asserts = [f"{a} {solution[a]}" for a in GRID_ASSERTS if solution.get(a, 1) != 1]
        width = solution.get("GlobalReadVectorWidthB", 1)
        if asserts:
            found.append(f"{[m, n, batch, k]} serves N {lo}-{n} with {name}, which asserts {', '.join(asserts)}")
        elif (solution.get("ProblemType") or logic.problem_type).get("TLUB") and width > lo:
            found.append(
                f"{[m, n, batch, k]} serves N {lo}-{n} with {name}, which needs N >= {width} "
                "(GlobalReadVectorWidthB along N)"
            )
    return found

"""TensileLite benchmark configs and what a run leaves behind (``docs/upstream.md`` 4).

``config_problems`` lists what TensileLite is known to refuse in a config (``BenchmarkStructs.py``: the
retired InitialSolutionParameters, BenchmarkForkParameters, JoinParameters and BenchmarkJoinParameters must
be empty; ``BenchmarkFinalParameters[0]`` must be ``{ProblemSizes: [...]}``; Exact sizes are 4 or 8
integers, at most one MinStride), so a bad config is refused before a long run. ``benchmark_winners`` reads
``2_BenchmarkData/*.csv`` by column name: ``GFlops, Problem Index, SizeI, SizeJ, SizeK, SizeL, LDD, LDC,
LDA, LDB, TotalFlops`` and, with ``CSVExportWinner``, ``WinnerGFlops, WinnerTimeUS, WinnerIdx, WinnerName``
(the header keys TensileLite's client ``ResultFileReporter.cpp`` sets, and the ``CSVExportWinner`` comment in
``Tensile/Common.py``, as read in public TensileLite sources whose commit was not recorded; ``SizeK`` is the
batch, ``SizeL`` the summation size K).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

TOP_LEVEL = ("GlobalParameters", "BenchmarkProblems", "LibraryLogic", "LibraryClient", "TestParameters")
RETIRED = ("InitialSolutionParameters", "BenchmarkForkParameters", "JoinParameters", "BenchmarkJoinParameters")
SIZE_FORMS = ("Exact", "Range", "MinStride")


def config_problems(data: object) -> list[str]:
    """Why TensileLite would refuse ``data`` (a parsed config); empty when nothing is known to be wrong."""
    if not isinstance(data, dict):
        return ["a TensileLite config is a mapping with GlobalParameters, BenchmarkProblems, LibraryLogic"]
    problems = [
        f"unknown top-level key {key!r} (TensileLite reads {', '.join(TOP_LEVEL)})"
        for key in data
        if key not in TOP_LEVEL
    ]
    benchmarks = data.get("BenchmarkProblems")
    if not isinstance(benchmarks, list) or not benchmarks:
        return [*problems, "BenchmarkProblems must be a non-empty list of [ProblemType, size group, ...]"]
    for number, problem in enumerate(benchmarks):
        where = f"BenchmarkProblems[{number}]"
        if not isinstance(problem, list) or len(problem) < 2 or not isinstance(problem[0], dict):
            problems.append(f"{where} is not [ProblemType dict, size group, ...]")
            continue
        for group_number, group in enumerate(problem[1:], start=1):
            problems += _group_problems(f"{where}[{group_number}]", group)
    return problems


def _group_problems(where: str, group: object) -> list[str]:
    if not isinstance(group, dict):
        return [f"{where}: a size group is a mapping"]
    problems = [
        f"{where}: {key} is no longer supported by TensileLite and must be empty" for key in RETIRED if group.get(key)
    ]
    final = group.get("BenchmarkFinalParameters")
    if not isinstance(final, list) or not final or not isinstance(final[0], dict) or "ProblemSizes" not in final[0]:
        return [*problems, f"{where}: BenchmarkFinalParameters[0] must be {{ProblemSizes: [...]}}"]
    sizes = final[0]["ProblemSizes"] or []
    min_strides = 0
    for number, entry in enumerate(sizes):
        if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in SIZE_FORMS:
            problems.append(f"{where}: ProblemSizes[{number}] is not one of {', '.join(SIZE_FORMS)}")
            continue
        form, value = next(iter(entry.items()))
        min_strides += form == "MinStride"
        if (
            form == "Exact"
            and isinstance(value, list)
            and (len(value) not in (4, 8) or not all(isinstance(v, int) and v > 0 for v in value))
        ):
            problems.append(f"{where}: ProblemSizes[{number}] Exact {value!r} is not 4 or 8 positive integers")
    if min_strides > 1:
        problems.append(f"{where}: at most one MinStride")
    return problems


# Where a TensileLite tree defines its DataType table: S24 ``Tensile/TensileInstructions/DataType.py``, the 2025
# tree (RL) ``Tensile/Common/DataType.py``. Both look a config's letters up by ``'char'``, lower-cased.
DATA_TYPE_FILES = ("TensileInstructions/DataType.py", "Common/DataType.py")
TYPE_KEYS = ("DataType", "DataTypeA", "DataTypeB", "DestDataType", "ComputeDataType")


def tree_data_types(package: Path) -> tuple[Path, set[str]] | None:
    """The DataType letters (lower case) a TensileLite ``Tensile`` package defines, and the file that says so;
    None where neither generation's file is there."""
    for relative in DATA_TYPE_FILES:
        path = package / relative
        if path.is_file():
            return path, {c.lower() for c in re.findall(r"""['"]char['"]\s*:\s*['"]([^'"]+)['"]""", path.read_text())}
    return None


def config_data_types(data: dict) -> set[str]:
    """Every DataType letter a parsed config names in its ProblemTypes (bias lists included)."""
    found = set()
    for problem in data.get("BenchmarkProblems") or []:
        ptype = problem[0] if isinstance(problem, list) and problem and isinstance(problem[0], dict) else {}
        found |= {str(ptype[k]) for k in TYPE_KEYS if ptype.get(k) not in (None, 0)}
        found |= {str(t) for t in ptype.get("BiasDataTypeList") or []}
    return found


@dataclass(frozen=True)
class TensileWinner:
    size: tuple[int, ...]  # M, N, B, K, LDD, LDC, LDA, LDB
    gflops: float
    time_us: float
    name: str


def benchmark_winners(text: str, source: str = "<csv>") -> dict[tuple[int, ...], TensileWinner]:
    """The winner of every problem size in a ``2_BenchmarkData`` CSV written with ``CSVExportWinner``."""
    rows = list(csv.DictReader(io.StringIO(text), skipinitialspace=True))
    if rows and "WinnerTimeUS" not in rows[0]:
        raise ValueError(f"{source}: no WinnerTimeUS column (the config needs CSVExportWinner: True)")
    found = {}
    for number, row in enumerate(rows, start=2):
        try:
            size = tuple(int(row[c]) for c in ("SizeI", "SizeJ", "SizeK", "SizeL", "LDD", "LDC", "LDA", "LDB"))
            found[size] = TensileWinner(
                size, float(row["WinnerGFlops"]), float(row["WinnerTimeUS"]), row["WinnerName"].strip()
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{source}:{number}: {err}") from None
    return found

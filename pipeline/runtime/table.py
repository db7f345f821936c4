"""The tuned rows the runtime applies, read from a bundle or a TunableOp results file (no torch needed).

A row is applied only where its solution names a cuBLASLt algorithm (``Gemm_Cublaslt_id_..``) or one of this
project's Triton kernels (``triton_..``, docs/triton.md), and its op is
one the runtime routes (``mm``: ``gemm``, ``addmm`` with a vector bias: ``gemm_and_bias``, ``bmm``:
``gemm_strided_batched``, ``_scaled_mm``: ``scaled_gemm`` in the 2.15 CUDA grammar, tensorwise or rowwise).
Every other row is counted with the reason it is not applied. A call whose key has no row of its own takes
the grid row whose M range (the manifest's ``m_ranges``) holds its token count (``TunedTable.find``,
docs/serving.md).
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..formats.m_ranges import DEFAULT_RANGES, MRange, by_family, read_ranges
from ..formats.tunableop import DEFAULT, format_key, parse_key, read_file
from ..kernels.support import unsupported_reason
from ..kernels.triton_gemm import PREFIX as TRITON
from ..kernels.triton_gemm import config_from_name, serves, serves_range
from ..kernels.triton_runner import compiled_counts
from ..problem import GemmProblem

RUNTIME_RESULTS = "runtime_results.csv"  # a package's full cuBLASLt rows, for torch without a consumer
KERNELS = "kernels"  # a package's compiled Triton kernels, by cache key (``triton_cache``), beside its rows
RESULTS = "tunableop_results.csv"
MANIFEST = "manifest.json"
NO_ROW = "no tuned row"
OUTSIDE_RANGES = "outside every range (its weight is tuned at other token counts)"
BELOW_FIXED = (
    "below a fixed-size Triton winner, in its bucket (no kernel that serves these counts held x0.99 over them in "
    "Bench, or the gate dropped it)"
)
TUNED_DEFAULT = "torch's default, the tuned choice at this token count (the manifest's default_ranges)"
_CUBLASLT = re.compile(r"Gemm_Cublaslt_id_\d+_")

# (op, dtype, compute type, transa, transb, m, n, k, lda, ldb, ldc, batch): the BLAS call as torch keys it;
# a scaled GEMM's is ("scaled_gemm", op signature, params signature), its TunableOp key itself
RuntimeKey = tuple


def runtime_key(problem: GemmProblem) -> RuntimeKey:
    """The key a problem is found under: its recorded ld's, or packed ones where the key has none (2.6); a
    scaled GEMM's TunableOp key (``runtime.scaled`` builds the same one from a call)."""
    if problem.op == "scaled_gemm":
        return ("scaled_gemm", *format_key(problem))
    lds = (problem.lda, problem.ldb, problem.ldc)
    if problem.lda is None:
        lds = problem.stored_rows()
    return (
        problem.op,
        problem.a_type,
        problem.compute_type,
        problem.transa,
        problem.transb,
        problem.m,
        problem.n,
        problem.k,
        *lds,
        problem.batch,
    )  # type: ignore[return-value]


def key_text(key: RuntimeKey) -> str:
    """A runtime key as the TunableOp key that a results row for it carries (``op_signature,params``)."""
    return ",".join(key[1:]) if key[0] == "scaled_gemm" else ",".join(format_key(problem_of(key)))


def problem_of(key: RuntimeKey) -> GemmProblem:
    """The problem a runtime key stands for (a scaled GEMM's from its TunableOp key)."""
    if key[0] == "scaled_gemm":
        return parse_key(*key[1:])
    op, dtype, compute, transa, transb, m, n, k, lda, ldb, ldc, batch = key
    return GemmProblem(
        op,
        transa,
        transb,
        m,
        n,
        k,
        lda,
        ldb,
        ldc,
        batch,
        a_type=dtype,
        b_type=dtype,
        c_type=dtype,
        compute_type=compute,
    )


@dataclass
class TunedTable:
    """Tuned cuBLASLt solutions by runtime key, where they came from, and what was left out and why."""

    source: Path
    solutions: dict[RuntimeKey, tuple[GemmProblem, str]] = field(default_factory=dict)
    left_out: Counter = field(default_factory=Counter)
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.solutions)

    def triton_solutions(self) -> dict[RuntimeKey, tuple[GemmProblem, str]]:
        """The rows whose winner is one of this project's Triton kernels."""
        return {k: v for k, v in self.solutions.items() if v[1].startswith(TRITON)}

    def triton_builds(self) -> dict[RuntimeKey, tuple[GemmProblem, str]]:
        """The Triton rows whose plans install builds (``Router.build_own_kernels``): every Triton row but the
        copies a bundle spreads over an M range (a count below the range's grid point, with its solution: their
        plans are built at their first call, from a kernel already loaded), and for each range one count of each
        kernel its counts compile apart (``triton_runner.compiled_counts``), as ``find`` gives it: no call
        inside a range meets Triton's compiler, and install does not grow with the ranges' widths. Without a
        Triton row the manifest's ranges are not read here (the first miss reads them, ``find``)."""
        own = self.triton_solutions()
        if not own:
            return {}
        spread: dict[GemmProblem, list[tuple[int, int, str]]] = {}
        found = {}
        for family, (tops, rows) in self.ranges.items():
            for hi, (lo, key) in zip(tops, rows, strict=True):
                grid, solution = self.solutions[key]
                if not solution.startswith(TRITON):
                    continue
                spread.setdefault(family, []).append((lo, hi, solution))
                for m in compiled_counts(grid, lo, hi):
                    moved = grid.with_tokens(m)
                    found[runtime_key(moved)] = (moved, solution)  # type: ignore[arg-type]
        for key, (problem, solution) in own.items():
            ranges = spread.get(problem.token_family(), ())  # type: ignore[arg-type]
            if not any(lo <= problem.n < hi and solution == named for lo, hi, named in ranges):
                found[key] = (problem, solution)
        return found

    def triton_rows(self) -> int:
        return len(self.triton_solutions())

    def only_triton(self) -> TunedTable:
        """This table's Triton rows alone (where torch's TunableOp applies the cuBLASLt ones itself)."""
        kept = self.triton_solutions()
        left_out = self.left_out + Counter({"cuBLASLt row: TunableOp applies it": len(self.solutions) - len(kept)})
        return TunedTable(self.source, kept, left_out, self.meta)

    @functools.cached_property
    def families(self) -> frozenset[GemmProblem]:
        """The rows' token families (``GemmProblem.token_family``), made at the first miss, not at load: a
        bundle spread over a serving grid holds tens of thousands of rows (docs/serving.md)."""
        found = (problem.token_family() for problem, _ in self.solutions.values())
        return frozenset(family for family in found if family is not None)

    @functools.cached_property
    def m_ranges(self) -> dict[GemmProblem, list[MRange]]:
        """The manifest's ``m_ranges`` by token family, read once (``ranges`` and ``narrowed`` both take them)."""
        return by_family(read_ranges(self.meta.get("m_ranges"), "the bundle's manifest"))

    @functools.cached_property
    def ranges(self) -> dict[GemmProblem, tuple[list[int], list[tuple[int, RuntimeKey]]]]:
        """The manifest's M ranges (``m_ranges``: a grid row's key, its solution and the token counts ``lo..hi``
        it serves) whose grid row this table routes and whose solution computes every count of it
        (``triton_gemm.serves_range``: a Triton kernel compiled for its own sizes serves that size alone), by
        token family: the sorted range tops, and per range its bottom and its grid row's key."""
        found = {}
        for family, ranges in self.m_ranges.items():
            routed = [(r, runtime_key(r.grid)) for r in ranges]
            routed = [
                (r, key)
                for r, key in routed
                if key in self.solutions and serves_range(self.solutions[key][1], r.lo, r.hi)
            ]
            if routed:
                found[family] = ([r.hi for r, _ in routed], [(r.lo, key) for r, key in routed])
        return found

    def find(self, key: RuntimeKey) -> tuple[GemmProblem, str] | None:
        """The row of a call's key: its own, or the grid row whose M range holds its token count (its plan built
        for this count, as the libraries look an unseen size up toward the next grid point), kept for the next
        call; None where neither is."""
        found = self.solutions.get(key)
        if found is not None or not self.ranges:
            return found
        problem = problem_of(key)
        family = problem.token_family()
        if family is None or family not in self.ranges:
            return None
        tops, rows = self.ranges[family]
        at = bisect.bisect_left(tops, problem.n)
        if at == len(tops) or rows[at][0] > problem.n:  # type: ignore[operator]
            return None
        grid, solution = self.solutions[rows[at][1]]
        moved = grid.with_tokens(problem.n)  # type: ignore[arg-type]
        if moved is None or runtime_key(moved) != key:
            return None
        self.solutions[key] = (moved, solution)
        return self.solutions[key]

    @functools.cached_property
    def defaulted(self) -> dict[GemmProblem, list[tuple[int, int]]]:
        """The manifest's ``default_ranges`` by token family: the counts where Bench or Validate measured torch's
        default best (``mgrid.default_ranges``)."""
        records = read_ranges(self.meta.get(DEFAULT_RANGES), "the bundle's manifest", DEFAULT_RANGES)
        return {family: [(r.lo, r.hi) for r in rows] for family, rows in by_family(records).items()}

    @functools.cached_property
    def narrowed(self) -> dict[GemmProblem, list[tuple[int, int]]]:
        """By token family, the counts below each grid row narrowed to its own count (``MRange.bucket_lo``: a
        Triton winner compiled for its size); a call there that no range served (``find``) misses below it."""
        return {
            family: [(r.bucket_lo, r.lo - 1) for r in rows if r.bucket_lo is not None and r.bucket_lo < r.lo]
            for family, rows in self.m_ranges.items()
        }

    def miss(self, key: RuntimeKey) -> str:
        """Why a call's key found no row: the tuner chose torch's default at its token count (a default range),
        it falls below a fixed-size Triton winner in that winner's bucket, its weight has rows at other token
        counts, none at this one (outside every range the bundle serves), or no row at all."""
        problem = problem_of(key)
        family = problem.token_family()
        if family is None:
            return NO_ROW
        if any(lo <= problem.n <= hi for lo, hi in self.defaulted.get(family, ())):  # type: ignore[operator]
            return TUNED_DEFAULT
        if any(lo <= problem.n <= hi for lo, hi in self.narrowed.get(family, ())):  # type: ignore[operator]
            return BELOW_FIXED
        return OUTSIDE_RANGES if family in self.families else NO_ROW


def _why_not_routed(problem: GemmProblem, solution: str | None) -> str | None:
    if solution is None:
        return "untuned row (no solution)"
    if solution.startswith(TRITON):
        try:
            config_from_name(solution)
        except ValueError:
            return "unreadable Triton solution name (not triton_r<R>c<C>k<K>_s<S>_g<G>_w<W>_st<N>)"
        return serves(problem)  # a row another version of the kernels served: this one says why not
    if not _CUBLASLT.match(solution):
        return "Default (torch's own kernel)" if solution == DEFAULT else "not a cuBLASLt or Triton solution"
    reason = unsupported_reason(problem)  # what torch's path and the cuBLASLt backend take, the runtime routes
    if reason is None and problem.op != "scaled_gemm" and problem.b_type != problem.a_type:
        reason = f"dtypes {problem.a_type} x {problem.b_type} are not routed"
    return reason


def results_file(path: str | Path) -> Path:
    """The results file of ``path``: the file itself, or a bundle/package directory's runtime or results CSV."""
    path = Path(path)
    if path.is_dir():
        for name in (RUNTIME_RESULTS, RESULTS):
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(
            f"{path}: no {RUNTIME_RESULTS} or {RESULTS} in this directory; pass a bundle "
            f"(RUN_DIR/bundle), a package (dist/<fingerprint>) or a results CSV"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such bundle directory or results file")
    return path


def load_table(path: str | Path) -> TunedTable:
    """The tuned rows of a bundle/package directory or a results CSV (strict: a corrupt line is an error
    naming the file and line). A directory's ``manifest.json`` becomes ``meta`` (what the rows were tuned on)."""
    csv = results_file(path)
    parsed = read_file(csv)
    table = TunedTable(csv.absolute())
    manifest = csv.parent / MANIFEST
    if manifest.is_file():
        table.meta = json.loads(manifest.read_text())
    for entry in parsed.entries:
        reason = _why_not_routed(entry.problem, entry.solution)
        if reason:
            table.left_out[reason] += 1
        else:
            table.solutions[runtime_key(entry.problem)] = (entry.problem, entry.solution)  # type: ignore[assignment]
    return table


def tuned_device(meta: dict) -> str | None:
    """The GPU name the rows were tuned on, where the manifest (a bundle's or a package's) says it."""
    return (meta.get("runtime") or {}).get("name") or (meta.get("stack") or {}).get("gpu")

"""Merge directories of TensileLite logic files: upstream ``merge.py`` (S24) exactly, or the safer ``faster``.

``upstream`` reproduces ``tensilelite/Tensile/Utilities/merge.py`` rule by rule
(``docs/upstream.md``, "merge.py"), quirks included: forced merge by default (off when
the incremental path contains ``arcturus``; the first file's choice sticks), trimming to 4-value keys
with the first colliding row kept, a size repeated in NEW appended twice, kernels deduped on the whole
solution minus ``SolutionIndex``/``SolutionNameMin``, unused kernels dropped and renumbered in pool
order, files only in NEW ignored.

``faster`` (the default) keeps whichever entry is faster by ``margin`` (efficiency is GFLOPS, higher is
faster; where a side has none, the tuned entry replaces the base pending Validate, whose measurement the bundle
settles it by: ``settle``; ``force_merge="false"`` keeps the base there), keeps each size once, trims
LD-distinct keys unless ``trim`` is off, copies files found on one side only, never touches an entry it
was not told to replace, and reports every change.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...atomic import atomic_directory, atomic_write_text
from ...defaults import LOGIC_MARGIN
from ...errors import BadInput
from ...formats import logic_sidecar
from ...formats.logic import LogicFile, LogicFormatError, copy_logic_file, is_record, load_logic, write_logic

POLICIES = ("upstream", "faster")


class ProblemTypeMismatch(BadInput):
    """The files describe different GEMMs; upstream exits with status 1 here."""


@dataclass(frozen=True)
class MergeOptions:
    policy: str = "faster"
    trim: bool = True
    no_eff: bool = False
    force_merge: str = "none"  # none | true | 1 | false | 0 (anything else counts as true, as upstream)
    margin: float = LOGIC_MARGIN

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {', '.join(POLICIES)}")
        if self.margin < 0:
            raise ValueError("margin must be >= 0")

    def forced(self) -> bool | None:
        """None for upstream's per-file default, else the forced flag (upstream's string semantics)."""
        value = self.force_merge.lower()
        if value == "none":
            return None
        return value not in ("false", "0")


@dataclass
class MergeReport:
    """What a directory merge did: the log, in upstream's wording, and files written."""

    lines: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)  # winner records, written beside the logic tree
    pending: list[dict] = field(default_factory=list)  # sizes replaced without efficiencies: Validate decides

    def add(self, *parts: object) -> None:
        self.lines.append(" ".join(str(p) for p in parts))


def _yaml_files(directory: Path) -> dict[str, Path]:
    """Top-level ``*.yaml`` files (case-insensitive extension) by basename, as upstream's ``allFiles``."""
    if not directory.is_dir():
        raise LogicFormatError(f"{directory}: not a directory")
    return {p.name: p for p in sorted(directory.iterdir()) if p.suffix.lower() == ".yaml" and p.is_file()}


# --- upstream steps -------------------------------------------------------------------------------------


def _compare_problem_type(base: LogicFile, new: LogicFile) -> None:
    header, new_header = base.problem_type, new.problem_type
    for item in [k for k in header if k not in new_header]:  # "waived" keys leave the base, header and kernels
        header.pop(item)
        for solution in base.solutions:
            solution.get("ProblemType", {}).pop(item, None)
    differ = [k for k in header if k in new_header and header[k] != new_header[k]]
    if differ:  # what upstream trips on later (a kernel's ProblemType), named where it differs
        raise ProblemTypeMismatch(
            f"[Error] ProblemType of {new.path} doesn't match {base.path}: "
            + ", ".join(f"{k}: {header[k]} != {new_header[k]}" for k in differ)
        )
    results, index = "", 0
    for index, solution in enumerate(new.solutions):
        kernel_type = solution.get("ProblemType", {})
        if header != kernel_type:
            for item in header:
                if item not in kernel_type:
                    raise ProblemTypeMismatch(
                        f"{new.path}: solution {index} ProblemType lacks {item!r} "
                        "(upstream merge.py dies with KeyError here)"
                    )
                if header[item] != kernel_type[item]:
                    results += f"\t{item}: {header[item]} != {kernel_type[item]}\n"
            break
    if results:
        raise ProblemTypeMismatch(
            f"[Error] ProblemType in library logic doesn't match solution(idx={index}): \n{results}"
        )


def _trim_sizes(rows: list, report: MergeReport, kind: str) -> list:
    """``fixSizeInconsistencies``: cut keys of 8+ values to ``key[:-4]``; drop a row whose cut key exists."""
    drop = []
    for i, row in enumerate(rows):
        if len(row[0]) >= 8:
            short = row[0][:-4]
            if any(short == other[0] for other in rows):
                drop.append(i)
            else:
                row[0] = short
    if drop:
        report.add(len(drop), "duplicate size(s) removed from", kind, "logic file")
    return [copy.deepcopy(row) for i, row in enumerate(rows) if i not in set(drop)]


def _sanitize(solutions: list[dict]) -> None:
    for solution in solutions:
        if solution.get("StaggerU") == 0:
            solution.update(StaggerUMapping=0, StaggerUStride=0, _staggerStrideShift=0)


def remove_unused(logic: LogicFile) -> int:
    """Drop solutions no row uses, renumber the rest in order, remap rows; return how many went."""
    used = {index for _, (index, _) in logic.exact_logic}
    before = len(logic.solutions)
    logic.solutions = [s for s in logic.solutions if s["SolutionIndex"] in used]
    id_map = {}
    for i, solution in enumerate(logic.solutions):
        id_map[solution["SolutionIndex"]] = i
        solution["SolutionIndex"] = i
    logic.exact_logic = [[size, [id_map[index], eff]] for size, (index, eff) in logic.exact_logic]
    return before - len(logic.solutions)


def _kernel_key(solution: dict) -> dict:
    return {k: v for k, v in solution.items() if k not in ("SolutionIndex", "SolutionNameMin")}


def _add_kernel(pool: list[dict], solution: dict) -> int:
    """Index of an equal kernel in ``pool``, or of ``solution`` appended as a new one."""
    wanted = _kernel_key(solution)
    for item in pool:
        if _kernel_key(item) == wanted:
            return item["SolutionIndex"]
    added = copy.deepcopy(solution)
    added["SolutionIndex"] = len(pool)
    pool.append(added)
    return added["SolutionIndex"]


def _reindex(logic: LogicFile) -> None:
    for i, solution in enumerate(logic.solutions):
        solution["SolutionIndex"] = i


def merge_upstream(
    base: LogicFile, new: LogicFile, forced: bool, trim: bool, no_eff: bool, report: MergeReport
) -> LogicFile:
    """One file pair through S24 ``compareProblemType``, ``reindexSolutions`` and ``mergeLogic``."""
    for logic in (base, new):
        if logic.layout != "list":
            raise LogicFormatError(
                f"{logic.path}: upstream merge.py (S24) reads list-format logic only; use --policy faster"
            )
    base, new = base.copy(), new.copy()
    if new.exact_logic is None:
        raise LogicFormatError(
            f"{new.path}: {new.library_type} logic has no ExactLogic; upstream merge.py crashes on it (len(None))"
        )
    _compare_problem_type(base, new)
    _reindex(base)
    _reindex(new)
    report.add(len(base.exact_logic), "sizes and", len(base.solutions), "kernels in base logic file")
    report.add(len(new.exact_logic), "sizes and", len(new.solutions), "kernels in incremental logic file")
    if trim:
        base.exact_logic = _trim_sizes(base.exact_logic, report, "base")
        new.exact_logic = _trim_sizes(new.exact_logic, report, "incremental")
    _sanitize(base.solutions)
    _sanitize(new.solutions)
    base_removed = remove_unused(base)
    new_removed = remove_unused(new)
    pool, rows = copy.deepcopy(base.solutions), copy.deepcopy(base.exact_logic)
    known = {tuple(size): (i, eff) for i, (size, (_, eff)) in enumerate(base.exact_logic)}
    for size, (index, eff) in new.exact_logic:
        store = 0.0 if no_eff else eff
        if tuple(size) in known:
            j, base_eff = known[tuple(size)]
            if eff > base_eff or forced:
                tag = "[O]" if eff > base_eff else "[!]"
                verdict = "has improved in performance." if eff > base_eff else "does not improve in performance."
                report.add(
                    tag,
                    size,
                    "already exists and",
                    verdict,
                    "Efficiency:",
                    base_eff,
                    "->",
                    eff,
                    "(force_merge=True)" if forced else "",
                )
                rows[j][1] = [_add_kernel(pool, new.solutions[index]), store]
            else:
                report.add(
                    "[X]", size, "already exists but does not improve in performance. Efficiency:", base_eff, "->", eff
                )
        else:
            report.add("[-]", size, "has been added to solution table, Efficiency: N/A ->", eff)
            rows.append([size, [_add_kernel(pool, new.solutions[index]), store]])
    report.add(base_removed, "unused kernels removed from base logic file")
    report.add(new_removed, "unused kernels removed from incremental logic file")
    merged = base.copy()
    merged.solutions, merged.exact_logic = pool, rows
    replaced = remove_unused(merged)
    report.add(
        len(rows) - len(base.exact_logic),
        "size(s) and",
        len(pool) - len(base.solutions),
        "kernel(s) added,",
        replaced + base_removed,
        "kernel(s) removed",
    )
    return merged


# --- the faster policy ----------------------------------------------------------------------------------


def _check_same_kind(base: LogicFile, new: LogicFile) -> None:
    if base.layout != new.layout:
        raise LogicFormatError(f"{new.path}: {new.layout} layout cannot merge into {base.path} ({base.layout})")
    if base.library_type != new.library_type:
        folder = f"the library's {new.library_type}/ folder (asm_full/<schedule>/<arch>/{new.library_type})"
        raise LogicFormatError(
            f"{new.path}: {new.library_type} logic cannot merge into {base.library_type} logic {base.path}: "
            f"pass {folder} as the base"
        )
    if new.exact_logic is None or base.exact_logic is None:
        raise LogicFormatError(f"{new.path}: {new.library_type} logic has no ExactLogic rows to merge")
    if base.problem_type != new.problem_type:
        diffs = sorted(
            k
            for k in set(base.problem_type) | set(new.problem_type)
            if base.problem_type.get(k) != new.problem_type.get(k)
        )
        raise ProblemTypeMismatch(
            f"{new.path}: ProblemType differs from {base.path} in "
            + ", ".join(f"{k} ({base.problem_type.get(k)!r} != {new.problem_type.get(k)!r})" for k in diffs)
        )


def _best_rows(logic: LogicFile, trim: bool, report: MergeReport, name: str) -> Iterator[tuple[tuple, list]]:
    """``(key, row)`` once per key: trimmed to 4 values unless ``trim`` is off, the faster row of a collision."""
    best: dict[tuple, list] = {}
    for size, (index, eff) in logic.exact_logic:
        key = tuple(size[:4] if trim else size)
        row = [list(key), [index, eff]]
        if key in best:
            loser, winner = (best[key], row) if _number(eff) > _number(best[key][1][1]) else (row, best[key])
            report.add(
                f"{name}: {list(key)} appears twice in {logic.path}; kept efficiency {winner[1][1]}, "
                f"dropped {loser[1][1]}"
            )
            best[key] = winner
        else:
            best[key] = row
    return iter(best.items())


def merge_faster(base: LogicFile, new: LogicFile, options: MergeOptions, report: MergeReport, name: str) -> LogicFile:
    """Keep the faster entry per size, each size once; report every change."""
    _check_same_kind(base, new)
    forced = bool(options.forced())
    merged = base.copy()
    _reindex(merged)  # rows point at positions; the pool hands out SolutionIndex values
    pool = merged.solutions
    rows = dict(_best_rows(merged, options.trim, report, name))
    for key, (size, (index, eff)) in _best_rows(new, options.trim, report, name):
        store = 0.0 if options.no_eff else eff
        solution = _relative(new.full_solution(index), base.default_solution)
        if key not in rows:
            rows[key] = [size, [_add_kernel(pool, solution), store]]
            report.add(f"{name}: added {size} (efficiency {eff})")
            continue
        base_eff, eff = _number(rows[key][1][1]), _number(eff)
        if forced or (base_eff > 0 and eff > base_eff * (1 + options.margin)):
            rows[key] = [size, [_add_kernel(pool, solution), store]]
            why = "forced" if forced else f"{eff / base_eff:.3f}x faster"
            report.add(f"{name}: replaced {size}: efficiency {base_eff} -> {eff} ({why})")
        elif (base_eff <= 0 or eff <= 0) and options.forced() is False:
            report.add(f"{name}: kept base {size}: no efficiency to compare ({base_eff} vs {eff}); --force-merge false")
        elif base_eff <= 0 or eff <= 0:  # upstream files carry 0.0: what Validate measures decides (the bundle)
            report.pending.append(
                {"file": name, "size": list(key), "base": [full_solution(merged, rows[key][1][0]), rows[key][1][1]]}
            )
            rows[key] = [size, [_add_kernel(pool, solution), store]]
            report.add(
                f"{name}: replaced {size} pending Validate: no efficiency to compare ({base_eff} vs {eff}); the "
                "bundle keeps it where Validate measures it faster than the library's pick, else the base entry"
            )
        else:
            report.add(
                f"{name}: kept base {size}: efficiency {base_eff} vs {eff} is within the "
                f"{options.margin:.0%} margin or slower"
            )
    merged.exact_logic = list(rows.values())
    removed = remove_unused(merged)
    if removed:
        report.add(f"{name}: {removed} kernel(s) no longer used were removed")
    return merged


def pending_path(out_dir: Path) -> Path:
    """Where a merge into ``out_dir`` lists the sizes it replaced pending Validate: ``<out_dir>-pending.json``."""
    return Path(out_dir).with_name(Path(out_dir).name + "-pending.json")


def full_solution(logic: LogicFile, index: int) -> dict:
    """Solution ``index`` of ``logic``'s pool, whole (its DefaultSolution keys filled in)."""
    return logic.full_solution(next(i for i, s in enumerate(logic.solutions) if s["SolutionIndex"] == index))


def settle(logic: LogicFile, pending: Sequence[dict], measured: Callable[[tuple], str | None]) -> list[dict]:
    """The sizes a merge replaced pending Validate (``pending``, this file's), settled: ``measured(size)`` says
    why Validate kept the tuned entry (None: it did not, and the size goes back to its base entry). Returns one
    decision per size: ``{"size", "kept", "why"}``."""
    pool = logic.solutions
    rows = {tuple(row[0][:4]): row for row in logic.exact_logic}
    decisions = []
    for item in pending:
        size, row = tuple(item["size"][:4]), rows.get(tuple(item["size"][:4]))
        if row is None:
            continue
        why = measured(size)
        if why is None:
            solution, eff = item["base"]
            row[1] = [_add_kernel(pool, _relative(solution, logic.default_solution)), eff]
            why = "back to the base entry: Validate did not measure the tuned one faster than the library's pick"
        decisions.append({"size": list(size), "kept": why.startswith("kept"), "why": why})
    remove_unused(logic)
    return decisions


def _number(efficiency: object) -> float:
    """An efficiency to compare: a number as it is; a string ('.inf' in some upstream files) or null as none (0)."""
    return float(efficiency) if isinstance(efficiency, int | float) and not isinstance(efficiency, bool) else 0.0


def _relative(full: dict, default: dict) -> dict:
    """A solution as the target file stores it: only the keys that differ from its DefaultSolution."""
    return {k: v for k, v in full.items() if k not in default or default[k] != v}


# --- directories ----------------------------------------------------------------------------------------


def merge_dirs(
    base_dir: Path,
    new_dir: Path,
    out_dir: Path,
    options: MergeOptions,
    marker: str | None = None,
    records_dir: Path | None = None,
) -> MergeReport:
    """Merge ``new_dir`` into ``base_dir``, writing ``out_dir`` as a whole once every file merged (``marker``:
    see ``atomic_directory``). Every file that goes into ``out_dir`` is parsed as logic first, those copied
    as they are included: a file that does not parse stops the merge, naming it. Winner records
    (``logic.is_record``) go to ``records_dir`` (default ``<out_dir>-records``), so ``out_dir`` holds what
    TensileCreateLibrary compiles and nothing else."""
    base_files, new_files = _yaml_files(Path(base_dir)), _yaml_files(Path(new_dir))
    report = MergeReport()
    outputs: dict[str, LogicFile | Path] = {}  # name -> merged logic, or a file to copy as it is (its sidecar too)
    records: set[str] = set()
    forced = options.forced()
    tree_sidecar = next((s for path in base_files.values() if (s := logic_sidecar.suffix_of(path))), None)
    for name, new_path in new_files.items():
        if name not in base_files:
            if options.policy == "upstream":
                report.add("Ignored", new_path, "(no base file of that name)")
            else:
                new = load_logic(new_path)
                records |= {name} if is_record(new) else set()
                outputs[name] = new_path
                if tree_sidecar and new.library_type == "GridBased" and not new.sidecar:
                    new.sidecar, outputs[name] = tree_sidecar, new  # written as the base tree keeps its tables
                report.add(
                    f"{name}: new file, copied" + (" (its table into a sidecar)" if outputs[name] is new else "")
                )
            continue
        base, new = load_logic(base_files[name]), load_logic(new_path)
        records |= {name} if is_record(base) else set()
        if options.policy == "upstream":
            if forced is None:
                forced = "arcturus" not in str(new_path)  # upstream decides once, from the first file
            report.add(
                "Base logic file:",
                base_files[name],
                "| Incremental:",
                new_path,
                "| Merge policy:",
                "Forced" if forced else "Winner",
                "| Trim size:",
                options.trim,
            )
            merged = merge_upstream(base, new, forced, options.trim, options.no_eff, report)
        else:
            merged = merge_faster(base, new, options, report, name)
        merged.sidecar = merged.sidecar or base.sidecar  # written as the base tree keeps its tables
        outputs[name] = merged
    if options.policy == "faster":
        for name, path in base_files.items():
            if name not in new_files:
                records |= {name} if is_record(load_logic(path)) else set()
                outputs[name] = path
                report.add(f"{name}: only in base, copied unchanged")
    records_dir = Path(records_dir) if records_dir else Path(out_dir).with_name(Path(out_dir).name + "-records")
    for directory, names, written in (
        (out_dir, sorted(set(outputs) - records), report.written),
        (records_dir, sorted(records), report.records),
    ):
        if directory == records_dir and not names and not Path(records_dir).exists():
            continue  # no records: no directory for them
        with atomic_directory(directory, marker) as staging:
            for name in names:
                content = outputs[name]
                if isinstance(content, Path):
                    copy_logic_file(content, staging)
                else:
                    write_logic(content, staging / name)
                written.append(name)
    if options.policy == "faster":  # what the bundle settles with Validate's measurement (``settle``)
        atomic_write_text(pending_path(out_dir), json.dumps(report.pending, indent=1) + "\n")
    return report

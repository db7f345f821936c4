"""Merge TunableOp results files: one row per key, the fastest first, one validator block.

torch keeps the first row it reads for a key (``docs/tunableop.md`` 2.4), so duplicates are
resolved here: the row with the smallest recorded time wins (a row without a time loses to any timed
row; ties keep the earlier input). Files whose validators differ describe different runtimes and are
refused, unless the caller names the validator block of the runtime to target.
"""

from __future__ import annotations

import dataclasses
import glob
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BadInput
from ...formats.hipblaslt_override import (
    OverrideEntry,
    is_override_text,
    merge_overrides,
    parse_override,
    write_override,
)
from ...formats.solution_names import hipblaslt_solution, validators_platform
from ...formats.tunableop import TunableOpEntry, TunableOpFile, parse_text, write_file


class ValidatorMismatch(BadInput):
    """Inputs recorded under different runtimes."""


@dataclass
class ResultsMerge:
    validators: dict[str, str]
    entries: list[TunableOpEntry]
    lines: list[str] = field(default_factory=list)


def validator_differences(files: Sequence[TunableOpFile], reference: dict[str, str]) -> list[str]:
    """One line per validator key whose value (or presence) differs from ``reference``."""
    out = []
    for tfile in files:
        for key in sorted(set(reference) | set(tfile.validators)):
            if reference.get(key) != tfile.validators.get(key):
                out.append(
                    f"{tfile.path}: {key} = {tfile.validators.get(key, '<missing>')!r}, "
                    f"target has {reference.get(key, '<missing>')!r}"
                )
    return out


def _sort_key(entry: TunableOpEntry) -> tuple[int, float]:
    return (0, float(entry.time_text)) if entry.time_text is not None else (1, 0.0)


def merge_results(files: Sequence[TunableOpFile], target: dict[str, str] | None = None) -> ResultsMerge:
    """Dedupe every input's rows on (op, params), fastest kept; validators from ``target`` or the inputs."""
    if not files:
        raise BadInput("no results files to merge")
    for tfile in files:
        untuned = [e for e in tfile.entries if e.solution is None]
        if untuned:
            raise BadInput(
                f"{tfile.path}: {len(untuned)} rows have no solution (an untuned file?); "
                "merge-results merges results files"
            )
    reference = dict(target) if target is not None else dict(files[0].validators)
    differences = validator_differences(files, reference)
    if differences and target is None:
        raise ValidatorMismatch(
            "validators differ, so these files come from different runtimes "
            "(pass --validators-from FILE to name the one to target):\n  " + "\n  ".join(differences)
        )
    if "PT_VERSION" not in reference:
        raise ValidatorMismatch(
            "the validator block has no PT_VERSION; torch rejects such a file. Name the "
            "runtime to target with --validators-from: a tunableop_results file that torch "
            "on the target machine wrote"
        )
    merged = ResultsMerge(reference, [])
    merged.lines += [f"note: {d}" for d in differences]
    best: dict[tuple[str, str], TunableOpEntry] = {}
    for tfile in files:
        for entry in tfile.entries:
            key = (entry.op_signature, entry.params_signature)
            kept = best.get(key)
            if kept is None:
                best[key] = entry
            elif _sort_key(entry) < _sort_key(kept):
                merged.lines.append(
                    f"{key[0]},{key[1]}: {entry.solution} ({entry.time_text} ms, {tfile.path}) "
                    f"replaces {kept.solution} ({kept.time_text} ms)"
                )
                best[key] = entry
            else:
                merged.lines.append(
                    f"{key[0]},{key[1]}: kept {kept.solution} ({kept.time_text} ms) over "
                    f"{entry.solution} ({entry.time_text} ms, {tfile.path})"
                )
    merged.entries = list(best.values())
    if validators_platform(reference) == "rocm":  # the hipBLASLt names the target torch reads
        renamed = [
            dataclasses.replace(e, solution=hipblaslt_solution(e.solution, e.problem, reference["PT_VERSION"]))
            for e in merged.entries
        ]
        changed = sum(a.solution != b.solution for a, b in zip(renamed, merged.entries, strict=True))
        if changed:
            merged.lines.append(
                f"{changed} hipBLASLt solution names written as torch {reference['PT_VERSION']} names them"
            )
        merged.entries = renamed
    total = sum(len(f.entries) for f in files)
    merged.lines.append(f"{total} rows from {len(files)} files -> {len(merged.entries)} rows")
    return merged


def check_target(backend_platform: str, target: dict[str, str], source: str) -> None:
    """Refuse a target validator block of another platform than the one the backend tunes for: torch loads a
    results file only where every validator matches, so such a bundle would be rejected whole."""
    platform = validators_platform(target)
    if platform != backend_platform:
        raise ValidatorMismatch(
            f"{source} holds a {platform} torch's validator block, but the backend tunes for "
            f"{backend_platform}: torch there would reject the whole file. Name a results "
            f"file that torch on the {backend_platform} target wrote"
        )


def require_target(backend: str, has_local_rocm_torch: bool, validators_from: str) -> None:
    """An AMD tool's rows need a ROCm torch's validator block: from this machine's ROCm torch, or from
    ``--validators-from``. Checked before any tuning (without either, the merge would fail after it)."""
    if not validators_from and not has_local_rocm_torch:
        raise ValidatorMismatch(
            f"--backend {backend} writes Gemm_Hipblaslt_<index> rows, which torch on ROCm loads only under its own "
            "validator block, and no ROCm torch is installed here to give it. Name the target with "
            "--validators-from FILE (a tunableop_results*.csv that torch on the target machine wrote), or install "
            "the 'rocm' extra with a ROCm build of torch"
        )


@dataclass
class MergedFiles:
    """TunableOp results and hipBLASLt override files given together, each kind merged with its own."""

    results: ResultsMerge | None = None
    override: tuple[str | None, list[OverrideEntry]] | None = None
    lines: list[str] = field(default_factory=list)

    def write(self, results_path: Path | None, override_path: Path | None) -> list[Path]:
        """Write each merged kind to its path (a kind without a path is refused), the results file last (a
        task's output); the paths written."""
        kinds = (
            ("hipBLASLt override", self.override, override_path, lambda p, m: write_override(p, *m)),
            ("TunableOp results", self.results, results_path, lambda p, m: write_file(p, m.validators, m.entries)),
        )
        written = []
        for name, merged, path, write in kinds:
            if merged is None:
                continue
            if path is None:
                raise BadInput(f"the inputs hold {name} files, which have no output here; merge each kind separately")
            write(path, merged)
            written.append(Path(path))
        return written


def expand_paths(specs: Sequence[str]) -> list[str]:
    """The files ``specs`` name: each as given, a glob (``'r_*.csv'``) as the files it matches, sorted; a
    missing file or a pattern that matches none is refused naming it."""
    found: list[str] = []
    for spec in specs:
        if glob.has_magic(spec) and not Path(spec).exists():
            matches = sorted(p for p in glob.glob(spec, recursive=True) if Path(p).is_file())
            if not matches:
                raise BadInput(f"{spec}: pattern matches no file")
            found += matches
        elif Path(spec).is_file():
            found.append(spec)
        else:
            raise BadInput(f"{spec}: no such file")
    return list(dict.fromkeys(found))


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise BadInput(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def merge_paths(
    paths: Sequence[str | Path], validators_from: str | Path | None = None, lenient: bool = False
) -> MergedFiles:
    """Merge the files at ``paths`` (TunableOp results and hipBLASLt override files, told apart by content).
    ``validators_from`` names the target: a results file (its validator block) or an override file (its
    Git Version)."""
    texts = {str(path): _read(path) for path in paths}
    if not texts:
        raise BadInput("no results files to merge")
    empty = [p for p, t in texts.items() if not t.strip()]
    if empty:
        raise BadInput(
            f"{empty[0]}: the file is empty (a TunableOp results or hipBLASLt override file has at "
            "least its validator block or header)"
        )
    target_text = Path(validators_from).read_text(encoding="utf-8") if validators_from else None
    out = MergedFiles()
    results = [parse_text(t, p, lenient=lenient) for p, t in texts.items() if not is_override_text(t)]
    overrides = [parse_override(t, p) for p, t in texts.items() if is_override_text(t)]
    if results:
        target = None
        if target_text is not None and not is_override_text(target_text):
            target = parse_text(target_text, str(validators_from)).validators
        out.results = merge_results(results, target)
        out.lines += out.results.lines + [str(s) for f in results for s in f.skipped]
    if overrides:
        target_git = None
        if target_text is not None and is_override_text(target_text):
            target_git = parse_override(target_text, str(validators_from)).git_version
        git, entries, lines = merge_overrides(overrides, target_git)
        out.override, out.lines = (git, entries), out.lines + lines
    return out

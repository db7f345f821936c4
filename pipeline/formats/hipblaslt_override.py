"""hipBLASLt offline-tuning override files (``HIPBLASLT_TUNING_OVERRIDE_FILE``): read, write, merge.

Plain text (``docs/upstream.md``, "The tuning override file"): a ``Git Version:`` line, then header
lines (any line with both ``transA`` and ``solution_index``) each followed by value lines, zipped to the
header's column names. The reader keys a row as its schema says: a legacy row (no ``schema_version``
column, what hipblaslt-bench writes) on transposes, sizes, batch_count, a/b/c types and compute_type
(``LEGACY_KEY``); a current row on every problem column it carries (``CURRENT_KEY``: ld's, strides, epilogue,
bias, scale formats, arch...). It keeps every distinct entry of a key (index and kernel names,
``IDENTITY``), a repeated one once, and replays the first that still validates: legacy entries in file
order, current ones newest first. Merging keeps what the reader keeps, ordered so the fastest replays first,
under one Git Version, and never writes a row under another build's Git Version than its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import atomic_write_text
from ..errors import BadInput

GIT_PREFIX = "Git Version:"
LEGACY_KEY = ("transA", "transB", "m", "n", "k", "batch_count", "a_type", "b_type", "c_type", "compute_type")
CURRENT_KEY = (
    "transA",
    "transB",
    "m",
    "n",
    "k",
    "batch_count",
    "a_type",
    "b_type",
    "c_type",
    "d_type",
    "compute_type",
    "compute_input_type_a",
    "compute_input_type_b",
    "lda",
    "ldb",
    "ldc",
    "ldd",
    "stride_a",
    "stride_b",
    "stride_c",
    "stride_d",
    "lde",
    "stride_e",
    "batch_mode",
    "epilogue",
    "gradient",
    "bias_type",
    "bias_stride",
    "bias_vector",
    "aux_type",
    "scaleA_format",
    "scaleB_format",
    "scaleA",
    "scaleB",
    "scaleC",
    "scaleD",
    "scaleE",
    "scaleAlphaVec",
    "amaxD",
    "swizzle_a",
    "swizzle_b",
    "streamk_tile_scheduling",
    "sm_count_target",
    "uniform_summation_order",
    "gcnArchName",
    "CUs",
)
IDENTITY = ("solution_index", "kernel_name", "solution_name")


class OverrideFormatError(BadInput):
    """Not an override file; the message starts with ``path:line:``."""


@dataclass(frozen=True)
class OverrideEntry:
    header: str
    values: str
    fields: tuple[tuple[str, str], ...]

    @property
    def current(self) -> bool:
        """A current-schema row (it has a ``schema_version`` column), not a legacy one."""
        return any(name == "schema_version" for name, _ in self.fields)

    @property
    def key(self) -> tuple[str, ...]:
        """The reader's key: the schema, then its columns (a legacy row's transposes as "not N")."""
        data = dict(self.fields)
        if self.current:
            return ("current", *(data.get(column, "") for column in CURRENT_KEY))
        legacy = {**data, **{t: "T" for t in ("transA", "transB") if data.get(t, "N") != "N"}}
        return ("legacy", *(legacy.get(column, "") for column in LEGACY_KEY))

    @property
    def identity(self) -> tuple[str, ...]:
        """What makes two entries of one key the same to the reader: the index and both names."""
        data = dict(self.fields)
        return tuple(data.get(column, "") for column in IDENTITY)

    def with_n(self, n: int) -> OverrideEntry | None:
        """This legacy row at BLAS ``n`` (a token count of a serving grid's bucket): the reader keys a legacy row
        on its sizes and types alone, so only ``n`` changes (its timing cells stay the grid point's); None for a
        current-schema row, which keys on ld's and strides too."""
        if self.current:
            return None
        names = [name for name, _ in self.fields]
        values = [str(n) if name == "n" else value for name, value in self.fields]
        return OverrideEntry(self.header, ",".join(values), tuple(zip(names, values, strict=True)))

    def speed(self) -> tuple[int, float]:
        """Sort key, smaller is faster: by ``us`` if recorded, else by GFLOPS, else unknown (last)."""
        data = dict(self.fields)
        try:
            if "us" in data:
                return (0, float(data["us"]))
            if "hipblaslt-Gflops" in data:
                return (0, -float(data["hipblaslt-Gflops"]))
        except ValueError:
            pass
        return (1, 0.0)


@dataclass
class OverrideFile:
    path: str
    git_version: str | None = None
    entries: list[OverrideEntry] = field(default_factory=list)


def is_override_text(text: str) -> bool:
    return GIT_PREFIX in text or any("transA" in line and "solution_index" in line for line in text.splitlines())


def parse_override(text: str, path: str = "<override>") -> OverrideFile:
    result = OverrideFile(path)
    header: list[str] | None = None
    header_line = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(GIT_PREFIX):
            version = line[len(GIT_PREFIX) :].strip()
            if result.git_version not in (None, version):
                raise OverrideFormatError(
                    f"{path}:{number}: second Git Version {version!r} (first {result.git_version!r})"
                )
            result.git_version = version
        elif "transA" in line and "solution_index" in line:
            header, header_line = [c.strip() for c in line.split(",")], line
        else:
            values = [v.strip() for v in line.split(",")]
            if header is None:
                raise OverrideFormatError(
                    f"{path}:{number}: a value line before any header line (a header names transA ... solution_index)"
                )
            if len(values) != len(header):
                raise OverrideFormatError(f"{path}:{number}: {len(values)} values for {len(header)} columns")
            result.entries.append(OverrideEntry(header_line, line, tuple(zip(header, values, strict=True))))
    return result


def read_override(path: str | Path) -> OverrideFile:
    return parse_override(Path(path).read_text(encoding="utf-8"), str(path))


def format_override(git_version: str | None, entries: Sequence[OverrideEntry]) -> str:
    lines = [f"{GIT_PREFIX} {git_version}"] if git_version else []
    for entry in entries:
        lines += [entry.header, entry.values]
    return "".join(line + "\n" for line in lines)


def row_build(entry: OverrideEntry, file_git: str | None) -> str | None:
    """The build a row was tuned on: its own ``git_version`` cell where it has one (the newest rows do),
    else its file's ``Git Version:`` line (the reader's rule, docs/upstream.md)."""
    return dict(entry.fields).get("git_version") or file_git


def merge_overrides(
    files: Sequence[OverrideFile],
    target_git: str | None = None,
) -> tuple[str | None, list[OverrideEntry], list[str]]:
    """Every entry the reader would keep: one per key and identity (a repeat replaces the earlier one, as the
    reader refreshes it), each key's entries ordered so the fastest replays first (legacy rows first in the
    file, current rows last: the reader tries those newest first). Rows of different builds are refused unless
    ``target_git`` names the build to target; then only that build's rows are kept, and each other row is
    dropped and reported: a solution index names a kernel of one build only, and a row written under another
    build's ``Git Version`` would be trusted by the reader for a kernel it was never tuned on."""
    versions = {f.path: f.git_version for f in files}
    builds = {row_build(e, f.git_version) for f in files for e in f.entries} | set(versions.values())
    if len(builds - {None}) > 1 and target_git is None:
        raise OverrideFormatError(
            "override files come from different hipBLASLt builds (pass --validators-from FILE "
            "to name the one to target):\n  " + "\n  ".join(f"{p}: Git Version {v!r}" for p, v in versions.items())
        )
    git = target_git if target_git is not None else next(iter(versions.values()), None)
    keys: dict[tuple[str, ...], dict[tuple[str, ...], OverrideEntry]] = {}
    lines = []
    for ofile in files:
        for entry in ofile.entries:
            build = row_build(entry, ofile.git_version)
            if target_git is not None and build != target_git:
                lines.append(
                    f"{','.join(entry.key)}: dropped ({ofile.path}): tuned on build {build!r}, the target "
                    f"is {target_git!r}; solution indices do not carry across builds"
                )
                continue
            entries = keys.setdefault(entry.key, {})
            if entry.identity in entries:
                lines.append(f"{','.join(entry.key)}: {ofile.path} repeats solution {entry.identity[0]}: the later row")
            entries[entry.identity] = entry
    merged = []
    for key, entries in keys.items():
        ordered = sorted(entries.values(), key=OverrideEntry.speed)
        merged += ordered[::-1] if key[0] == "current" else ordered
    lines.append(f"{sum(len(f.entries) for f in files)} entries from {len(files)} files -> {len(merged)} entries")
    return git, merged, lines


def write_override(path: str | Path, git_version: str | None, entries: Sequence[OverrideEntry]) -> None:
    atomic_write_text(path, format_override(git_version, entries))

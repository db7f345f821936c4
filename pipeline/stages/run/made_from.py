"""What a stage was made from, so that a rerun under the same run name redoes what changed.

A stage's record (``<run>/made_from/<stage>.json``, written when the stage finishes) holds the parameters it
used, the sha256 of every file the user handed it (``--untuned`` CSVs, ``--results``, logic directories...)
and the identity of each stage it read from. Its identity is the hash of all three, so a change anywhere
upstream changes the identity of every stage downstream: a stage is complete only while its record's
identity is the one its inputs give now. ``changes`` names what differs, in the user's words.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ...atomic import atomic_write_json
from ...errors import BadInput

RECORDS = "made_from"


@functools.lru_cache(maxsize=4096)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


MISSING = "missing"


def file_digest(path: str | Path) -> str:
    """sha256 of a file's content (read once per size and modification time in a process); ``MISSING`` for
    a file that is not there (the stage that reads it names it; a file that appears later is a change)."""
    try:
        stat = Path(path).stat()
        return _digest(str(Path(path).absolute()), stat.st_size, stat.st_mtime_ns)
    except FileNotFoundError:
        return MISSING
    except OSError as err:
        raise BadInput(f"{path}: cannot be read: {err.strerror or err}") from None


def tree_files(root: str | Path, pattern: str = "*.yaml") -> list[Path]:
    """The files under ``root`` matching ``pattern`` (recursively), sorted; none for a missing root."""
    root = Path(root)
    return sorted(p for p in root.rglob(pattern) if p.is_file()) if root.is_dir() else []


@dataclass(frozen=True)
class MadeFrom:
    """A stage's parameters, its user files' digests and its inputs' identities."""

    params: Mapping[str, object]
    files: Mapping[str, str] = field(default_factory=dict)
    inputs: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, params: Mapping[str, object], files: Iterable[str | Path], inputs: Mapping[str, str]) -> MadeFrom:
        return cls(dict(params), {str(Path(f).absolute()): file_digest(f) for f in files}, dict(inputs))

    @property
    def identity(self) -> str:
        text = json.dumps({"params": self.params, "files": self.files, "inputs": self.inputs}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def to_json(self) -> dict:
        return {
            "identity": self.identity,
            "params": dict(self.params),
            "files": dict(self.files),
            "inputs": dict(self.inputs),
        }

    @classmethod
    def from_json(cls, data: dict) -> MadeFrom:
        return cls(data["params"], data.get("files", {}), data.get("inputs", {}))


def record_path(run_dir: Path, stage: str) -> Path:
    return Path(run_dir) / RECORDS / f"{stage}.json"


def read_record(run_dir: Path, stage: str) -> MadeFrom | None:
    """The stage's record, or None where it has none (never finished, or made before records existed, or a
    record that does not parse: the stage is redone)."""
    path = record_path(run_dir, stage)
    try:
        return MadeFrom.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_record(run_dir: Path, stage: str, made_from: MadeFrom) -> None:
    atomic_write_json(record_path(run_dir, stage), made_from.to_json())


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _value(value: object) -> str:
    return "unset" if value is None else repr(value)


def changes(old: MadeFrom, new: MadeFrom) -> list[str]:
    """What differs between two records, parameters and files (inputs are the caller's to explain)."""
    said = [
        f"{_option(k)} {_value(old.params.get(k))} -> {_value(new.params.get(k))}"
        for k in sorted(set(old.params) | set(new.params))
        if old.params.get(k) != new.params.get(k)
    ]
    for path in sorted(set(old.files) | set(new.files)):
        if said and (path not in old.files or path not in new.files):
            continue  # a changed parameter named other files: it says why
        if path not in old.files:
            said.append(f"{path} is a new input")
        elif path not in new.files:
            said.append(f"{path} is no longer an input")
        elif old.files[path] != new.files[path]:
            said.append(f"{path} changed (content)")
    return said

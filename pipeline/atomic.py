"""Atomic file output: write beside the destination, fsync, then rename over it.

A file written here gets the mode a plain ``open()`` would give it (0666 less the umask), not
``mkstemp``'s 0600: what the pipeline writes is read by other users (an image's non-root user, a
scheduler's account). ``make_readable`` opens a whole tree to every user, whatever the umask, for what ships.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", private: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; it replaces ``path`` only if the block succeeds. ``private``: the
    file is its owner's alone (0600) from its first byte, for a secret."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file to write", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600 if private else 0o666 & ~_umask())
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """This process's umask, read without changing it where the kernel publishes it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore
    os.umask(mask)
    return mask


def make_readable(root: str | Path) -> None:
    """Every directory under ``root`` (itself included) 0755, every file 0644, or 0755 where its owner may
    execute it: readable by any user whatever the umask (Docker's COPY keeps modes)."""
    root = Path(root)
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & 0o100
        path.chmod(0o755 if executable else 0o644)


def mkdirs_readable(path: str | Path) -> Path:
    """Create ``path`` and its missing parents 0755 whatever the umask (those that exist keep their mode:
    they are not ours to change); ``path``, absolute."""
    path = Path(os.path.abspath(path))
    missing = [p for p in [path, *path.parents] if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        directory.chmod(0o755)
    return path


def atomic_write_text(path: str | Path, text: str, private: bool = False) -> None:
    with atomic_open(path, private=private) as handle:
        handle.write(text)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def create_json(path: str | Path, data: Any) -> bool:
    """Write ``data`` to ``path`` only where nothing is there yet, whole or not at all: a finished file linked to
    the name, which a link never replaces, so of processes that write one name at once exactly one succeeds
    (on a file system without links, where nothing is there a moment before). Whether this one did."""
    path = Path(path)
    staged = path.with_name(f".{path.name}.{os.getpid()}.new")
    atomic_write_json(staged, data)
    try:
        os.link(staged, path)
    except FileExistsError:
        return False
    except OSError:  # no hard links here
        if path.exists():
            return False
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return True


@contextmanager
def atomic_directory(path: str | Path, marker: str | None = None) -> Iterator[Path]:
    """Build a directory in ``<path>.partial`` (emptied first); it replaces ``path`` only if the block succeeds.

    A failed block leaves ``<path>.partial`` for inspection and ``path`` as it was. ``path`` may be a directory
    or nothing, never a file (``NotADirectoryError``); ``marker``: text of an ``OUTPUT_MARKER`` file written
    into the new directory, which says the pipeline wrote it (``claim_output_dir``).
    """
    path = Path(os.path.abspath(path))
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(path))
    staging = path.with_name(path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    yield staging
    if marker is not None:
        atomic_write_text(staging / OUTPUT_MARKER, marker + "\n")
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent)) if path.exists() else None
    if old is not None:
        path.replace(old)  # onto the empty directory of a name nobody else uses
    staging.rename(path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


OUTPUT_MARKER = ".gemm-tune-output"


WRITTEN_ENV = "GEMM_TUNE_STATE_DIR"  # where the record of the files gemm-tune wrote lives (``written_record``)


def written_record() -> Path:
    """The record of the single files ``gemm-tune`` commands wrote (path -> sha256 of what they wrote), so a
    command may replace its own earlier output but not a file someone else wrote: ``$GEMM_TUNE_STATE_DIR``, else
    ``$XDG_STATE_HOME/gemm-tune``, else ``~/.local/state/gemm-tune``, then ``written.json``."""
    base = os.environ.get(WRITTEN_ENV) or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "gemm-tune"
    )
    return Path(base) / "written.json"


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_record(record: Path) -> dict[str, str]:
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def wrote(path: str | Path) -> bool:
    """Whether ``path`` holds what a ``gemm-tune`` command last wrote there (unchanged since)."""
    target = Path(os.path.abspath(path))
    recorded = _read_record(written_record()).get(str(target))
    return recorded is not None and target.is_file() and recorded == _sha256(target)


def note_written(path: str | Path) -> None:
    """Record that a command wrote ``path`` as it is now (under a lock; entries of files gone are dropped). A
    record that cannot be written (a read-only home) costs only a ``--force`` on the next run."""
    import fcntl

    target = Path(os.path.abspath(path))
    record = written_record()
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        with open(record.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = {k: v for k, v in _read_record(record).items() if os.path.exists(k)}
            data[str(target)] = _sha256(target)
            with atomic_open(record, private=True) as handle:
                json.dump(data, handle, indent=1, sort_keys=True)
    except OSError:
        pass


def claim_output_file(out: str | Path, inputs: Sequence[str | Path] = (), force: bool = False) -> Path:
    """Check that a command may write the file ``out`` (atomically, replacing it), before it reads or measures
    anything; its absolute path. Refused (``BadInput``): a directory; one of the command's ``inputs`` (never,
    even with ``force``); an existing file a ``gemm-tune`` command did not write, or that changed since
    (``wrote``), unless ``force``. The command calls ``note_written`` once it wrote it."""
    from .errors import BadInput

    target = Path(os.path.abspath(out))
    if target.is_dir():
        raise BadInput(f"{out}: is a directory; name a file for the output")
    if target.resolve() in {Path(os.path.abspath(p)).resolve() for p in inputs}:
        raise BadInput(f"{out}: is one of the inputs, which writing it would replace; name another file")
    if target.exists() and not force and not wrote(target):
        raise BadInput(
            f"{out}: exists and gemm-tune did not write it (or it changed since); name a new file, or pass "
            "--force to replace it"
        )
    return target


def claim_output_dir(out: str | Path, inputs: Sequence[str | Path], force: bool = False) -> Path:
    """Check that a command may replace the directory ``out`` as a whole, before it reads anything; its
    absolute path. Refused (``BadInput``): a file; a directory that holds one of ``inputs`` or the current
    directory (never, even with ``force``); a non-empty directory without this pipeline's ``OUTPUT_MARKER``
    (unless ``force``)."""
    from .errors import BadInput

    target = Path(os.path.abspath(out))
    if target.exists() and not target.is_dir():
        raise BadInput(f"{out}: exists and is not a directory (the output is a directory, written as a whole)")
    real = target.resolve()
    for name, held in [*((f"the input {p}", p) for p in inputs), ("the current directory", os.getcwd())]:
        where = Path(os.path.abspath(held)).resolve()
        if where == real or real in where.parents:
            raise BadInput(
                f"{out}: holds {name}, which writing it as a whole would delete; name another output directory"
            )
    if target.is_dir() and not (target / OUTPUT_MARKER).exists() and any(target.iterdir()) and not force:
        raise BadInput(
            f"{out}: a non-empty directory gemm-tune did not write; name a new or empty one, or pass "
            "--force to replace it as a whole"
        )
    return target

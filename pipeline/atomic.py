"""Atomic file output: write beside the destination, fsync, then rename over it.

A file written here gets the mode a plain ``open()`` would give it (0666 less the umask), not
``mkstemp``'s 0600: what the pipeline writes is read by other users (an image's non-root user, a
scheduler's account). ``make_readable`` opens a whole tree to every user, whatever the umask, for what ships.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; it replaces ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
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


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text)


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Build a directory in ``<path>.partial`` (emptied first); it replaces ``path`` only if the block succeeds.

    A failed block leaves ``<path>.partial`` for inspection and ``path`` as it was.
    """
    path = Path(path)
    staging = path.with_name(path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    yield staging
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    staging.rename(path)
    shutil.rmtree(old, ignore_errors=True)

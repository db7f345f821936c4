"""The nightly run: one lock per workdir, exit codes a scheduler can act on, and its cron/systemd units.

    0   the bundle was accepted
    10  the bundle was refused (a regression, or the speedup under --min-speedup): nothing to ship
    11  a tool failed or is missing (a vendor tool, the GPU, the workload itself)
    12  bad input (a malformed TunableOp, logic or override file; no such input file; an unknown parameter)
    13  another run holds the workdir (its pid, host and start are printed)
    1   any other failure

The lock is an exclusive ``flock`` on ``<workdir>/.gemm-tune.lock`` (the kernel drops it when its holder
dies, so a crashed run never blocks the next); the holder writes who it is into the file.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import jinja2

from ..backends.base import ToolMissing
from ..backends.hipblaslt import BenchFailed
from ..backends.slots import NoFreeGpu
from ..formats.hipblaslt_bench import BenchFormatError
from ..formats.hipblaslt_override import OverrideFormatError
from ..formats.logic import LogicFormatError
from ..formats.tunableop import TunableOpFormatError
from .bench import BenchError
from .collect import CollectionError
from .configs import TEMPLATES
from .fingerprint import ProbeFailed
from .gate import GateRefused
from .logic_merge import ProblemTypeMismatch
from .results_merge import ValidatorMismatch
from .shapes import ShapeInputError

OK, FAILED, REFUSED, TOOL, INPUT, LOCKED = 0, 1, 10, 11, 12, 13


class BadArguments(ValueError):
    """Parameters the job does not take."""


LOCK_NAME = ".gemm-tune.lock"
_KINDS = ((REFUSED, (GateRefused,)),
          (TOOL, (ToolMissing, BenchFailed, BenchFormatError, NoFreeGpu, BenchError, CollectionError, ProbeFailed)),
          (INPUT, (TunableOpFormatError, ShapeInputError, LogicFormatError, OverrideFormatError, ValidatorMismatch,
                   ProblemTypeMismatch, FileNotFoundError, BadArguments)))


def exit_code(errors: Sequence[BaseException]) -> int:
    """The code of a run that failed with ``errors`` (its tasks' exceptions); refusal outranks the rest."""
    for code, kinds in _KINDS:
        if any(isinstance(error, kinds) for error in errors):
            return code
    return FAILED if errors else OK


class Locked(RuntimeError):
    """Another run holds the workdir."""


@contextlib.contextmanager
def workdir_lock(workdir: Path, wait_s: float = 0.0, argv: Sequence[str] = ()) -> Iterator[Path]:
    """Hold ``workdir``'s lock for the block; wait up to ``wait_s`` for a holder, then raise ``Locked`` naming it."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_NAME
    handle = path.open("a+")
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    raise Locked(f"{workdir} is in use by another run: {handle.read().strip() or 'unknown holder'}"
                                 ) from None
                time.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "argv": list(argv),
                                 "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}))
        handle.flush()
        yield path
    finally:
        handle.close()


def units(workdir: Path, arguments: Sequence[str], at: str = "02:00") -> dict[str, str]:
    """A cron line and a systemd service and timer that run the nightly job at ``at`` (HH:MM), every path
    absolute (``python -m pipeline nightly`` with this interpreter)."""
    hour, minute = (int(part) for part in at.split(":"))
    workdir = workdir.absolute()
    command = [sys.executable, "-m", "pipeline", "nightly", "--workdir", str(workdir), *arguments]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True, keep_trailing_newline=True)
    context = {"command": " ".join(command), "workdir": workdir, "hour": hour, "minute": minute}
    return {name: env.get_template(f"{name}.j2").render(context)
            for name in ("gemm-tune-nightly.cron", "gemm-tune-nightly.service", "gemm-tune-nightly.timer")}

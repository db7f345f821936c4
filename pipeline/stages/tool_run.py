"""Running a vendor tool that writes a tree: where it lives, and a run whose output appears only whole."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .. import procs
from ..atomic import atomic_directory, atomic_write_text
from ..backends.base import ToolMissing
from ..errors import ToolError
from ..procs import tail_lines


def tool_root(explicit: str | None, env: str, missing: str) -> Path:
    """The directory given by an option, else by ``$env``, as an absolute path; ``missing`` says what to do."""
    given = explicit or os.environ.get(env)
    if not given:
        raise ToolMissing(missing)
    return Path(given).absolute()


def run_into(argv: list[str], out: Path, timeout_s: float, what: str) -> None:
    """Run ``argv`` with the output directory appended (a staging one, replacing ``out`` only on success);
    its stdout and stderr kept in ``out/tool.log``; a failure or a time-out raises with the log's tail."""
    with atomic_directory(out) as staging:
        try:
            proc = procs.run([*argv, str(staging)], timeout_s=timeout_s, cwd=staging)
        except subprocess.TimeoutExpired:
            raise ToolError(f"{what} ran past {timeout_s:.0f} s") from None
        atomic_write_text(staging / "tool.log", proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise ToolError(f"{what} exited with code {proc.returncode}:\n"
                               f"{tail_lines(proc.stdout + proc.stderr, 15)}")

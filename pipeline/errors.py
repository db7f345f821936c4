"""The errors the pipeline expects, each carrying the exit code a scheduler acts on.

    0   success (the bundle was accepted)
    1   anything unexpected (a bug: the traceback says where)
    2   the command line itself is malformed (argparse's usage error of a ``gemm-tune`` step)
    10  ``Refused``: the bundle was refused (a regression, or the speedup under --min-speedup)
    11  ``ToolError``: a tool failed or is missing (a vendor tool, the GPU, the workload, a worker)
    12  ``BadInput``: bad input (a malformed file, a missing input, a parameter the job does not take)
    13  ``Busy``: another run holds the workdir, or every GPU asked for stayed taken

``gemm-tune``, ``gemm-tune nightly`` and a Luigi task's failure message all read the code from the error
(``exit_code``), so a new error class picks its code where it is defined.
"""

from __future__ import annotations

from collections.abc import Iterable

OK, FAILED, USAGE, REFUSED, TOOL, INPUT, BUSY = 0, 1, 2, 10, 11, 12, 13
KINDS = {
    OK: "success",
    FAILED: "unexpected failure",
    USAGE: "usage error",
    REFUSED: "bundle refused",
    TOOL: "tool failure",
    INPUT: "bad input",
    BUSY: "busy",
}
SEVERITY = (REFUSED, TOOL, INPUT, BUSY, FAILED)  # a run that failed several ways reports the first of these


class PipelineError(Exception):
    """An error the pipeline expects; ``exit_code`` says which kind."""

    exit_code = FAILED


class Refused(PipelineError):
    """The result was measured and refused."""

    exit_code = REFUSED


class ToolError(PipelineError, RuntimeError):
    """A tool, the GPU, the workload or a worker failed or is missing."""

    exit_code = TOOL


class BadInput(PipelineError, ValueError):
    """An input file, path or parameter is wrong; the message names it."""

    exit_code = INPUT


class Busy(PipelineError, RuntimeError):
    """What the run needs is held by another run."""

    exit_code = BUSY


_PATH_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)  # a path given is wrong


def exit_code(error: BaseException) -> int:
    """The exit code of one error: its own, or bad input for a path that does not exist or cannot be written."""
    if isinstance(error, PipelineError):
        return error.exit_code
    return INPUT if isinstance(error, _PATH_ERRORS) else FAILED


def run_exit_code(codes: Iterable[int]) -> int:
    """The exit code of a run that failed with errors of these codes (none: success)."""
    codes = set(codes)
    return next((code for code in SEVERITY if code in codes), OK if not codes else FAILED)


def clip(text: str, limit: int = 200) -> str:
    """``text`` as an error message quotes it: at most ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def one_line(error: BaseException, limit: int = 600) -> str:
    """``<Class> (exit <code>, <kind>): <message>`` on one line: a message of several lines (a list of what
    differs, a parser's position) joined with ``; ``, clipped at ``limit`` characters."""
    code = exit_code(error)
    text = ""
    for line in (line.strip() for line in str(error).strip().splitlines() if line.strip()):
        text += (" " if not text or text.endswith(":") else "; ") + line if text else line
    return f"{type(error).__name__} (exit {code}, {KINDS[code]}): {clip(text, limit)}"

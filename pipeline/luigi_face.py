"""What a plain ``luigi --module pipeline ...`` run shows and returns: Luigi's exit codes set (``[retcode]``,
unless ``luigi.cfg`` sets them), an error the pipeline expects told in one line without Luigi's traceback,
and that line again, last on stderr, after Luigi's summary:

    ERROR: gemm-tune: Bench failed: ToolMissing (exit 11, tool failure): ... (luigi exit 2)

The code in ``(exit N)`` is the pipeline's (``errors.py``, what ``gemm-tune nightly`` returns); ``luigi exit``
is Luigi's own (``RETCODES``): 2 a task failed, 3 missing data, 4 a value Luigi could not parse, 5 a check
before any work (``complete()`` or ``requires()``) refused the run, 13 the same command already runs (with
``--local-scheduler``).
A traceback is kept for what the pipeline does not expect: a bug.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import re
import sys
from dataclasses import dataclass, field

import luigi
import luigi.configuration

from .errors import SEVERITY, PipelineError, exit_code, one_line

RETCODES = {"unhandled_exception": 4, "missing_data": 3, "task_failed": 2, "scheduling_error": 5, "already_running": 13}
LUIGI_LOGGER = "luigi-interface"
_REFUSED = re.compile(r"^(Will not run .*? or any dependencies due to error in (?:complete|deps)\(\) method):\n", re.S)
_RAISED = re.compile(r"^([A-Za-z_][\w.]*): ", re.M)


def set_exit_codes(argv: list[str] | None = None) -> None:
    """Make ``luigi --module pipeline ...`` exit non-zero when a task fails, unless luigi.cfg says otherwise.
    ``already_running`` also counts tasks another worker ran (Luigi's ``run_by_other_worker``), which is every
    fleet worker's lot under a central scheduler: it is 13 only for a ``--local-scheduler`` run, where it means
    the identical command already runs."""
    config = luigi.configuration.get_config()
    local = "--local-scheduler" in (sys.argv[1:] if argv is None else argv)
    for key, code in RETCODES.items():
        if not config.has_option("retcode", key) and (key != "already_running" or local):
            config.set("retcode", key, str(code))


def _expected(qualified: str) -> bool:
    """Whether the exception class named ``module.Class`` in a traceback is one the pipeline raises on
    purpose (a ``PipelineError``)."""
    module, _, name = qualified.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name) if module else None
    except ImportError:
        return False
    return isinstance(cls, type) and issubclass(cls, PipelineError)


@dataclass
class LastLine:
    """The failures of this process, for the line printed last (``atexit``); the most severe one wins."""

    lines: list[tuple[int, int, str]] = field(default_factory=list)  # (exit code, luigi exit code, line)
    registered: bool = False

    def add(self, error: BaseException | None, line: str, luigi_code: str) -> None:
        """Keep ``line`` for the end of a ``luigi`` command (not of a program that calls ``luigi.build``)."""
        if "luigi.cmdline" not in sys.modules:
            return
        code = exit_code(error) if error is not None else 1
        self.lines.append((code, RETCODES[luigi_code], line))
        if not self.registered:
            self.registered = True
            atexit.register(self.print)

    def print(self) -> None:
        if not self.lines:
            return
        worst = min(self.lines, key=lambda item: SEVERITY.index(item[0]) if item[0] in SEVERITY else len(SEVERITY))
        luigi_code = max(item[1] for item in self.lines)
        sys.stderr.flush()
        print(f"ERROR: {worst[2]} (luigi exit {luigi_code})", file=sys.stderr, flush=True)


class OneLineErrors(logging.Filter):
    """On Luigi's logger: a failure the pipeline expects loses its traceback (its message says what is wrong),
    a parameter Luigi could not parse is named with its value, and each goes to ``last``."""

    def __init__(self, last: LastLine) -> None:
        super().__init__()
        self.last = last

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, PipelineError):
            record.exc_info, record.exc_text = None, None
            return True
        message = record.getMessage()
        if record.msg == "Uncaught exception in luigi" and isinstance(error, ValueError):
            from .dag.arguments import BadArguments, refused_argument

            reason = refused_argument(sys.argv[1:]) or str(error)
            failure = BadArguments(reason)
            line = f"gemm-tune: luigi refused its parameters: {one_line(failure)}"
            self.last.add(failure, line, "unhandled_exception")
            return False  # said once, last
        refused = _REFUSED.match(message)
        if refused:
            raised = _RAISED.findall(message)
            if raised and _expected(raised[-1]):
                tail = message.rstrip().splitlines()[-1]
                record.msg, record.args = f"{refused[1]}: {tail}", ()
        return True


def _described(help_text: str, param: luigi.Parameter) -> str:
    """A parameter's help with its choices (sorted) and its default, ``%`` escaped for argparse."""
    said = []
    help_text = re.sub(r"\s*Choices: \{[^}]*\}", "", help_text)  # Luigi's own, in set order: said below in order
    bounds = re.search(r"\s*permitted values: (.*)$", help_text)  # Luigi's own, run into the sentence
    if bounds:
        help_text = help_text[: bounds.start()]
    choices = getattr(param, "_choices", None)
    if choices:
        said.append("one of " + ", ".join(sorted(map(str, choices))))
    if bounds:
        said.append(bounds[1])
    default = getattr(param, "_default", None)
    flag = isinstance(param, luigi.BoolParameter) and not isinstance(param, luigi.OptionalBoolParameter)
    named = re.search(r"\(default\b", help_text)  # the description says its default in its own words
    if default not in (None, luigi.parameter._no_value) and not (flag and default is False) and not named:
        said.append(f"default: {default if default != '' else 'none'}")
    return (help_text + (f" ({'; '.join(said)})" if said else "")).replace("%", "%%")


def compact_help() -> None:
    """``luigi --module pipeline TASK --help`` as a user reads it: Luigi lists each of the task's parameters
    twice (``--TASK-name`` and ``--name``) with neither default nor choices; here the short form alone, with
    its choices in order and its default. The long form still parses (once per process).

    Luigi builds its parser of every registered task's parameters nine times in one ``TuneWorkload`` run (twice
    per command-line parse, and it parses three times): 0.16 s of a 2-core CPU. The built parser is kept per
    (task, help, tasks registered), the three things it is made from, and a parse does not change it."""
    import argparse

    from luigi.cmdline_parser import CmdlineParser
    from luigi.task_register import Register

    build = CmdlineParser._build_parser
    if getattr(build, "compact", False):
        return

    built: dict[tuple, argparse.ArgumentParser] = {}

    def compact(root_task: str | None = None, help_all: bool = False) -> argparse.ArgumentParser:
        key = (root_task, help_all, len(Register._get_reg()))
        if key in built:
            return built[key]
        parser = built[key] = build(root_task, help_all)
        mine = [(name, param) for task, _, name, param in Register.get_all_params() if task == root_task]
        params = {"--" + name.replace("_", "-"): param for name, param in mine}
        for action in parser._actions:
            flags = action.option_strings
            if root_task and any(flag.startswith(f"--{root_task}-") for flag in flags):
                action.help = argparse.SUPPRESS
            elif flags and flags[0] in params and action.help not in (None, argparse.SUPPRESS):
                action.help = _described(action.help, params[flags[0]])
        return parser

    compact.compact = True  # type: ignore[attr-defined]
    CmdlineParser._build_parser = staticmethod(compact)  # type: ignore[method-assign]


def install() -> LastLine:
    """Set the exit codes, the one-line errors on Luigi's logger and the compact ``--help`` (once per
    process)."""
    set_exit_codes()
    compact_help()
    logger = logging.getLogger(LUIGI_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, OneLineErrors):
            return existing.last
    last = LastLine()
    logger.addFilter(OneLineErrors(last))
    return last

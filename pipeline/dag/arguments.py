"""The Luigi parameters' types and the checks of a command line, apart from the task classes: the job's own
numbers, run names and grids, ``--margin``'s alias rule, and how a refused parameter is named in one line (for
``gemm-tune nightly`` before it starts Luigi, and for a plain ``luigi`` run's last line, ``luigi_face``)."""

from __future__ import annotations

import contextlib
import io
import operator
from collections.abc import Sequence

import luigi
from luigi.cmdline_parser import CmdlineParser
from luigi.task_register import Register, TaskClassException

from ..errors import BadInput
from ..stages.gather import mgrid


class BadArguments(BadInput):
    """Parameters the job does not take, or values it cannot use."""


def counted(
    kind: type = int, low: float = 0, high: float = float("inf"), low_included: bool = True, **kwargs
) -> luigi.NumericalParameter:
    """A number parameter refused outside ``[low, high]`` (``low_included=False``: above ``low``)."""
    return luigi.NumericalParameter(
        var_type=kind, min_value=low, max_value=high, left_op=operator.le if low_included else operator.lt, **kwargs
    )


def margin_value(alias: float | None, own: float) -> float:
    """A margin: ``--margin`` (the alias of both) where given, else the stage's own; refused outside [0, 10]."""
    if alias is None:
        return own
    if not 0 <= alias <= 10:
        raise BadArguments(f"--margin {alias}: must be in [0, 10] (a fraction: 0.02 is 2%)")
    return alias


class RunName(luigi.Parameter):
    """A run directory's name: one path component under --workdir."""

    def normalize(self, x: object) -> str:
        given = CmdlineParser.get_instance()  # Luigi reads an empty --run-name "" as not given: today's date
        if given is not None and getattr(given.known_args, "run_name", None) == "":
            raise ValueError("an empty run name: name the run (one path component under --workdir) or leave it out")
        name = str(super().normalize(x))
        if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
            raise ValueError(
                f"{name!r} is not a run name: one path component under --workdir, not starting "
                "with a dot (e.g. 2026-11-24 or llama-nightly)"
            )
        return name


class GridParameter(luigi.Parameter):
    """``--m-grid``: exact, serving or an ascending list of token counts (``mgrid.parse_grid``)."""

    def normalize(self, x: object) -> str:
        try:
            spec = mgrid.parse_grid(str(x), option=None)
        except mgrid.GridError as err:
            raise ValueError(str(err)) from None  # Luigi's refusal of a parameter (``luigi_face``), as RunName's
        return spec if isinstance(spec, str) else ",".join(map(str, spec))


def check_parameters(task: str, arguments: Sequence[str]) -> None:
    """Parse ``arguments`` as Luigi would for ``task``; raise ``BadArguments`` naming the option that it
    refuses (an unknown name, a value of the wrong type or out of range)."""
    try:
        Register.get_task_cls(task)
    except TaskClassException as err:
        raise BadArguments(str(err)) from None
    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal), CmdlineParser.global_instance([task, *arguments]) as parser:
            parser.get_task_obj()
    except SystemExit:  # argparse's own refusal (it wrote why)
        said = [line for line in refusal.getvalue().splitlines() if "error:" in line]
        raise BadArguments(
            f"{task}: {said[-1].split('error:', 1)[1].strip() if said else 'parameters refused'} "
            f"(see luigi --module pipeline {task} --help)"
        ) from None
    except ValueError as err:
        raise BadArguments(f"{task}: {_culprit(task, arguments) or err}") from None


def _culprit(task: str, arguments: Sequence[str]) -> str | None:
    """``--name 'value': why`` for the first argument whose value its parameter refuses."""
    params = dict(Register.get_task_cls(task).get_params())
    pairs, items = [], list(arguments)
    for i, arg in enumerate(items):
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq and i + 1 < len(items):
                value = items[i + 1]
            pairs.append((name, value))
    for name, value in pairs:
        param = params.get(name.replace("-", "_"))
        if param is None:
            continue
        try:
            param.normalize(param.parse(value))
        except (ValueError, TypeError) as err:
            return f"--{name} {value!r}: {err}"
    return None


def refused_argument(argv: Sequence[str]) -> str | None:
    """For a ``luigi`` command line whose parameters Luigi could not take: ``Task: --name 'value': why``."""
    for i, arg in enumerate(argv):
        if arg.startswith("-"):
            continue
        try:
            Register.get_task_cls(arg)
        except TaskClassException:
            continue
        culprit = _culprit(arg, argv[i + 1 :])
        return f"{arg}: {culprit} (see luigi --module pipeline {arg} --help)" if culprit else None
    return None

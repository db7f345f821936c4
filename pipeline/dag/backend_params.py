"""The Luigi parameters each backend declares in its registry entry (``registry.Param``), made here so the
registry stays free of Luigi: every stack-bound task takes them (``base.StackBound``), Bench's record of what
it was made from holds them, and a new backend's parameters come with its entry alone."""

from __future__ import annotations

import operator

import luigi

from ..stages.bench import registry
from .arguments import counted


def luigi_parameter(param: registry.Param) -> luigi.Parameter:
    """The Luigi parameter of a backend's ``param``."""
    if param.kind is bool:
        return luigi.BoolParameter(default=param.default, description=param.description)
    if param.kind in (int, float):
        low = param.low if param.low is not None else float("-inf")
        high = param.high if param.high is not None else float("inf")
        return counted(  # both bounds inclusive
            param.kind, low, high, default=param.default, description=param.description, right_op=operator.le
        )
    return luigi.Parameter(default=param.default, description=param.description)


def backend_parameters() -> dict[str, luigi.Parameter]:
    """Every backend's own parameters, by name, as Luigi parameters."""
    return {name: luigi_parameter(param) for name, param in registry.parameters().items()}

"""What would fail a run after its costly stages, checked before any of them starts (``preflight``, called in
``TuneWorkload.requires`` so Luigi runs nothing when it fails). The task classes are looked up by name in
Luigi's register: this module is read by ``pipeline/tasks.py``, never the other way."""

from __future__ import annotations

import logging

import luigi
from luigi.task_register import Register

from ..formats import tunableop
from ..formats.torch_build import torch_build
from ..stages.bench import registry
from ..stages.merge.results_merge import check_target, require_target
from .arguments import margin_value

log = logging.getLogger("pipeline")


def _task(task: luigi.Task, family: str) -> luigi.Task:
    """``task``'s parameters on the task class of ``family`` (looked up by name: no import of the tasks)."""
    return task.clone(Register.get_task_cls(family))


def preflight(task: luigi.Task) -> None:
    """What would fail the run after its costly stages, checked before any of them starts (in ``requires``,
    so Luigi runs nothing): the config settings, the tool the backend needs and the stack probe where Bench is
    still to run, the validator block the rows will carry while MergeResults is, and the end-to-end A/B's cap
    (where ``task`` has their parameters).
    ``task`` is Bench or a task that inherits its parameters."""
    _task(task, "GenerateConfigs").settings()  # options no TensileLite takes (Validate reads the configs too)
    if hasattr(task, "e2e_max_reps"):
        _task(task, "Validate").e2e_cap()  # a cap on the A/B below its --e2e-reps
    if task.margin is not None:
        tuning = margin_value(task.margin, task.tune_margin)
        log.info("--margin %s sets --tune-margin %s and --gate-margin %s", task.margin, tuning, tuning)
    tuner = _task(task, "Bench")
    merges = [_task(task, "MergeResults"), _task(task, "MergeLogic")] if hasattr(task, "validators_from") else []
    if not tuner.complete() and (not merges or any(m.requires() and not m.complete() for m in merges)):
        tuner.backend_options()
        tuner.stack()
    if not hasattr(task, "validators_from") or task.results or _task(task, "MergeResults").complete():
        return
    build = torch_build()
    rocm = registry.amd(task.backend) or (task.backend == "tunableop" and bool(build and build["hip"]))
    if task.validators_from:
        check_target(
            "rocm" if rocm else "cuda", tunableop.read_file(task.validators_from).validators, task.validators_from
        )
    elif registry.amd(task.backend):
        require_target(task.backend, bool(build and build["hip"]), task.validators_from)

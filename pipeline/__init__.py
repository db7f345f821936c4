"""GEMM tuning pipeline. ``luigi --module pipeline TuneWorkload --local-scheduler`` runs the nightly job.

The Luigi tasks (``pipeline.tasks``) are defined, and so registered with Luigi, when this package is imported
by a process that has Luigi loaded (the ``luigi`` command imports it first, then ``--module pipeline``), or
when one of them is named (``from pipeline import TuneWorkload``). Processes that never schedule tasks (the
GPU workers, ``python -m pipeline.runtime`` inside a user's program) do not pay for importing Luigi.
"""

from __future__ import annotations

import importlib
import sys

__all__ = [
    "Bench",
    "CollectShapes",
    "GatherShapes",
    "GenerateConfigs",
    "MergeLogic",
    "MergeResults",
    "TuneWorkload",
    "Validate",
]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(".tasks", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if "luigi" in sys.modules:  # Luigi looks tasks up by name after importing --module: define them now
    importlib.import_module(".tasks", __name__)

"""GEMM tuning pipeline. ``luigi --module pipeline TuneWorkload --local-scheduler`` runs the nightly job."""

from __future__ import annotations

import luigi.configuration

from .tasks import Bench, CollectShapes, GatherShapes, GenerateConfigs, MergeLogic, MergeResults, TuneWorkload, Validate


def _default_exit_codes() -> None:
    """Make ``luigi --module pipeline ...`` exit non-zero when a task fails, unless luigi.cfg says otherwise."""
    config = luigi.configuration.get_config()
    for key, code in (("unhandled_exception", 4), ("missing_data", 3), ("task_failed", 2),
                      ("scheduling_error", 5)):
        if not config.has_option("retcode", key):
            config.set("retcode", key, str(code))


_default_exit_codes()

__all__ = ["Bench", "CollectShapes", "GatherShapes", "GenerateConfigs", "MergeLogic", "MergeResults", "TuneWorkload",
           "Validate"]

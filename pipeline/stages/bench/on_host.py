"""How Bench tunes on this host (``Bench`` and each ``BenchShard``): through the fingerprint's cache of tuned
problems (``tuned_cache``), an M grid's anchors before its other points (``grid_seeds``, ``--m-grid``), one
worker process per GPU (``tune.run_shards``), every grid point's winner scored over its bucket
(``bucket_score``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...backends.base import TuneSettings
from ...problem import GemmProblem
from ..gather import mgrid
from ..gather.shapes import read_shapes_json
from ..run.fingerprint import Stack
from ..run.layout import RunLayout
from . import grid_seeds, tuned_cache
from .tune import pending, run_shards

log = logging.getLogger("pipeline")


@dataclass(frozen=True)
class HostBench:
    """What one host's Bench needs: where the run is, the stack it tunes under, the GPUs, the backend's
    factory (``registry.BackendEntry.factory_path``) and constructor options, the settings and the grid."""

    layout: RunLayout
    workdir: Path
    stack: Stack
    gpus: Sequence[int]
    factory: str
    options: dict
    settings: TuneSettings
    m_grid: str = mgrid.AUTO

    def tune(
        self, problems: Sequence[GemmProblem], progress: Callable[[int, int], None] | None = None, name: str = "shard"
    ) -> dict:
        """Tune ``problems`` (those without a result yet), through the cache; what the cache gave and took
        (``tuned_cache.tune_through_cache``'s record). ``name`` prefixes the workers' files under ``shards/``."""
        shapes = read_shapes_json(self.layout.shapes)
        buckets = {record.problem: record.bucket for record in shapes if record.bucket}
        out = self.layout.bench

        def overall(part: list) -> Callable[[int, int], None] | None:
            """``progress`` over every problem, a grid's two passes counted as one: the part's count added to the
            results outside it, which the part's workers do not change (counted once, not at every poll)."""
            if progress is None:
                return None
            in_part = set(part)
            outside = [p for p in problems if p not in in_part]
            before = len(outside) - len(pending(outside, out))
            return lambda done, _total: progress(before + done, len(problems))

        def run(part: list, previous: dict, sources: dict) -> None:
            run_shards(
                part,
                out,
                self.gpus,
                self.settings,
                self.factory,
                overall(part),
                self.options,
                previous,
                sources,
                name=name,
                buckets=buckets,
            )

        def tune_pending(previous: dict, sources: dict) -> None:
            if not buckets:  # the exact grid (or ``auto`` resolved to it): one pass
                run(list(problems), previous, sources)
                return
            spec = mgrid.parse_grid(self.m_grid)
            spec = mgrid.SERVING if spec == mgrid.AUTO else spec  # a grid with buckets: auto chose serving
            wanted = set(problems)
            pending = [record for record in shapes if record.problem in wanted]
            seen = {record.problem for record in pending if record.seen}
            seeded = {record.problem for record in pending if record.seeded}
            gemms = [(record.bucket, record.seeded) for record in pending]
            log.info("%s", mgrid.cost_line(spec, gemms, len(seen), len(self.gpus)))
            grid_seeds.tune_in_two_passes(problems, seen - seeded, out, run, previous, sources)

        return tuned_cache.tune_through_cache(list(problems), out, self.workdir, self.stack, tune_pending)

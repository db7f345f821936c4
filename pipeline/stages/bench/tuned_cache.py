"""The per-fingerprint cache of tuned problems, shared by every run of a workdir.

``<workdir>/cache/tuned/<fingerprint>/problems/<id>.json`` holds one Bench result per problem, exactly as
Bench writes it, and ``stack.json`` the facts it was tuned under. A run takes what its fingerprint's cache
holds instead of tuning again, and hands its new results back. A cached winner is not taken as it is: Bench
re-times it against torch's default in this run (kept with the new figure, or the problem tuned again where
it no longer wins; kept as it was by a backend that cannot re-time), so the speedup a run reports is its own
measurement, never an earlier run's draw repeated.
After a library upgrade (a new fingerprint on the same device with the same settings), the newest older cache
gives each problem its previous winner, which Bench re-times the same way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from ...atomic import atomic_write_json, atomic_write_text
from ...backends.base import CACHED, ProblemResult
from ...problem import GemmProblem
from ..run.fingerprint import STAMP, Stack
from .tune import RUNTIME, pending, problem_id, result_path

TUNED = Path("cache") / "tuned"


def cache_dir(workdir: Path, fp: str) -> Path:
    return Path(workdir).absolute() / TUNED / fp


def open_cache(workdir: Path, fp: str, facts: dict, settings: dict) -> Path:
    """This fingerprint's cache directory, its stamp naming the facts and settings (touched: newest first)."""
    cache = cache_dir(workdir, fp)
    if not (cache / STAMP).exists():
        atomic_write_json(cache / STAMP, {"fingerprint": fp, "stack": facts, "settings": settings})
    os.utime(cache / STAMP)
    return cache


def _hand_over(
    problems: Sequence[GemmProblem],
    source: Path,
    target: Path,
    accept: Callable[[dict], dict | None],
    replace: Collection[str] = (),
) -> int:
    """Copy the backend's runtime record and each problem result ``source`` has and ``target`` lacks (or holds
    for a problem id in ``replace``), as ``accept`` returns it (None: left out); returns how many results."""
    if (source / RUNTIME).exists() and not (target / RUNTIME).exists():
        atomic_write_text(target / RUNTIME, (source / RUNTIME).read_text())
    count = 0
    for problem in problems:
        origin, destination = result_path(source, problem), result_path(target, problem)
        if origin.exists() and (not destination.exists() or origin.stem in replace):
            text = origin.read_text()
            data = json.loads(text)
            kept = accept(data)
            if kept is data:  # unchanged: the bytes as they are
                atomic_write_text(destination, text)
            elif kept is not None:
                atomic_write_json(destination, kept)
            count += kept is not None
    return count


def restore(problems: Sequence[GemmProblem], cache: Path, out_dir: Path) -> int:
    """Copy the cached result of every problem that has none in ``out_dir`` (and the runtime record, which a
    run with nothing left to tune would not write); returns how many."""

    def mark(data: dict) -> dict:
        return {**data, "origin": f"cache {cache.name}" + (f" ({data['origin']})" if data.get("origin") else "")}

    return _hand_over(problems, cache, out_dir, mark)


def store(problems: Sequence[GemmProblem], out_dir: Path, cache: Path, replace: Collection[str] = ()) -> int:
    """Hand the clean results of ``out_dir`` to the cache (an entry already there stays, but for the problem
    ids in ``replace``: the cached winners this run re-timed); returns how many."""
    return _hand_over(
        problems, out_dir, cache, lambda data: None if data.get("errors") or data.get("skipped") else data, replace
    )


def winners(directory: Path, problems: Sequence[GemmProblem]) -> dict[str, dict]:
    """The results in ``directory`` (a cache) of those ``problems`` that have a winner, by problem id."""
    found = {}
    for problem in problems:
        path = result_path(directory, problem)
        if path.exists():
            result = json.loads(path.read_text())
            if ProblemResult.from_json(result).has_winner:
                found[path.stem] = result
    return found


def same_device(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("platform", "gpu", "arch", "sm_count"))


def previous_results(
    workdir: Path, stack: Stack, problems: Sequence[GemmProblem]
) -> tuple[str | None, dict[str, dict]]:
    """The newest other cache of the same device and settings, and its non-Default winners among
    ``problems`` (by problem id), to be re-timed under the new stack."""
    older = []
    for stamp in (Path(workdir).absolute() / TUNED).glob(f"*/{STAMP}"):
        data = json.loads(stamp.read_text())
        if (
            stamp.parent.name != stack.fingerprint
            and same_device(data.get("stack", {}), stack.facts)
            and data.get("settings") == stack.settings
        ):
            older.append((stamp.stat().st_mtime_ns, stamp.parent, data.get("fingerprint") or stamp.parent.name))
    if not older:
        return None, {}
    _, newest, newest_fp = max(older)
    return newest_fp, winners(newest, problems)


def tune_through_cache(
    problems: Sequence[GemmProblem],
    out_dir: Path,
    workdir: Path,
    stack: Stack,
    tune_pending: Callable[[dict[str, dict], dict[str, str]], None],
) -> dict:
    """Bench through the cache: take this fingerprint's cached results without a winner, have
    ``tune_pending(previous, sources)`` re-time its cached winners and the previous stack's (``sources``: the
    stack each came from, by problem id) and tune the rest, hand the new results back."""
    cache = open_cache(workdir, stack.fingerprint, stack.facts, stack.settings)
    cached = winners(cache, pending(problems, out_dir))  # re-timed in this run, not restored
    restored = restore([p for p in problems if problem_id(p) not in cached], cache, out_dir)
    todo = [p for p in pending(problems, out_dir) if problem_id(p) not in cached]
    previous_fp, previous = previous_results(workdir, stack, todo)
    sources = {pid: CACHED for pid in cached} | {pid: previous_fp or "" for pid in previous}
    tune_pending(previous | cached, sources)
    stored = store(problems, out_dir, cache, replace=cached)
    return {
        "cache": str(cache),
        "restored": restored,
        "retimed_from_cache": len(cached),
        "previous_fingerprint": previous_fp,
        "previous_winners": len(previous),
        "stored": stored,
    }

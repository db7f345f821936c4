"""The end-to-end A/B's runs (``e2e.ab_test``): one run of an arm, timed, with what the workload printed; and a
round of alternations side by side, one on each of several GPUs (``--e2e-parallel``).

Side by side, every GPU runs the same arm at the same moment (the round's order, ``stats.round_order``), so what
the runs share (the host's cores, its memory bandwidth) weighs on both arms alike, and each pair is one GPU's
two runs: boards that differ in speed cancel out of its ratio. It is for a workload that runs on one GPU; the
A/B shows it only that GPU (``slots.one_gpu_env``)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from ... import procs
from ...errors import ToolError
from ..gather.collect import parse_decode_tokens_per_s, parse_p99_ms, parse_pass_tokens_per_s, parse_tokens_per_s

Arm = tuple[Sequence[str], Mapping[str, str]]  # a run's command and environment


def run_figures(wall_s: float, stdout: str) -> dict:
    """One run of the A/B: its wall time and what the workload printed (tokens/s, p99 step latency, the decode
    steps' tokens/s where it prints them apart from the figure the A/B reads, and each timed pass's tokens/s
    where it prints more than one)."""
    tokens, decode = parse_tokens_per_s(stdout), parse_decode_tokens_per_s(stdout)
    passes = parse_pass_tokens_per_s(stdout)
    figures = {
        "wall_s": wall_s,
        "tokens_per_s": tokens,
        "p99_ms": parse_p99_ms(stdout),
        "decode_tokens_per_s": decode if decode != tokens else None,
    }
    return {**figures, "passes_tokens_per_s": passes} if len(passes) > 1 else figures


def timed_run(name: str, arm: Arm, rep: int, timeout_s: float) -> dict:
    """Run ``arm`` once (alternation ``rep`` of ``name``): its ``run_figures``; a time-out or a failure is a
    ``ToolError`` naming the run."""
    argv, env = arm
    start = time.monotonic()
    try:
        proc = procs.run(argv, timeout_s=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{name} run {rep} of {list(argv)} ran past {timeout_s:.0f} s") from None
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise ToolError(
            f"{name} run {rep} of {list(argv)} exited with code {proc.returncode}: {proc.stderr.strip()[-2000:]}"
        )
    return run_figures(wall, proc.stdout)


def side_by_side(name: str, arms: Sequence[Arm], first_rep: int, timeout_s: float) -> list[dict]:
    """``name``'s run on each of ``arms`` at once (one a GPU; alternations ``first_rep`` on), their figures in
    order; where any failed, the first failure, once every run has ended."""
    with ThreadPoolExecutor(len(arms)) as pool:
        futures = [pool.submit(timed_run, name, arm, first_rep + i, timeout_s) for i, arm in enumerate(arms)]
    return [future.result() for future in futures]

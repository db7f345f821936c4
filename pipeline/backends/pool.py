"""One problem's candidates for the cuBLASLt backend: torch's default, the cuBLASLt configs (the heuristic's list
first, a finalist tier of its own) and this project's Triton kernels beside them, compiled on threads before the
screen (docs/cublaslt.md, docs/triton.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from ..kernels import triton_gemm
from ..kernels.cublaslt_algo import read_config
from ..kernels.lt_gemm import LtGemm
from ..kernels.torch_gemm import OperandSet, torch_launcher
from ..kernels.triton_runner import launcher
from ..problem import GemmProblem
from .base import DEFAULT


@dataclass
class Pool:
    """The candidate pool of one problem: torch's default first, then unique cuBLASLt configs."""

    names: list[str]
    configs: dict[str, dict | None]
    launchers: dict[str, Callable[[OperandSet], None]]
    build_s: float
    heuristic_end: int = 1  # names[:heuristic_end]: the default and the heuristic's list, a finalist tier
    triton_start: int | None = None  # names[triton_start:]: the Triton kernels' configs, finalists of their own
    not_served: str | None = None  # why the Triton kernels do not serve the problem, where they were asked

    def own_kernel(self, name: str) -> bool:
        """Whether ``name`` is a kernel of this project's (checked element by element, compiled first)."""
        return triton_gemm.is_config(self.configs.get(name))


def own_launcher(problem: GemmProblem, config: dict) -> Callable[[OperandSet], None] | None:
    """The launcher of a saved config of this project's kernels (None: a cuBLASLt config or the default)."""
    if not triton_gemm.is_config(config):
        return None
    return launcher(problem, triton_gemm.TritonConfig.from_json(config))


COMPILE_THREADS = 16  # at most: 16 threads compile 17-20% faster than 8, processes no faster (docs/triton.md)


def compile_threads() -> int:
    """How many configs Bench compiles at a time: one a CPU this process may run on, at most ``COMPILE_THREADS``."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(COMPILE_THREADS, usable))


def compile_all(
    launchers: dict[str, Callable[[OperandSet], None]], ops: OperandSet, threads: int | None = None
) -> dict:
    """Run each launcher once on ``ops``, ``threads`` at a time (default ``compile_threads()``: Triton
    compiles on a config's first launch, mostly outside the GIL, into its cache); returns the exception of each
    one that failed, by name."""

    def first(name: str) -> Exception | None:
        try:
            launchers[name](ops)
            return None
        except Exception as err:  # a config that does not compile or fit scores as failed (docs/triton.md)
            return err

    with ThreadPoolExecutor(max_workers=threads or compile_threads()) as pool:
        outcomes = dict(zip(launchers, pool.map(first, list(launchers)), strict=True))
    torch.cuda.synchronize()
    return {name: err for name, err in outcomes.items() if err is not None}


def _raiser(err: Exception) -> Callable[[OperandSet], None]:
    def launch(ops: OperandSet) -> None:
        raise err

    return launch


def pool_of(
    problem: GemmProblem, gemm: LtGemm, heuristic: list[np.ndarray], more: list[np.ndarray], start: float
) -> Pool:
    """torch's default first, then each config of the heuristic's list (a finalist tier of its own) and of
    ``more``, once by name; ``start``: when building it began (``Pool.build_s``)."""
    names, configs, launchers = [DEFAULT], {DEFAULT: None}, {DEFAULT: torch_launcher(problem)}

    def add(records: list[np.ndarray]) -> int:
        for record in records:
            config = read_config(record)
            name = config["SolutionNameMin"]
            if name not in configs:
                names.append(name)
                configs[name], launchers[name] = config, gemm.launcher(record)
        return len(names)

    heuristic_end = add(heuristic)
    add(more)
    return Pool(names, configs, launchers, time.monotonic() - start, heuristic_end)


def add_triton(pool: Pool, problem: GemmProblem, sms: int) -> None:
    """Append the Triton kernels' configs for ``problem`` on a GPU of ``sms`` SMs (or say why they do not serve
    it)."""
    pool.not_served = triton_gemm.serves(problem)
    if pool.not_served:
        return
    pool.triton_start = len(pool.names)
    for config in triton_gemm.configs(problem, sms):
        pool.names.append(config.name)
        pool.configs[config.name] = config.to_json()
        pool.launchers[config.name] = launcher(problem, config)


def compile_triton(pool: Pool, ops: OperandSet) -> float:
    """Compile the pool's Triton configs in parallel before screening; one that fails keeps its error (its
    launcher raises it, so the screen scores it as failed). Returns the seconds it took."""
    if pool.triton_start is None:
        return 0.0
    start = time.monotonic()
    names = pool.names[pool.triton_start :]
    for name, err in compile_all({n: pool.launchers[n] for n in names}, ops).items():
        pool.launchers[name] = _raiser(err)
    return time.monotonic() - start

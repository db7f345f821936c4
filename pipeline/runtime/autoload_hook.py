"""Install the runtime right after ``import torch`` in a process started under ``python -m pipeline.runtime``,
or, in a workload under shape collection, the CUDA-graph replay counter and the ``_scaled_mm`` recorder (see
``autoload/sitecustomize.py``): a one-shot finder wraps torch's loader."""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path


def _install_now() -> None:
    if os.environ.get("GEMM_TUNE_RECORD_SCALED"):
        _record_now(os.environ["GEMM_TUNE_RECORD_SCALED"])
    if os.environ.get("GEMM_TUNE_RUNTIME_BUNDLE"):
        _apply_now()


def _record_now(directory: str) -> None:
    import torch

    from .graphs import GraphCounter
    from .record import ScaledRecorder, tunableop_records_scaled

    graphs = GraphCounter()
    graphs.install()
    atexit.register(graphs.report)
    if tunableop_records_scaled(torch.__version__, torch.version.hip):
        return
    recorder = ScaledRecorder(directory, graphs=graphs)
    try:
        recorder.install()
    except RuntimeError as err:  # a torch without CUDA kernels (a CPU build in a helper process): nothing to record
        print(f"gemm-tune: _scaled_mm calls not recorded in process {os.getpid()}: {err}", file=sys.stderr)
        return
    atexit.register(recorder.write)


def _apply_now() -> None:
    from . import install
    from .__main__ import ANY_DEVICE_ENV, BUNDLE_ENV, GRAPHS_ONLY_ENV, STATUS_ENV, report

    try:
        runtime = install(
            os.environ[BUNDLE_ENV],
            any_device=bool(os.environ.get(ANY_DEVICE_ENV)),
            graphs_only=bool(os.environ.get(GRAPHS_ONLY_ENV)),
        )
    except (RuntimeError, ImportError) as err:  # e.g. a CPU-only helper process of the command
        print(f"gemm-tune runtime: not installed in process {os.getpid()}: {err}", file=sys.stderr)
        return
    status = os.environ.get(STATUS_ENV)
    atexit.register(report, runtime, Path(status) if status else None, skip_idle=True)


class _AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module) -> None:
            exec_module(module)
            _install_now()

        spec.loader.exec_module = exec_then_install
        return spec


def arm() -> None:
    if "torch" in sys.modules:
        _install_now()
    else:
        sys.meta_path.insert(0, _AfterTorch())

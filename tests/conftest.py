from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The doubles (``#!/usr/bin/env python3``) run under the interpreter that runs the tests, its directory
    first on PATH as an activated virtualenv has it: the same packages, and no version manager's shim in front
    of each of a DAG's hundreds of launches."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])


def _gpu_reason() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (GPU tests run on the device machine with the 'cuda' extra)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA/ROCm GPU visible to torch (GPU tests run on the device machine)"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("gpu"))  # one process runs them all, one after another
    if not any("gpu" in item.keywords for item in items):
        return
    reason = _gpu_reason()
    if reason:
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))

"""What several test modules share: paths of the repository, fixtures and doubles, and the one way the
tests run the AMD DAG against the hipblaslt-bench double. Test modules import from here, never from each
other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
TUNABLEOP_FIXTURES = sorted((FIXTURES / "tunableop").glob("*.csv"))
DOUBLES = Path(__file__).parent / "doubles"
DOUBLE = str(DOUBLES / "hipblaslt-bench")  # the hipblaslt-bench double
UNTUNED = FIXTURES / "tunableop" / "torch2.11_hf_llama_untuned0.csv"  # an HF Llama's GEMMs, recorded by torch 2.11
TARGET = FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv"  # what torch on the target ROCm machine wrote
FAKE_WORKLOAD = str(Path(__file__).parent / "fake_workload.py")  # a workload double that records like torch
QKV = "GemmTunableOp_BFloat16_TN,tn_6144_128_4096_ld_4096_4096_6144"
O_PROJ = "GemmTunableOp_BFloat16_TN,tn_4096_128_4096_ld_4096_4096_4096"


def amd_dag(
    tmp_path: Path, run: str, build: str = "", task: str = "TuneWorkload", *extra: str, untuned: Path | str = UNTUNED
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of ``luigi ... <task>`` on ``untuned`` with the hipblaslt backend and the
    double (``build``: its library build), from ``tmp_path``; the double logs every invocation to
    ``tmp_path/bench.log``."""
    command = [
        sys.executable,
        "-m",
        "luigi",
        "--module",
        "pipeline",
        task,
        "--local-scheduler",
        "--workdir",
        str(tmp_path / "w"),
        "--run-name",
        run,
        "--untuned",
        str(untuned),
        "--backend",
        "hipblaslt",
        "--hipblaslt-bench",
        DOUBLE,
        "--validators-from",
        str(TARGET),
        "--validate-rounds",
        "3",
        *extra,
    ]
    env = {
        **os.environ,
        "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"),
        "HIPBLASLT_DOUBLE_GENERATION": "2025",
        "HIPBLASLT_DOUBLE_NOISE": "0",
        "HIPBLASLT_DOUBLE_LOG": str(tmp_path / "bench.log"),
        "HIPBLASLT_DOUBLE_BUILD": build,
    }
    return command, env


def run_amd_dag(
    tmp_path: Path,
    run: str,
    build: str = "",
    task: str = "TuneWorkload",
    *extra: str,
    untuned: Path | str = UNTUNED,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run ``amd_dag``'s command from ``tmp_path``; asserts success unless ``check`` is off."""
    command, env = amd_dag(tmp_path, run, build, task, *extra, untuned=untuned)
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def source_module(directory: Path, name: str, text: str):
    """``text`` written to ``directory/<name>.py`` and imported as a fresh module (not left in ``sys.modules``):
    GPU tests run the same calls in this process and in a workload process from one source."""
    import importlib

    (directory / f"{name}.py").write_text(text)
    sys.path.insert(0, str(directory))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))
    sys.modules.pop(name, None)
    return module


def nvmath_gpu_marks(what: str) -> list:
    """``pytestmark`` of a GPU test module that needs nvmath-python (the 'cuda' extra) for ``what``."""
    import importlib.util

    import pytest

    return [
        pytest.mark.gpu,
        pytest.mark.skipif(
            importlib.util.find_spec("nvmath") is None,
            reason=f"nvmath-python is not installed: {what} comes with the "
            "'cuda' extra (pip install -e '.[cuda,test]')",
        ),
    ]

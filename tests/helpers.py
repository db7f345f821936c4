"""What several test modules share: paths of the repository, fixtures and doubles, and the one way the
tests run the AMD DAG against the hipblaslt-bench double. Test modules import from here, never from each
other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def luigi_argv(task: str, *extra: str, local: bool = True, **params: object) -> list[str]:
    """The one way the tests spell ``python -m luigi --module pipeline TASK [--local-scheduler]``: each of
    ``params`` as ``--name value`` (the task parameter's name, dashed; None left out), then ``extra``."""
    return [
        sys.executable,
        "-m",
        "luigi",
        "--module",
        "pipeline",
        task,
        *(["--local-scheduler"] if local else []),
        *(
            item
            for name, value in params.items()
            if value is not None
            for item in (f"--{name.replace('_', '-')}", str(value))
        ),
        *extra,
    ]


def amd_dag(
    tmp_path: Path,
    run: str,
    build: str = "",
    task: str = "TuneWorkload",
    *extra: str,
    untuned: Path | str = UNTUNED,
    workdir: Path | None = None,
    target: Path | None = TARGET,
    bench: str | None = DOUBLE,
    generation: str = "2025",
    rounds: int | None = 3,
    local: bool = True,
) -> tuple[list[str], dict[str, str]]:
    """The one way the tests spell ``luigi ... <task>`` on ``untuned`` with the hipblaslt backend and the
    double (``build``: its library build; ``generation``: its tree), its workdir ``workdir`` (default
    ``tmp_path/w``), from ``tmp_path``: the command and its environment. ``target`` (``--validators-from``),
    ``bench`` (``--hipblaslt-bench``) and ``rounds`` (``--validate-rounds``) are left out where None; the double
    logs every invocation to ``tmp_path/bench.log``. The grid is ``exact`` unless ``extra`` names one: the HF
    Llama's recorded GEMMs run each weight at several counts, and a test whose subject is not the grid tunes
    what they ran (``--m-grid auto`` would tune its serving grid)."""
    grid = () if any(arg.endswith("-m-grid") for arg in extra) else ("--m-grid", "exact")
    command = luigi_argv(
        task,
        *extra,
        *grid,
        local=local,
        workdir=workdir or tmp_path / "w",
        run_name=run,
        untuned=untuned,
        backend="hipblaslt",
        validators_from=target,
        hipblaslt_bench=bench,
        validate_rounds=rounds,
    )
    env = {
        **os.environ,
        "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"),
        "HIPBLASLT_DOUBLE_GENERATION": generation,
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
    check: bool = True,
    **options,
) -> subprocess.CompletedProcess:
    """Run ``amd_dag``'s command from ``tmp_path`` (``options``: its keywords); asserts success unless ``check``
    is off."""
    command, env = amd_dag(tmp_path, run, build, task, *extra, **options)
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def first_gemms(directory: Path, source: Path, count: int) -> Path:
    """The first ``count`` GEMM lines of a real untuned file ``source``, as ``directory/<source's name>``: a DAG
    test whose subject is not the number of GEMMs tunes a few (each costs bench and validation launches)."""
    lines = source.read_text().splitlines(keepends=True)
    assert len(lines) > count, f"{source} has {len(lines)} lines"
    path = directory / source.name
    path.write_text("".join(lines[:count]))
    return path


def optional_torch():
    """torch where it is installed, else None: a module whose tests mostly need no torch marks the others
    with ``needs_torch`` instead of skipping itself whole."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def needs_torch(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(optional_torch() is None, reason=reason)


def fake_cublaslt(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--backend cublaslt`` served by ``tests/fake_backend.py`` (workers find its factory by name); it has no
    Triton candidates, so it takes no Triton cache (and needs no triton installed)."""
    import dataclasses

    from pipeline.stages.bench import registry

    from .fake_backend import FakeBackend

    entry = dataclasses.replace(registry.REGISTRY["cublaslt"], factory=FakeBackend, needs=(), options=lambda p: {})
    monkeypatch.setitem(registry.REGISTRY, "cublaslt", entry)


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


def bench_module(name: str):
    """The benchmark script ``bench/<name>.py`` imported as a module (its CPU parts: replays, analyses), with
    ``bench/`` first on ``sys.path`` while it loads, as running the script puts it (its helpers beside it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


def nvmath_gpu_marks(what: str) -> list:
    """``pytestmark`` of a GPU test module that needs nvmath-python (the 'cuda' extra) for ``what``."""
    import importlib.util

    return [
        pytest.mark.gpu,
        pytest.mark.skipif(
            importlib.util.find_spec("nvmath") is None,
            reason=f"nvmath-python is not installed: {what} comes with the 'cuda' extra "
            "(pip install -e '.[cuda,test]')",
        ),
    ]


def recorded_scaled_calls(tmp_path: Path, layer, x) -> list:
    """The ``_scaled_mm`` problems ``layer(x)`` calls, as the collection's recorder writes them."""
    from pipeline.formats.tunableop import read_file
    from pipeline.runtime.record import ScaledRecorder

    recorder = ScaledRecorder(tmp_path / "rec")
    (tmp_path / "rec").mkdir()
    recorder.install()
    try:
        layer(x)
    finally:
        recorder.uninstall()
    files = recorder.write()
    return [e.problem for e in read_file(files[0]).entries]


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie is dead, only not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def all_dead(*pids: int, seconds: float = 5.0) -> bool:
    """Wait up to ``seconds`` for every one of ``pids`` to end: whether they all have."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.02)
    return not any(alive(pid) for pid in pids)

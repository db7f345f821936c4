"""The stack fingerprint: what a tuned result holds for. Runs are keyed by it.

A result tuned under one stack (torch, CUDA/HIP, cuBLAS(Lt)/hipBLASLt/rocBLAS, GPU arch and SM/CU count,
driver, tuning settings; with ``--triton`` also Triton's version and the kernels' source digest) says nothing
about another, so every stage from Bench on records the fingerprint it ran under (``<stage>/stack.json``) and
is complete only under the same one; results are cached per fingerprint, their winners re-timed in each run.

Probing the stack means importing a GPU build of torch and touching the GPU (seconds, in a process of its
own, so that the run's never initialises a GPU; a CPU-only build, which can see no GPU, is read from its
``version.py`` instead, in the run's process), so the facts are cached under a
cheap signature (package versions, library files' sizes and times, driver version, the environment that
steers the libraries), which is read without importing torch: a rerun with nothing changed costs a few
file stats.

    python -m pipeline.stages stack-probe [--bench PATH]   # the facts as JSON, on stdout
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ... import procs
from ...atomic import atomic_write_json, atomic_write_text
from ...errors import PipelineError, ToolError, exit_code, one_line
from ...formats.torch_build import torch_build, torch_package_dir
from ...kernels.triton_cache import source_hash
from .made_from import record_path

STAMP = "stack.json"
ENV_PREFIXES = ("CUDA_", "HIP_", "ROCR_", "ROCM_", "HIPBLASLT_", "ROCBLAS_", "TENSILE_", "CUBLAS", "NVIDIA_")
LIBRARIES = ("libcublasLt.so", "libcublas.so", "libhipblaslt.so", "librocblas.so", "libamdhip64.so", "libcudart.so")
DISTRIBUTIONS = (
    "torch",
    "nvmath-python",
    "nvidia-cublas",
    "nvidia-cublas-cu12",
    "nvidia-cublas-cu13",
    "pytorch-triton-rocm",
    "triton",
)
FACT_KEYS = (
    "platform",
    "torch",
    "cuda",
    "hip",
    "driver",
    "gpu",
    "arch",
    "sm_count",
    "gpu_count",
    "cublaslt",
    "rocblas",
    "hipblaslt",
    "hipblaslt_git",
)
TRITON_FACT_KEYS = ("triton", "triton_kernels")  # in the fingerprint where Bench draws Triton candidates


class ProbeFailed(ToolError):
    """The stack probe did not answer; the message carries its output."""


def _library_dirs() -> list[Path]:
    torch_dir = torch_package_dir()
    dirs = [torch_dir / "lib"] if torch_dir else []
    for entry in sys.path:
        dirs.extend(Path(entry).glob("nvidia/*/lib"))
    rocm = os.environ.get("ROCM_PATH") or "/opt/rocm"
    dirs += [Path(rocm) / "lib", Path("/usr/local/cuda/lib64")]
    return [d for d in dirs if d.is_dir()]


def _stat(path: str | Path) -> list:
    try:
        st = Path(path).stat()
    except OSError:
        return [str(path), None]
    return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]


def driver_version() -> str | None:
    """The kernel driver's version, from the files the NVIDIA and AMD drivers publish."""
    nvidia = Path("/proc/driver/nvidia/version")
    if nvidia.exists():
        match = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", nvidia.read_text())
        return f"nvidia {match.group(1)}" if match else None
    amd = Path("/sys/module/amdgpu/version")
    if amd.exists():
        return f"amdgpu {amd.read_text().strip()}"
    return None


def signature(tool: str | None = None) -> str:
    """A cheap digest of everything whose change could change the stack: no torch import, no GPU."""
    versions = {}
    for name in DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    libraries = sorted(_stat(p) for d in _library_dirs() for lib in LIBRARIES for p in d.glob(f"{lib}*"))
    data = {
        "python": sys.executable,
        "versions": versions,
        "libraries": libraries,
        "driver": driver_version(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "tool": _stat(tool) if tool else None,
        "triton_kernels": source_hash(),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]


def probe(bench: str | None = None, timeout_s: float = 300.0) -> dict:
    """The stack facts: from a fresh process where probing imports torch (``imports_torch``: this one never
    initialises a GPU), else here, as that process would (a CPU build of torch or none, and the bench asked
    through a supervised run of its own), without an interpreter's start-up."""
    if not imports_torch(torch_build(), bench):
        try:
            return probe_here(bench, timeout_s)
        except PipelineError as err:
            raise ProbeFailed(f"the stack probe failed: {one_line(err)}") from err
    argv = procs.worker_argv("stack-probe", *(["--bench", bench] if bench else []))
    try:
        proc = procs.run(argv, timeout_s=timeout_s, env=procs.with_package_on_path(os.environ))
    except subprocess.TimeoutExpired as err:
        raise ProbeFailed(f"the stack probe gave no answer in {timeout_s:.0f} s") from err
    if proc.returncode != 0:  # its last line is the cause: the probe's own one-line error, or the exception's
        said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        raise ProbeFailed(f"the stack probe failed (exit {proc.returncode}): {said[-1] if said else 'no output'}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stack_facts(cache_dir: Path, bench: str | None = None) -> dict:
    """The facts of this machine's stack, probed once per signature and cached under ``cache_dir``."""
    path = Path(cache_dir) / f"{signature(bench)}.json"
    if path.exists():
        return json.loads(path.read_text())
    facts = probe(bench)
    atomic_write_json(path, facts)
    return facts


def fingerprint(facts: dict, settings: dict) -> str:
    """``<platform>-<arch>-<12 hex>`` over the stack facts and the tuning settings; with Triton candidates
    (``settings["triton"]``) Triton's version and the kernels' source too, so an upgrade of either re-times."""
    keys = FACT_KEYS + (TRITON_FACT_KEYS if settings.get("triton") else ())
    data = {"stack": {k: facts.get(k) for k in keys}, "settings": settings}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
    arch = re.sub(r"[^A-Za-z0-9]+", "", (facts.get("arch") or "none").split(":")[0]) or "none"
    return f"{facts.get('platform') or 'none'}-{arch}-{digest}"


@dataclass
class Stack:
    """A stack's fingerprint, the facts behind it and the tuning settings it includes."""

    fingerprint: str
    facts: dict
    settings: dict


def current_stack(workdir: Path, settings: dict, bench: str | None = None) -> Stack:
    """This machine's stack under ``settings`` (facts cached in ``<workdir>/cache/stack``)."""
    facts = stack_facts(Path(workdir).absolute() / "cache" / "stack", bench)
    return Stack(fingerprint(facts, settings), facts, settings)


def stamped(stage_dir: Path) -> str | None:
    """The fingerprint a stage directory was written under (None: none recorded)."""
    path = Path(stage_dir) / STAMP
    try:
        return json.loads(path.read_text())["fingerprint"]
    except (OSError, ValueError, KeyError):
        return None


def claim(stage_dir: Path, fp: str, facts: dict | None = None, create: bool = True) -> Path:
    """Make ``stage_dir`` this fingerprint's: a directory of another one is moved aside whole
    (``<stage>.<old fingerprint>``, kept for the drift report) before the stamp is written, so no output
    of another stack can ever look complete. ``create=False``: only move it aside (a directory that its
    writer builds whole, stamp included, such as the bundle)."""
    stage_dir = Path(stage_dir)
    old = stamped(stage_dir) if stage_dir.exists() else fp
    if stage_dir.exists() and old != fp:
        aside = set_aside_name(stage_dir, old)
        shutil.rmtree(aside, ignore_errors=True)
        stage_dir.rename(aside)
    if create and stamped(stage_dir) != fp:
        atomic_write_json(stage_dir / STAMP, {"fingerprint": fp, "stack": facts or {}})
    return stage_dir


STACKS = "stacks"  # <run>/stacks/<fingerprint>/made_from/: the records of the stages last made under that stack


def set_aside_name(stage_dir: Path, fp: str | None) -> Path:
    """Where ``claim`` moves a stage directory made under fingerprint ``fp``: ``<stage>.<fp>``."""
    return Path(stage_dir).with_name(f"{Path(stage_dir).name}.{fp or 'unstamped'}")


def put_back(run_dir: Path, fp: str, facts: dict | None = None) -> list[str]:
    """Make the stage directories set aside under fingerprint ``fp`` (``<stage>.<fp>``) the run's again, each
    moving the one it replaces aside under that one's own fingerprint (``claim``), and their stages' records
    (``<run>/stacks/<fp>/made_from/``) the run's: going back to a stack finds what was made under it. Returns the
    stages put back."""
    run_dir = Path(run_dir)
    suffix = f".{fp}"
    back = []
    for aside in sorted(run_dir.iterdir()):
        stage = aside.name.removesuffix(suffix)
        if not aside.is_dir() or stage == aside.name or "." in stage or stamped(aside) != fp:
            continue
        claim(run_dir / stage, fp, facts, create=False)  # the current one aside, unless it is this stack's
        if (run_dir / stage).exists():
            continue  # made under this stack already: it stands
        aside.rename(run_dir / stage)
        back.append(stage)
    for record in sorted(record_path(run_dir / STACKS / fp, "*").parent.glob("*.json")) if back else ():
        atomic_write_text(record_path(run_dir, record.stem), record.read_text())
    return back


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cublaslt_version() -> int | None:
    """cublasLtGetVersion() of the library torch loaded (found in this process's memory map)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libcublasLt.so" in line:
            return int(ctypes.CDLL(line.split()[-1]).cublasLtGetVersion())
    return None


def imports_torch(build: dict | None, bench: str | None = None) -> bool:
    """Whether probing imports torch ``build`` (``torch_build``'s facts, None without torch): a build that can see
    a GPU (a CPU build is read from its ``version.py``), and with an AMD tool a ROCm one only (an AMD tool's stack
    is ROCm's: a CUDA torch beside it is not asked)."""
    gpu_build = build is not None and bool(build["cuda"] or build["hip"])
    return gpu_build and (bench is None or bool(build["hip"]))


def probe_here(bench: str | None = None, timeout_s: float = 600.0) -> dict:
    """Probe in this process: torch and its GPU, its BLAS libraries, and hipblaslt-bench when given (each of
    its runs within ``timeout_s``)."""
    facts: dict = {"platform": "cpu", "torch": None, "driver": driver_version(), "gpu_count": 0}
    build = torch_build()
    torch = None
    if imports_torch(build, bench):
        import torch
    elif build is not None:
        facts.update(build)
    if torch is not None:
        facts.update(torch=torch.__version__, cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None))
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            facts.update(
                platform="rocm" if facts["hip"] else "cuda",
                gpu=props.name,
                gpu_count=torch.cuda.device_count(),
                sm_count=props.multi_processor_count,
                arch=props.gcnArchName if facts["hip"] else f"sm{props.major}{props.minor}",
            )
            x = torch.ones(64, 64, device="cuda", dtype=torch.float16)
            torch.nn.functional.linear(x, x, torch.ones(64, device="cuda", dtype=torch.float16))  # loads cuBLASLt
            torch.cuda.synchronize()
            if facts["hip"]:
                validators = dict(torch.cuda.tunable.get_validators())
                facts.update(rocblas=validators.get("ROCBLAS_VERSION"), hipblaslt=validators.get("HIPBLASLT_VERSION"))
            else:
                facts["cublaslt"] = _cublaslt_version()
                facts.update(triton=_version("triton"), triton_kernels=source_hash())
    if bench:
        from ...backends.hipblaslt import HipblasltBackend

        backend = HipblasltBackend(0, bench, timeout_s=timeout_s)
        try:
            runtime = backend.runtime()
        finally:
            backend.close()
        facts.update(hipblaslt=runtime["hipblaslt_version"], hipblaslt_git=runtime["hipblaslt_git"])
        if facts["platform"] == "cpu":  # the bench's own device (a machine without a ROCm torch)
            facts.update(platform="rocm", gpu=runtime["name"], arch=runtime["arch"])
    return facts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print this machine's stack facts as JSON")
    parser.add_argument("--bench", default=None, help="hipblaslt-bench to ask for its version")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(probe_here(args.bench), sort_keys=True))
    except PipelineError as err:  # one line that names the cause, which the run repeats
        print(f"stack probe: {one_line(err)}", file=sys.stderr)
        return exit_code(err)
    return 0

"""GPU slots: one process per GPU, machine-wide, through exclusive file locks.

Bench workers, the validation worker and collection's baseline timing each hold a slot while they use a
GPU, so concurrent runs on one machine never share a device. Locks live in ``lock_dir()``
(``GEMM_TUNE_LOCK_DIR`` overrides the default under the temporary directory) and are released by the
kernel when a holder dies. A lock names the board, not the index a process sees: two runs given other
``CUDA_VISIBLE_DEVICES`` share a board's lock and never each other's (``board``, docs/design.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from .. import procs
from ..errors import BadInput, Busy, ToolError


class NoFreeGpu(Busy):
    """Every GPU asked for stayed locked by other processes for the whole wait."""


def lock_dir() -> Path:
    """Machine-wide GPU slot locks, shared by every run (``GEMM_TUNE_LOCK_DIR`` overrides)."""
    return Path(os.environ.get("GEMM_TUNE_LOCK_DIR") or Path(tempfile.gettempdir()) / "gemm-tune-gpu-locks")


VISIBLE_DEVICES = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")  # what limits the GPUs seen


def _listed(environ: Mapping[str, str], *names: str) -> list[str] | None:
    """The entries of the first of ``names`` set in ``environ`` (None: none is)."""
    for name in names:
        value = environ.get(name)
        if value is not None:
            return [entry.strip() for entry in value.split(",")]
    return None


def _runtime_listed(environ: Mapping[str, str]) -> list[str] | None:
    """The list the GPU runtime picks its devices from: ``HIP_VISIBLE_DEVICES`` (HIP, which also reads
    ``CUDA_VISIBLE_DEVICES``) or ``CUDA_VISIBLE_DEVICES``, over the boards ``ROCR_VISIBLE_DEVICES`` leaves."""
    return _listed(environ, "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def board(gpu: int, environ: Mapping[str, str] = os.environ) -> str:
    """The machine-wide name of the GPU a process sees as ``gpu``: its entry through the visibility lists its
    runtime applies (an index or a UUID as written there; ``gpu`` itself where none is set), as torch reads
    them (``torch/cuda/__init__.py``, ``_parse_visible_devices``: ROCm's ``ROCR_VISIBLE_DEVICES`` first, then
    HIP's list over the boards it leaves). Runs must name a board the same way (both by index, or both by UUID)
    to share its lock."""
    entry = str(gpu)
    listed = _runtime_listed(environ)
    if listed is not None:
        entry = listed[gpu] if gpu < len(listed) and listed[gpu] else f"unlisted{gpu}"
    rocr = _listed(environ, "ROCR_VISIBLE_DEVICES")
    if rocr is not None and entry.isdigit():
        entry = rocr[int(entry)] if int(entry) < len(rocr) else f"unlisted{entry}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", entry)  # a MIG id's slashes


@contextlib.contextmanager
def gpu_slot(lock_dir: Path, gpus: Sequence[int], wait_s: float = 3600.0, first: int = 0) -> Iterator[int]:
    """Hold an exclusive lock on one free GPU of ``gpus`` (as this process sees them) for the block, by its
    board's name, trying them from ``gpus[first]`` on (a shard's own: N shards started on N GPUs each take
    their own board, whichever starts or ends first); wait while all are taken."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    start = first % len(gpus) if gpus else 0
    while True:
        for gpu in [*gpus[start:], *gpus[:start]]:
            handle = open(lock_dir / f"gpu{board(gpu)}.lock", "w")  # noqa: SIM115 (held for the block)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield gpu
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if time.monotonic() > deadline:
            raise NoFreeGpu(f"no free GPU among {list(gpus)} after {wait_s:.0f} s (locks in {lock_dir})")
        time.sleep(0.5)


def one_gpu_env(gpu: int, env: Mapping[str, str], variable: str | None = None) -> dict[str, str]:
    """``env`` narrowed to show a program only GPU ``gpu`` (an index among those ``env`` shows) as its device 0:
    the runtime's list cut to that entry, in ``variable`` (default HIP's where it is set, else CUDA's, which HIP
    reads too); ``ROCR_VISIBLE_DEVICES`` left as it is (HIP indexes the boards it leaves)."""
    out = dict(env)
    listed = _runtime_listed(out)
    name = variable or ("HIP_VISIBLE_DEVICES" if out.get("HIP_VISIBLE_DEVICES") is not None else "CUDA_VISIBLE_DEVICES")
    if listed is not None and gpu >= len(listed):
        raise BadInput(f"GPU {gpu} asked for, where the visible devices are {','.join(listed)}: fewer --gpus")
    out[name] = listed[gpu] if listed is not None else str(gpu)
    return out


def amd_device_env(gpu: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """``one_gpu_env`` in HIP's list, for a tool that cannot be told which device to use (2024 find_exact.py)."""
    return one_gpu_env(gpu, os.environ if env is None else env, "HIP_VISIBLE_DEVICES")


def amd_gpu_count() -> int:
    """GPUs the AMD tools can use, without torch: the visible-devices variable where one is set, else the
    GPU nodes of the kfd topology; at least 1 (the tool itself says so when there is none)."""
    visible = _runtime_listed(os.environ) or _listed(os.environ, "ROCR_VISIBLE_DEVICES")
    if visible is not None:
        return max(len([entry for entry in visible if entry]), 1)
    nodes = Path("/sys/class/kfd/kfd/topology/nodes")
    count = 0
    for gpu_id in nodes.glob("*/gpu_id") if nodes.is_dir() else ():
        with contextlib.suppress(OSError, ValueError):
            count += int(gpu_id.read_text().strip() or 0) != 0
    return max(count, 1)


def gpu_count(who: str) -> int:
    """GPUs torch sees, asked in a subprocess so this process never initialises CUDA; ``who`` needs them."""
    probe = "import torch; print(torch.cuda.device_count())"
    proc = procs.run([sys.executable, "-c", probe])
    count = int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0
    if count == 0:
        raise ToolError(
            f"{who} needs a GPU and torch with CUDA or ROCm (pip install -e '.[cuda]'); none is "
            f"visible ({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no device'}"
            "). The AMD tool configs are written by GenerateConfigs without one."
        )
    return count

"""Record the GEMMs a workload runs, with TunableOp in record-untuned mode, and how often each runs.

The workload runs in a subprocess, in the caller's cwd, under ``PYTORCH_TUNABLEOP_ENABLED=1
PYTORCH_TUNABLEOP_TUNING=0 PYTORCH_TUNABLEOP_RECORD_UNTUNED=1`` with
``PYTORCH_TUNABLEOP_UNTUNED_FILENAME=<dir>/untuned.csv`` (absolute: torch resolves a relative name against
the workload's cwd and, finding no directory there, records nothing and says nothing); torch splices the
device ordinal in, so each GPU writes ``untuned<N>.csv``. Record mode appends, so the files go to a fresh
staging directory that replaces the output directory only when the run succeeds. ``PYTORCH_TUNABLEOP_VERBOSE=3``
makes torch log every GEMM call, counted into ``calls.json`` (``call_weights``).

Where TunableOp does not record ``torch._scaled_mm`` (CUDA torch < 2.15), the workload's processes record those
calls themselves: ``GEMM_TUNE_RECORD_SCALED`` and the runtime's ``autoload/`` on ``PYTHONPATH`` install
``pipeline.runtime.record`` on ``import torch``, which leaves ``untuned_scaled_<pid>.csv`` (read with torch's
files) and its call counts (merged into ``calls.json``) in the same directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ... import procs
from ...atomic import atomic_directory, atomic_write_json
from ...errors import ToolError
from ...procs import tail_lines
from ...runtime.__main__ import with_autoload
from ...runtime.record import RECORD_ENV, read_counts
from .call_weights import CALLS, VERBOSE_ENV, calls_record, run_worker, split_stderr

EMBEDDED_WORKLOAD = "pipeline.workloads.llama"
MANIFEST = "manifest.json"
UNTUNED_NAME = "untuned.csv"
TAIL_LINES = 20

_NO_TORCH = (
    "Shape collection runs the workload on a GPU and needs torch with CUDA or ROCm: install the 'cuda' "
    "extra on NVIDIA (pip install -e '.[cuda]') or the 'rocm' extra with a ROCm torch build on AMD. "
    "Without a GPU, pass GEMMs recorded elsewhere instead: --untuned 'path/to/untuned*.csv'."
)


class CollectionError(ToolError):
    """Collection could not run, or the workload failed."""


@dataclass
class Collection:
    """What one collection run left: the recorded files and the workload's own figures."""

    files: list[Path]
    command: list[str]
    returncode: int
    seconds: float
    tokens_per_s: float | None
    calls: dict[str, int]  # GEMM calls per TunableOp key, from torch's lookup log (empty: none logged)


def embedded_command(python: str = sys.executable) -> list[str]:
    return [python, "-m", EMBEDDED_WORKLOAD]


def recording_env(directory: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment that makes torch record every GEMM it dispatches into ``directory``."""
    env = dict(os.environ if base is None else base)
    directory = Path(directory).absolute()  # torch resolves it against the workload's own cwd
    env.update(
        PYTORCH_TUNABLEOP_ENABLED="1",
        PYTORCH_TUNABLEOP_TUNING="0",
        PYTORCH_TUNABLEOP_RECORD_UNTUNED="1",
        PYTORCH_TUNABLEOP_UNTUNED_FILENAME=str(directory / UNTUNED_NAME),
        **VERBOSE_ENV,  # one lookup line per GEMM call on stderr: the call counts (see call_weights)
    )
    env[RECORD_ENV] = str(directory)  # _scaled_mm calls, where TunableOp does not record them (runtime.record)
    return with_autoload(env)  # the recorder's hook; the package importable from the workload's cwd


def check_gpu_torch(python: str = sys.executable) -> None:
    """Fail with an actionable message unless ``python`` has torch and sees a GPU."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        proc = procs.run([python, "-c", probe], timeout_s=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CollectionError(f"cannot run {python}: {err}") from None
    if proc.returncode == 3:
        raise CollectionError("No GPU: torch is installed but torch.cuda.is_available() is False. " + _NO_TORCH)
    if proc.returncode != 0:
        raise CollectionError(f"{python} cannot import torch ({tail_lines(proc.stderr, 1)}). {_NO_TORCH}")


def collect(
    out_dir: Path,
    command: str | list[str] | None = None,
    *,
    timeout_s: float = 3600.0,
    env: Mapping[str, str] | None = None,
    time_on: Sequence[int] | Callable[[], Sequence[int]] | None = None,
    embedded_args: Sequence[str] = (),
) -> Collection:
    """Run ``command`` (a shell line, an argv list, or the embedded workload) and record its GEMMs.

    Output lands in ``out_dir`` (``untuned<N>.csv``, ``calls.json``, ``workload.stdout.log``,
    ``workload.stderr.log``, ``manifest.json``) only after a successful run; a failed run leaves ``out_dir``
    untouched. With ``time_on`` (GPU indices, or a function giving them, asked only when needed) every GEMM
    that was counted is also timed once at baseline (``baseline.json``), so that gathering can give each its
    share of the workload's GEMM time. ``embedded_args`` are the embedded workload's options (``--fp8``).
    """
    env = dict(os.environ if env is None else env)
    out_dir = Path(out_dir).absolute()
    if command is None:
        check_gpu_torch()
        command = [*embedded_command(), *embedded_args]  # recording_env puts the package on PYTHONPATH
    argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
    with atomic_directory(out_dir) as staging:  # record mode appends: never reuse old files
        collection = _run_and_record(staging, out_dir, argv, env, timeout_s)
        if time_on is not None and collection.calls:
            run_worker(staging, list(collection.calls), list(time_on() if callable(time_on) else time_on))
        return collection


def _run_and_record(staging: Path, out_dir: Path, argv: list[str], env: dict[str, str], timeout_s: float) -> Collection:
    stdout_log, stderr_log = staging / "workload.stdout.log", staging / "workload.stderr.log"
    calls: Counter = Counter()
    start = time.monotonic()
    with stdout_log.open("w") as out, stderr_log.open("w") as err:
        returncode = _run_counting_calls(argv, recording_env(staging, env), out, err, calls, timeout_s, staging)
    seconds = time.monotonic() - start
    if returncode != 0:
        raise CollectionError(
            f"workload {_show(argv)} exited with code {returncode}; last lines of its stderr "
            f"({stderr_log}):\n{tail_lines(stderr_log.read_text(errors='replace'), TAIL_LINES)}"
        )
    scaled_calls, scaled_skipped = read_counts(staging)
    calls.update(scaled_calls)
    files = sorted(staging.glob("untuned*.csv"))
    if not files:
        raise CollectionError(
            f"workload {_show(argv)} succeeded but recorded no GEMM in {staging}: does it run its matrix "
            "products through torch on a GPU (TunableOp sees mm/addmm/bmm/linear/_scaled_mm only)?"
        )
    record = calls_record(calls)
    collection = Collection(
        [out_dir / f.name for f in files],
        argv,
        returncode,
        seconds,
        parse_tokens_per_s(stdout_log.read_text(errors="replace")),
        record["calls"],
    )
    atomic_write_json(staging / CALLS, record)
    atomic_write_json(
        staging / MANIFEST,
        {
            "command": argv,
            "cwd": os.getcwd(),
            "returncode": returncode,
            "seconds": round(seconds, 3),
            "tokens_per_s": collection.tokens_per_s,
            "files": [f.name for f in files],
            "calls": sum(calls.values()),
            "scaled_calls_not_recorded": dict(scaled_skipped),
        },
    )
    return collection


def _run_counting_calls(
    argv: list[str], env: dict[str, str], out: IO[str], err: IO[str], calls: Counter, timeout_s: float, staging: Path
) -> int:
    """Run the workload in the caller's cwd (as the user would type it), its stdout to ``out``; its stderr is
    streamed: TunableOp lookup lines are counted into ``calls``, every other line goes to ``err``. On a
    time-out, or when this run dies, the workload's whole process group is killed (``procs``)."""
    try:
        proc = procs.start(argv, env, stdout=out, stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as error:
        raise CollectionError(f"cannot start workload {_show(argv)}: {error}") from None
    try:
        reader = threading.Thread(target=lambda: err.writelines(split_stderr(proc.stderr, calls)), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            procs.kill(proc)
            reader.join(timeout=10)
            raise CollectionError(
                f"workload {_show(argv)} ran past {timeout_s:.0f} s; its logs are in {staging}"
            ) from None
        procs.kill(proc)  # what the workload left running in its group goes with it (and lets go of stderr)
        reader.join()
        return proc.returncode
    finally:
        procs.kill(proc)


def parse_tokens_per_s(stdout: str) -> float | None:
    """The last ``<number> tokens/s`` figure a workload printed, if any."""
    found = re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*tokens/s", stdout)
    return float(found[-1]) if found else None


def parse_decode_tokens_per_s(stdout: str) -> float | None:
    """The last ``decode throughput: <number> tokens/s`` a workload printed (its decode steps alone), if any."""
    found = re.findall(r"decode throughput:\s*([0-9]+(?:\.[0-9]+)?)\s*tokens/s", stdout)
    return float(found[-1]) if found else None


def parse_pass_tokens_per_s(stdout: str) -> list[float]:
    """The tokens/s of each timed pass a workload printed on its own line (``pass <n>: ... <number> tokens/s``,
    ``pipeline.workloads.serve``), in order; empty where it prints none."""
    return [float(x) for x in re.findall(r"^pass \d+:.*?([0-9]+(?:\.[0-9]+)?)\s*tokens/s\s*$", stdout, re.M)]


def parse_p99_ms(stdout: str) -> float | None:
    """The last ``p99 <number> ms`` step latency a workload printed (``pipeline.workloads.serve``), if any."""
    found = re.findall(r"p99\s+([0-9]+(?:\.[0-9]+)?)\s*ms", stdout)
    return float(found[-1]) if found else None


def _show(argv: list[str]) -> str:
    return repr(argv[2]) if argv[:2] == ["bash", "-c"] else " ".join(argv)

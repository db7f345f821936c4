"""The nightly run: one lock per workdir, exit codes a scheduler can act on (``pipeline/errors.py``), and
its cron/systemd units.

The lock is an exclusive ``flock`` on ``<workdir>/.gemm-tune.lock`` (the kernel drops it when its holder
dies, so a crashed run never blocks the next); the holder writes who it is into the file. A plain ``luigi``
run takes it shared for each task it runs, so it never runs beside a nightly; ``--no-lock`` (a fleet's
workers, and the nightly's own Luigi process) skips it.

The nightly runs Luigi in a child process that dies with it (``procs``); each task that fails appends a
record (``FAILURES_ENV`` names the file) from which the nightly takes its exit code.

The units run the same command from a bare environment (cron: ``PATH=/usr/bin:/bin``, cwd ``$HOME``): they
``cd`` to the directory the units were printed from (where relative arguments and the workload command
were meant), every path argument is made absolute, and the environment the run needs (PATH, PYTHONPATH,
the GPU stack's and the pipeline's variables) is carried: inline in the systemd service, in
``<workdir>/nightly.env`` for cron (a crontab line stays short).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import getpass
import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ... import procs
from ...atomic import atomic_write_text
from ...errors import BadInput, Busy, exit_code, one_line, run_exit_code
from ..configs.render import TEMPLATES
from ..run import templates

LOCK_NAME = ".gemm-tune.lock"
ENV_FILE = "nightly.env"
LOG = "nightly.log"
FAILURES_ENV = "GEMM_TUNE_FAILURES"  # where a task appends its failure record (one JSON line)
FAILURES = ".nightly-failures.jsonl"
log = logging.getLogger("pipeline")

# TuneWorkload/Package parameters that name paths, made absolute in the units: name -> separator of a list
PATH_PARAMETERS = {
    "untuned": ",",
    "results": ",",
    "validators_from": None,
    "hipblaslt_bench": None,
    "hipblaslt_root": None,
    "tensile_root": None,
    "base_logic": None,
    "new_logic": None,
    "dist": None,
    "publish_dir": None,
}
UNIT_ENV_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")
UNIT_ENV_PREFIXES = (
    "GEMM_TUNE_",
    "HIPBLASLT_",
    "TENSILE_",
    "ROCM_",
    "HIP_",
    "ROCR_",
    "CUDA_",
    "NVIDIA_",
    "HF_",
    "TRANSFORMERS_",
)


class Locked(Busy):
    """Another run holds the workdir."""


def _holder(handle) -> str:
    handle.seek(0)
    return handle.read().strip() or "unknown holder"


def held_runs(workdir: Path) -> list[str]:
    """The runs of ``workdir`` a live process holds (their run lock taken: a plain ``luigi`` run, which holds the
    workdir's lock shared and writes no holder there), each with the holder its run lock names."""
    found = []
    for path in sorted(Path(workdir).glob(f"*/{RUN_LOCK}")):
        with path.open("a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)  # free: nobody runs it now
            except BlockingIOError:
                found.append(f"run {path.parent.name}: {_holder(handle)}")
    return found


def _write_holder(handle, argv: Sequence[str]) -> None:
    """Say who holds a lock file (what ``_holder`` reads back for the one refused)."""
    handle.seek(0)
    handle.truncate()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "argv": list(argv), "started": started}))
    handle.flush()


@contextlib.contextmanager
def workdir_lock(workdir: Path, wait_s: float = 0.0, argv: Sequence[str] = (), shared: bool = False) -> Iterator[Path]:
    """Hold ``workdir``'s lock for the block (``shared``: beside other shared holders, as a plain Luigi task
    does); wait up to ``wait_s`` for a holder, then raise ``Locked`` naming it."""
    workdir = Path(workdir).absolute()
    path = workdir / LOCK_NAME
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        handle = path.open("a+")
    except OSError as err:
        raise BadInput(f"workdir {workdir} cannot be created or written: {err.strerror or err}") from None
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    runs = [] if shared else held_runs(workdir)
                    holder = "; ".join(runs) if runs else _holder(handle)
                    raise Locked(f"{workdir} is in use by another run: {holder}") from None
                time.sleep(0.5)
        if not shared:
            _write_holder(handle, argv)
        yield path
    finally:
        handle.close()


RUN_LOCK = ".gemm-tune-run.lock"


class RunLocks:
    """The run directories this process holds (exclusive ``flock`` on ``<run>/.gemm-tune-run.lock``), held until
    it exits: the kernel drops them with the process. A plain ``luigi`` run holds its run's lock from its first
    look at the run, so a second run of the same name (other parameters included) is refused, naming the
    holder, before it does anything."""

    def __init__(self) -> None:
        self._held: dict[Path, object] = {}

    def hold(self, run_dir: Path, argv: Sequence[str] = ()) -> None:
        run_dir = Path(run_dir).absolute()
        if run_dir in self._held:
            return
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            handle = (run_dir / RUN_LOCK).open("a+")
        except OSError as err:
            raise BadInput(
                f"run directory {run_dir} cannot be created or written: {err.strerror or err} "
                "(--workdir names where runs go)"
            ) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            handle.close()
            raise Locked(f"{run_dir} is in use by another run of the same --run-name: {holder}") from None
        _write_holder(handle, argv)
        self._held[run_dir] = handle


def record_failure(who: str, error: BaseException, env: Mapping[str, str] | None = None) -> str:
    """Log, in one line, that ``who`` failed and with which exit code; append the record to the file
    ``$GEMM_TUNE_FAILURES`` names (the nightly reads it). Returns the line."""
    line = f"gemm-tune: {who} failed: {one_line(error)}"
    log.error("%s", line)
    target = (os.environ if env is None else env).get(FAILURES_ENV)
    if target:
        record = {"task": who, "error": type(error).__name__, "exit_code": exit_code(error), "message": str(error)}
        with open(target, "a", encoding="utf-8") as handle:  # one short line: appends do not interleave
            handle.write(json.dumps(record) + "\n")
    return line


def run(
    workdir: Path, task: str, arguments: Sequence[str], wait_s: float = 0.0, argv: Sequence[str] = ()
) -> tuple[int, list[dict]]:
    """Run Luigi's ``task`` with ``arguments`` in a child process that dies with this one, holding the workdir
    lock; the exit code and the failure records of its tasks."""
    workdir = Path(workdir).absolute()
    with workdir_lock(workdir, wait_s, argv):
        failures = workdir / FAILURES
        atomic_write_text(failures, "")
        command = [
            sys.executable,
            "-m",
            "luigi",
            "--module",
            "pipeline",
            task,
            "--local-scheduler",
            "--no-lock",
            "--workdir",
            str(workdir),
            *arguments,
        ]  # no-lock: this process holds the lock
        env = {**procs.with_package_on_path(os.environ), FAILURES_ENV: str(failures)}
        with procs.running(command, env, stdin=subprocess.DEVNULL) as proc:
            proc.wait()
        records = [json.loads(line) for line in failures.read_text().splitlines() if line.strip()]
    if records:
        return run_exit_code(r["exit_code"] for r in records), records
    if proc.returncode != 0:
        return run_exit_code([1]), [
            {
                "task": task,
                "error": "LuigiFailed",
                "exit_code": 1,
                "message": f"luigi exited with code {proc.returncode} and no task said why; "
                "its output above says what happened",
            }
        ]
    return 0, []


# ---- the units -------------------------------------------------------------------------------------------


def parse_at(text: str) -> tuple[int, int]:
    """``HH:MM`` (00:00 to 23:59) as (hour, minute); ValueError otherwise."""
    match = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a time of day HH:MM (00:00 to 23:59)")
    return int(match[1]), int(match[2])


def absolute_arguments(arguments: Sequence[str], cwd: Path) -> list[str]:
    """``arguments`` with the values of path parameters (``PATH_PARAMETERS``) made absolute against ``cwd``
    (each item of a comma-separated list; a bare program name stays a PATH lookup)."""
    out, pending = [], None
    for arg in arguments:
        if pending is not None:
            out.append(_absolute(pending, arg, cwd))
            pending = None
            continue
        name, eq, value = arg.partition("=")
        key = name[2:].replace("-", "_") if name.startswith("--") else None
        if key in PATH_PARAMETERS and eq:
            out.append(f"{name}={_absolute(key, value, cwd)}")
        else:
            out.append(arg)
            pending = key if key in PATH_PARAMETERS else None
    return out


def _absolute(key: str, value: str, cwd: Path) -> str:
    separator = PATH_PARAMETERS[key]
    parts = value.split(separator) if separator else [value]

    def one(part: str) -> str:
        stripped = part.strip()
        if not stripped or Path(stripped).is_absolute() or (key == "hipblaslt_bench" and os.sep not in stripped):
            return part
        return str(cwd / stripped)

    return (separator or "").join(one(p) for p in parts)


SECRET_MARKS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")  # a variable whose name holds one is a secret
SECRETS_FILE = "nightly.secrets"  # the secrets, KEY=VALUE, for systemd's EnvironmentFile=: 0600


def secret(name: str) -> bool:
    """Whether a variable's name marks it a secret (``HF_TOKEN``, ``WANDB_API_KEY``, ...): it goes only into
    files its owner alone reads, and no printed text holds its value."""
    return any(mark in name.upper() for mark in SECRET_MARKS)


def unit_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables the run reads, taken from ``env`` (the shell the units are printed from), with this
    package's root on PYTHONPATH."""
    carried = {k: v for k, v in sorted(env.items()) if k in UNIT_ENV_NAMES or k.startswith(UNIT_ENV_PREFIXES)}
    carried["PYTHONPATH"] = procs.with_package_on_path(env)["PYTHONPATH"]
    carried.setdefault("PATH", os.defpath)
    return carried


def _cron_escape(text: str) -> str:
    return text.replace("%", "\\%")  # cron turns an unescaped % into a newline


def _systemd_word(word: str) -> str:
    """One ExecStart word: specifiers (%) and variables ($) literal, quoted where it holds more than
    [A-Za-z0-9_@+=:,./-]."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and re.fullmatch(r"[A-Za-z0-9_@+=:,./%$-]+", word):
        return word
    return _systemd_quoted(word)


def _systemd_path(path: Path) -> str:
    """A path as ``StandardOutput=append:`` takes it: the rest of the line, unquoted (systemd splits no words
    there), specifiers (%) literal."""
    return str(path).replace("%", "%%")


def _systemd_assignment(key: str, value: str) -> str:
    return _systemd_quoted(f"{key}={value}".replace("%", "%%"))


def _systemd_quoted(text: str) -> str:
    """``text`` in double quotes, its backslashes and quotes escaped (systemd's quoting)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def units(
    workdir: Path,
    arguments: Sequence[str],
    at: str = "02:00",
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment file, the crontab line and the systemd service and timer that run ``gemm-tune nightly``
    with ``arguments`` at ``at`` (HH:MM) from a bare environment, as typed in ``cwd`` with ``env``."""
    hour, minute = parse_at(at)
    cwd = Path(cwd or os.getcwd()).absolute()
    workdir = (cwd / workdir) if not Path(workdir).is_absolute() else Path(workdir)
    carried = unit_environment(os.environ if env is None else env)
    command = [
        sys.executable,
        "-m",
        "pipeline",
        "nightly",
        "--workdir",
        str(workdir),
        *absolute_arguments(arguments, cwd),
    ]
    env_file, log = workdir / ENV_FILE, workdir / LOG
    secrets = {k: v for k, v in carried.items() if secret(k)}
    context = {
        "hour": hour,
        "minute": minute,
        "workdir": workdir,
        "user": getpass.getuser(),
        "cron": _cron_escape(
            f"cd {shlex.quote(str(cwd))} && . {shlex.quote(str(env_file))} && exec "
            f"{shlex.join(command)} >> {shlex.quote(str(log))} 2>&1"
        ),
        "env_file": env_file,
        "exports": [f"export {k}={shlex.quote(v)}" for k, v in carried.items()],
        "working_directory": str(cwd).replace("%", "%%"),
        "log_path": _systemd_path(log),
        "environment": [_systemd_assignment(k, v) for k, v in carried.items() if not secret(k)],
        "secret_names": sorted(secrets),
        "secrets_file": _systemd_path(workdir / SECRETS_FILE) if secrets else None,
        "exec_start": " ".join(_systemd_word(w) for w in command),
    }
    jinja = templates.environment(TEMPLATES, trim_blocks=True, keep_trailing_newline=True)
    texts = {
        name: jinja.get_template(f"{name}.j2").render(context)
        for name in (ENV_FILE, "gemm-tune-nightly.cron", "gemm-tune-nightly.service", "gemm-tune-nightly.timer")
    }
    if secrets:
        texts[SECRETS_FILE] = "".join(f"{k}={_systemd_quoted(v)}\n" for k, v in secrets.items())
    return texts

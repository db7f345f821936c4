"""Child processes that die with the run that started them.

Every program the pipeline starts (the workload, the GPU workers, vendor tools, the end-to-end A/B) runs
under a small supervisor (``SUPERVISOR``, plain ``python -I -S``): it leads a new process group, asks the
kernel for SIGTERM when its parent dies (Linux ``PR_SET_PDEATHSIG``; elsewhere it polls its parent), and
then kills its whole group. So nothing a run started outlives it, not even after ``kill -9`` of the run,
and a worker's grandchildren (a vendor tool, ``torchrun`` ranks) go with it. A time-out, ``kill()``, or an
exception in the caller (Ctrl-C) kills the group the same way. Each level does this for the next, so a
chain of runs, workers and tools unwinds from whichever end dies.
The supervisor imports C modules alone (``_signal``, ``_ctypes``): a DAG starts hundreds of tools, and
``signal`` and ``ctypes`` would make its start-up 19 ms instead of 11 (2 cores, CPython 3.11).

A process that runs one tool hundreds of times uses ``spawner.Spawner`` instead: the same contract, one
supervisor for all its runs.

A process started from a thread dies when that thread ends (the kernel's parent-death rule): start
children from the thread that waits for them. A worker a library starts (a ``multiprocessing`` pool) asks
for the same signal itself: ``die_with_parent`` as the pool's initializer.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

PDEATHSIG = r"""
import _signal as signal  # the C module: ``signal`` would import enum, a third of the start-up
def ask_for_sigterm():
    "Ask the kernel for SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG): whether it agreed."
    try:  # through ctypes' C core, not ctypes (whose import is another third); CPython 3.10-3.13 have it
        import _ctypes
        return _ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None), "prctl"), (1, signal.SIGTERM)) == 0
    except (ImportError, OSError, AttributeError):  # no prctl (not Linux), or a CPython without call_function
        pass
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM) == 0
    except (OSError, AttributeError):
        return False
"""
_SUPERVISE = r"""
import os, sys, time
parent, argv = int(sys.argv[1]), sys.argv[2:]
def die(*_):
    os.killpg(0, signal.SIGKILL)
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, die)
pdeathsig = ask_for_sigterm()
if os.getppid() != parent:
    die()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        print(f"{argv[0]}: {err.strerror}", file=sys.stderr)
        os._exit(127)
while True:
    done, status = os.waitpid(pid, 0 if pdeathsig else os.WNOHANG)
    if done:
        break
    if os.getppid() != parent:
        die()
    time.sleep(0.05)
code = os.waitstatus_to_exitcode(status)
if code < 0:  # die of the command's signal; SIGKILL and SIGSTOP take no handler, and need none reset
    if -code not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""
SUPERVISOR = PDEATHSIG + _SUPERVISE  # run as python -I -S -c SUPERVISOR <parent pid> <argv...>


def die_with_parent(parent: int) -> None:
    """In a worker that a library started (a ``multiprocessing`` pool's initializer), which ``start`` does not
    supervise: ask the kernel for SIGTERM when its parent dies (``PDEATHSIG``), and exit at once if the parent
    ``parent`` died before the request, or the kernel declined it (not Linux)."""
    space: dict = {}
    exec(PDEATHSIG, space)  # the supervisor's own request, one implementation of it
    if not space["ask_for_sigterm"]() or os.getppid() != parent:
        os._exit(1)


def check_program(program: str, env: Mapping[str, str] | None) -> str:
    """``program`` as the child will find it (on ``env``'s PATH), or FileNotFoundError as ``Popen`` would raise
    it: a supervised command that is not there fails here, not as the supervisor's exit code 127."""
    if os.sep in program:
        if not os.access(program, os.X_OK) or Path(program).is_dir():
            raise FileNotFoundError(2, f"no executable file {program!r}", program)
        return program
    found = shutil.which(program, path=(env if env is not None else os.environ).get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(2, f"{program!r} is not on PATH", program)
    return program


def start(argv: Sequence[str], env: Mapping[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """``Popen(argv, **popen)`` under the supervisor: the command leads a process group of its own that dies
    with this process. ``proc.pid`` is the group's; end it with ``kill(proc)``."""
    if "start_new_session" in popen or "preexec_fn" in popen or "process_group" in popen:
        raise TypeError("start() sets the process group itself")
    argv = [str(a) for a in argv]
    check_program(argv[0], env)
    command = [sys.executable, "-I", "-S", "-c", SUPERVISOR, str(os.getpid()), *argv]
    return subprocess.Popen(command, env=None if env is None else dict(env), start_new_session=True, **popen)


def kill_group(group: int) -> None:
    """SIGKILL to process group ``group``, where any of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def kill(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s whole group (the command and everything it started) and reap it."""
    kill_group(proc.pid)
    proc.wait()


@contextlib.contextmanager
def running(argv: Sequence[str], env: Mapping[str, str] | None = None, **popen: Any) -> Iterator[subprocess.Popen]:
    """``start()`` for the block; the group is killed when the block leaves, normally or not (a finished
    command's group is already gone, unless it left processes behind: those die too)."""
    proc = start(argv, env, **popen)
    try:
        yield proc
    finally:
        kill(proc)


def exited_within(proc: subprocess.Popen, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``proc`` to end (returning as soon as it does): whether it has."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def run(
    argv: Sequence[str],
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    log: Path | None = None,
    stdin: Any = subprocess.DEVNULL,
) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end, its output captured as text (or, with ``log``, written to that file, stderr
    with stdout). On a time-out the group is killed and ``subprocess.TimeoutExpired`` raised; whatever
    stops the caller meanwhile kills it too."""
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(Path(log).open("w")) if log is not None else subprocess.PIPE
        proc = stack.enter_context(
            running(
                argv,
                env,
                cwd=cwd,
                stdin=stdin,
                stdout=sink,
                stderr=subprocess.STDOUT if log is not None else subprocess.PIPE,
                text=True,
                errors="replace",
            )
        )
        out, err = proc.communicate(timeout=timeout_s)
        return subprocess.CompletedProcess(list(argv), proc.returncode, out or "", err or "")


PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def with_package_on_path(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this package's root first on PYTHONPATH, so ``python -m pipeline...`` works from any cwd."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))}


def running_worker(log: Any, worker: str, *args: Any) -> contextlib.AbstractContextManager[subprocess.Popen]:
    """One of the stages' worker processes (``worker_argv``), this package on its path, its output into the open
    file ``log``; killed with its group when the block leaves (``running``)."""
    return running(
        worker_argv(worker, *args),
        with_package_on_path(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def worker_argv(worker: str, *args: str) -> list[str]:
    """The command of one of the stages' worker processes (``python -m pipeline.stages <worker> ...``)."""
    return [sys.executable, "-m", "pipeline.stages", worker, *map(str, args)]


def tail_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-lines:])

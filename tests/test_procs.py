"""procs: the supervisor every child runs under dies with the process that started it, and takes its group."""

import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline import procs

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


@linux_only
def test_the_supervisor_asks_the_kernel_for_sigterm_on_its_parents_death():
    check = (
        procs.PDEATHSIG
        + "import ctypes\n"
        + "agreed = ask_for_sigterm()\n"
        + "held = ctypes.c_int(0)\n"
        + "ctypes.CDLL(None).prctl(2, ctypes.byref(held))  # PR_GET_PDEATHSIG\n"
        + "print(agreed, held.value)\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", check], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", str(int(signal.SIGTERM))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, only not reaped yet
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@linux_only
def test_a_child_and_its_grandchild_die_with_a_parent_killed_by_sigkill():
    parent = (
        "import sys; from pipeline import procs\n"
        "proc = procs.start(['sh', '-c', 'sleep 60 & echo $$ $!; wait'], stdout=None)\n"
        "sys.stdout.flush(); proc.wait()\n"
    )
    env = procs.with_package_on_path(os.environ)
    runner = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, env=env)
    shell, sleeper = map(int, runner.stdout.readline().split())
    assert _alive(shell) and _alive(sleeper)
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (_alive(shell) or _alive(sleeper)):
        time.sleep(0.02)
    assert not _alive(shell) and not _alive(sleeper), "the supervised group outlived its parent"


@linux_only
def test_a_pool_worker_that_asks_dies_with_a_parent_killed_by_sigkill():
    parent = (
        "import os, sys, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from multiprocessing import get_context\n"
        "from pipeline import procs\n"
        "with ProcessPoolExecutor(1, mp_context=get_context('spawn'), initializer=procs.die_with_parent,\n"
        "                         initargs=(os.getpid(),)) as pool:\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    pool.submit(time.sleep, 60).result()  # the worker busy for a minute\n"
    )
    env = procs.with_package_on_path(os.environ)
    runner = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, env=env)
    worker = int(runner.stdout.readline())
    assert _alive(worker)
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(worker):
        time.sleep(0.02)
    assert not _alive(worker), "the pool's worker outlived its parent"


def test_a_worker_whose_parent_is_gone_exits_at_once():
    out = subprocess.run(
        [sys.executable, "-c", "from pipeline import procs; procs.die_with_parent(1); print('ran on')"],
        capture_output=True, text=True, env=procs.with_package_on_path(os.environ),
    )  # fmt: skip
    assert out.returncode == 1 and "ran on" not in out.stdout

"""procs: the supervisor every child runs under dies with the process that started it, and takes its group."""

import os
import signal
import subprocess
import sys

from pipeline import procs

from .helpers import alive, all_dead, linux_only


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
    assert alive(shell) and alive(sleeper)
    runner.kill()
    runner.wait()
    assert all_dead(shell, sleeper), "the supervised group outlived its parent"


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
    assert alive(worker)
    runner.kill()
    runner.wait()
    assert all_dead(worker), "the pool's worker outlived its parent"


def test_a_worker_whose_parent_is_gone_exits_at_once():
    out = subprocess.run(
        [sys.executable, "-c", "from pipeline import procs; procs.die_with_parent(1); print('ran on')"],
        capture_output=True, text=True, env=procs.with_package_on_path(os.environ),
    )  # fmt: skip
    assert out.returncode == 1 and "ran on" not in out.stdout


@linux_only
def test_a_command_killed_by_a_signal_reports_it_as_popen_does():
    """The supervisor dies of the command's signal: SIGKILL (the OOM killer's), which takes no handler, too."""
    for signame, code in (("KILL", -9), ("TERM", -15)):
        proc = procs.run(["sh", "-c", f"kill -{signame} $$"])
        assert (proc.returncode, proc.stderr) == (code, ""), signame

"""spawner: one supervising server runs many commands with procs.run's contract, and what it runs dies with
the process that started it."""

import os
import subprocess
import sys
import threading
import time

import pytest

from pipeline import procs
from pipeline.errors import ToolError
from pipeline.spawner import Spawner

from .helpers import alive, all_dead, linux_only

COMMANDS = [
    ["sh", "-c", "echo out; echo err >&2; exit 3"],
    ["sh", "-c", "printf 'a\\r\\nb\\rc'"],  # newlines made universal, as text=True does
    ["sh", "-c", "kill -9 $$"],  # killed by a signal: a negative code
    ["sh", "-c", "printf '\\377\\n'"],  # undecodable bytes replaced
    [sys.executable, "-c", "import os; print(os.environ.get('SPAWNED'))"],
    ["sh", "-c", 'read line; echo "[$line]"'],  # stdin is /dev/null
]


@linux_only
def test_runs_give_what_procs_run_gives(tmp_path):
    spawner, env = Spawner(), {**os.environ, "SPAWNED": "yes"}
    try:
        for argv in COMMANDS:
            want, got = procs.run(argv, env=env), spawner.run(argv, env=env)
            assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr), argv
        here = os.getcwd()
        try:
            os.chdir(tmp_path)  # after the server started: a command runs where its caller is now
            assert spawner.run(["pwd"]).stdout == f"{tmp_path}\n"
        finally:
            os.chdir(here)
        lead = [sys.executable, "-c", "import os; print(os.getpgid(0) == os.getpid())"]
        assert spawner.run(lead).stdout == "True\n", "the command leads a process group of its own"
        with pytest.raises(FileNotFoundError):
            spawner.run(["/no/such/tool"])
        with pytest.raises(FileNotFoundError):
            spawner.run(["no-such-tool-on-path"], env={"PATH": "/nonexistent"})
    finally:
        spawner.close()


@linux_only
def test_a_time_out_kills_the_group_and_the_next_run_goes_on(tmp_path):
    spawner, pids = Spawner(), tmp_path / "pids"
    try:
        with pytest.raises(subprocess.TimeoutExpired) as raised:
            spawner.run(["sh", "-c", f"echo before; sleep 60 & echo $$ $! > {pids}; wait"], timeout_s=1.0)
        assert raised.value.stdout == "before\n"
        shell, sleeper = map(int, pids.read_text().split())
        assert all_dead(shell, sleeper), "the timed-out group outlived its time-out"
        assert spawner.run(["sh", "-c", "echo again"]).stdout == "again\n"
        held = ["sh", "-c", f"sleep 60 & echo $! > {pids}; echo done"]  # exits at once; its child holds the output
        for runner in (procs.run, spawner.run):
            start = time.monotonic()
            with pytest.raises(subprocess.TimeoutExpired):
                runner(held, timeout_s=1.0)
            assert time.monotonic() - start < 10 and all_dead(int(pids.read_text())), runner
        assert spawner.run(["sh", "-c", "echo in step"]).stdout == "in step\n"
        spawner.close()
        assert spawner.run(["sh", "-c", "echo reopened"]).stdout == "reopened\n", "a run after close starts anew"
    finally:
        spawner.close()


@linux_only
def test_a_command_and_its_grandchild_die_with_a_parent_killed_by_sigkill(tmp_path):
    pids = tmp_path / "pids"
    parent = (
        f"from pipeline.spawner import Spawner\nSpawner().run(['sh', '-c', 'sleep 60 & echo $$ $! > {pids}; wait'])\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", parent], env=procs.with_package_on_path(os.environ))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(pids.read_text().split() if pids.exists() else []) < 2:
        time.sleep(0.02)
    shell, sleeper = map(int, pids.read_text().split())
    assert alive(shell) and alive(sleeper)
    runner.kill()
    runner.wait()
    assert all_dead(shell, sleeper), "the spawned group outlived its parent"


@linux_only
def test_another_thread_runs_without_the_server_and_a_lost_server_is_named_then_replaced():
    spawner = Spawner()
    try:
        assert spawner.run(["sh", "-c", "echo main"]).stdout == "main\n"
        server = spawner._server
        seen: list[str] = []
        worker = threading.Thread(target=lambda: seen.append(spawner.run(["sh", "-c", "echo thread"]).stdout))
        worker.start()
        worker.join()
        assert seen == ["thread\n"] and spawner._server is server, "the other thread did not use the server"
        server.kill()
        server.wait()
        with pytest.raises(ToolError, match="process supervisor"):
            spawner.run(["sh", "-c", "echo lost"])
        assert spawner.run(["sh", "-c", "echo back"]).stdout == "back\n"
    finally:
        spawner.close()


@linux_only
def test_a_forked_copy_of_the_process_runs_without_its_parents_server():
    spawner = Spawner()
    try:
        assert spawner.run(["sh", "-c", "echo parent"]).stdout == "parent\n"
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its run must not go to the parent's server
            os.close(read)
            try:
                out = spawner.run(["sh", "-c", "echo $PPID"]).stdout  # its parent: the server, or a supervisor
                os.write(write, out.encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as got:
            said = got.read()
        os.waitpid(pid, 0)
        assert int(said) != spawner._server.pid, "the forked copy went to its parent's server"
        assert spawner.run(["sh", "-c", "echo again"]).stdout == "again\n", "the parent's server is still in step"
    finally:
        spawner.close()

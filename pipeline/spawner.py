"""One supervisor for many short runs: a process that launches a tool hundreds of times (a worker timing GEMMs
with hipblaslt-bench, one process per run and arm) pays a supervisor's interpreter start-up (``procs.run``:
11 ms of CPU, as much again as a run of the bench's test double) once instead of each time.

``Spawner.run`` has ``procs.run``'s contract: the command leads a process group of its own that dies with the
process that started it, its output comes back as text, a time-out kills the group and raises
``subprocess.TimeoutExpired``. The server (``SERVER``, plain ``python -I -S``, started on the first run) asks
the kernel for SIGTERM when its parent dies (``procs.PDEATHSIG``), forks each command into a new session, and
on that signal, or when the socket to its parent closes, kills the groups it still has and exits. Requests go
over a socket pair: the command, its environment and directory (``marshal``), with stdin and the output pipes
as passed descriptors (``SCM_RIGHTS``); the server answers the command's pid, then its exit code. A process
started from a thread dies when that thread ends, so the server serves the thread that started it only (and
not a forked copy of the process); from any other thread or process runs go through ``procs.run``, and after a
run that did not finish cleanly the next one starts a new server.
"""

from __future__ import annotations

import locale
import marshal
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence

from . import procs
from .errors import ToolError

_SERVE = r"""
import os, sys, marshal, _socket
parent, sock = int(sys.argv[1]), _socket.socket(fileno=int(sys.argv[2]))
groups = set()
def die(*_):
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, die)
ask_for_sigterm()
if os.getppid() != parent:
    die()
while True:
    msg, ancdata, _, _ = sock.recvmsg(1 << 20, _socket.CMSG_SPACE(3 * 4))
    if not msg:
        die()  # the parent closed its end (it finished, or died without the signal)
    data = b"".join(d for level, kind, d in ancdata if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS)
    fds = [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True) for i in range(0, len(data), 4)]
    argv, env, cwd = marshal.loads(msg)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.closerange(3, 1 << 16)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            os.write(2, f"{argv[0]}: {err.strerror}\n".encode())
        os._exit(127)
    for fd in fds:
        os.close(fd)
    groups.add(pid)
    sock.send(marshal.dumps(pid))
    _, status = os.waitpid(pid, 0)
    groups.discard(pid)
    sock.send(marshal.dumps(os.waitstatus_to_exitcode(status)))
"""
SERVER = procs.PDEATHSIG + _SERVE  # run as python -I -S -c SERVER <parent pid> <socket fd>


class SupervisorLost(ToolError):
    """The server ended under a run (killed, or out of memory); the next run starts another."""


class Spawner:
    """Runs commands as ``procs.run`` does, through one supervising server per instance; ``close`` ends it."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                command = [sys.executable, "-I", "-S", "-c", SERVER, str(os.getpid()), str(theirs.fileno())]
                self._server = subprocess.Popen(
                    command, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True
                )
            self._sock, self._thread, self._pid = ours, threading.current_thread(), os.getpid()
            self._ended = weakref.finalize(self, _end, self._sock, self._server)  # at the latest when we exit
        return self._sock

    def close(self) -> None:
        """End the server (it kills whatever it still supervises) and reap it; a later run starts another."""
        if self._sock is not None:
            self._ended()
            self._sock = self._server = None

    def run(
        self, argv: Sequence[str], timeout_s: float | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """``procs.run(argv, timeout_s, env)``, stdin from /dev/null and the output captured, through the server
        where this thread started it (or starts it now)."""
        foreign = self._thread not in (None, threading.current_thread()) or self._pid not in (None, os.getpid())
        if foreign or not hasattr(socket, "send_fds"):
            return procs.run(argv, timeout_s=timeout_s, env=env)
        argv = [str(a) for a in argv]
        procs.check_program(argv[0], env)
        clean = False
        try:
            result = self._run(argv, timeout_s, dict(os.environ if env is None else env))
            clean = True
            return result
        except subprocess.TimeoutExpired:
            clean = True  # the group was killed and its exit read: the server is in step
            raise
        finally:
            if not clean:  # interrupted mid-run: the server's answers are out of step with ours
                self.close()

    def _run(self, argv: list[str], timeout_s: float | None, env: dict[str, str]) -> subprocess.CompletedProcess:
        sock = self._connect()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        pid = None
        try:
            with open(os.devnull, "rb") as devnull:
                try:
                    request = marshal.dumps((argv, env, os.getcwd()))  # the caller's directory now, as Popen's
                    socket.send_fds(sock, [request], [devnull.fileno(), out_w, err_w])
                except OSError as err:
                    raise SupervisorLost(
                        f"gemm-tune's process supervisor (pipeline/spawner.py) is gone: {err}"
                    ) from err
            os.close(out_w)
            os.close(err_w)
            out_w = err_w = -1
            pid = _answer(sock)
            chunks, code, late = self._collect(sock, {out_r: [], err_r: []}, deadline)
            if late:  # past the deadline (the command, or what it left holding its output): the group dies
                procs.kill_group(pid)
                if code is None:
                    _answer(sock)  # its exit, which the server sends once it reaped it: the next run stays in step
                raise subprocess.TimeoutExpired(argv, timeout_s or 0.0, _text(chunks[out_r]), _text(chunks[err_r]))
            return subprocess.CompletedProcess(argv, code, _text(chunks[out_r]), _text(chunks[err_r]))
        finally:
            for fd in (out_r, err_r, out_w, err_w):
                if fd >= 0:
                    os.close(fd)
            if pid is not None:  # what the command left behind in its group goes with it, as in procs.running
                procs.kill_group(pid)

    @staticmethod
    def _collect(
        sock: socket.socket, chunks: dict[int, list[bytes]], deadline: float | None
    ) -> tuple[dict[int, list[bytes]], int | None, bool]:
        """Read both pipes to their end and the command's exit code (None: not yet sent); whether the deadline
        passed first."""
        code = None
        with selectors.DefaultSelector() as selector:
            for fd in chunks:
                selector.register(fd, selectors.EVENT_READ)
            selector.register(sock, selectors.EVENT_READ)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return chunks, code, True
                for key, _ in selector.select(left):
                    if key.fileobj is sock:
                        code = _answer(sock)
                        selector.unregister(sock)
                        continue
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        return chunks, code, False


def _end(sock: socket.socket, server: subprocess.Popen) -> None:
    """Close the socket (the server kills what it still supervises and exits) and reap the server."""
    sock.close()
    procs.kill(server)


def _text(chunks: list[bytes]) -> str:
    """Output as ``subprocess`` gives it with ``text=True, errors="replace"``: decoded, newlines universal."""
    text = b"".join(chunks).decode(locale.getpreferredencoding(False), errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _answer(sock: socket.socket) -> int:
    """The server's next answer (a pid, then an exit code); a ToolError where it is gone."""
    data = sock.recv(64)
    if not data:
        raise SupervisorLost("gemm-tune's process supervisor (pipeline/spawner.py) ended before its command did")
    return marshal.loads(data)

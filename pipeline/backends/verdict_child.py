"""Bench's verdict, timed in a process that never searched.

A cuBLASLt backend keeps one child process that does nothing but time verdicts, as Validate and the workload
time in processes of their own: nothing the search left behind (its pool's launchers and workspaces, its
allocations, a kernel that broke the CUDA context) reaches the figure Bench reports. On the H100 the process
alone did not close the gap to Validate (94% of rows within 2%); pooling six windows did (98%; ``bench/README.md``,
"Does Bench predict what ships?"). The child is started by ``prepare()`` so its start-up overlaps the first
search, asked one verdict at a time over a pipe, and killed by ``close()`` or, like every child, with the run
(``procs``).

The protocol is one JSON object a line. Once its CUDA context is up the child writes ``{"ready": PID}``; to
each request ``{"problem", "config", "timing", "rounds", "workspace_bytes"}`` it answers ``{"samples":
{"default": [...], "winner": [...]}}`` (per-call µs, the same rounds, ``CublasLtBackend.time_verdict``) or
``{"error": "..."}``, after which it exits, so a CUDA context an error may have broken never times the next
verdict (the next request starts a new child). Its stdout carries the protocol alone: whatever else it
prints goes to its stderr, the worker's log.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import select
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import procs

READY_TIMEOUT_S = 300.0  # import torch, make a CUDA context: seconds; minutes on a loaded machine
ANSWER_TIMEOUT_S = 600.0  # one verdict is six windows of a few dozen graph replays: seconds


class VerdictChildError(RuntimeError):
    """The verdict could not be timed: the child refused it, died, or did not answer in time."""


class VerdictChild:
    """The client side: ``ask(request)`` returns the child's answer, starting (or restarting) it as needed."""

    def __init__(self, argv: Sequence[str], answer_timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.argv = list(argv)
        self.answer_timeout_s = answer_timeout_s
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.started = 0  # children started so far (a restart after an error counts)

    @classmethod
    def for_gpu(cls, gpu: int) -> VerdictChild:
        return cls(procs.worker_argv("verdict-child", "--gpu", str(gpu)))

    def start(self) -> None:
        """Start the child unless one is running; returns at once (``ask`` waits for it to be ready)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.proc = procs.start(
            self.argv,
            procs.with_package_on_path(os.environ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.ready, self.started = False, self.started + 1

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The child's answer to ``request``; ``VerdictChildError`` where it refused, died or went silent."""
        self.start()
        assert self.proc is not None and self.proc.stdin is not None
        if not self.ready:
            self._read(READY_TIMEOUT_S, "starting")
            self.ready = True
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._died("taking a request") from None
        answer = self._read(self.answer_timeout_s, "timing a verdict")
        if "error" in answer:
            self._reap()
            raise VerdictChildError(f"the verdict process refused it: {answer['error']}")
        return answer

    def _read(self, timeout_s: float, doing: str) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        readable, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not readable:
            self.close()
            raise VerdictChildError(f"the verdict process gave no answer within {timeout_s:.0f} s {doing}: killed")
        line = self.proc.stdout.readline()
        if not line:
            raise self._died(doing)
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            self.close()
            raise VerdictChildError(f"the verdict process wrote {line[:200]!r}, not a JSON line: killed") from None
        if not isinstance(answer, dict):
            self.close()
            raise VerdictChildError(f"the verdict process wrote {line[:200]!r}, not a JSON object: killed")
        return answer

    def _died(self, doing: str) -> VerdictChildError:
        code = self._reap()
        return VerdictChildError(f"the verdict process exited with code {code} while {doing} (see this worker's log)")

    def _reap(self) -> int | None:
        """Wait for the child to end (it exits after an error), killing it after 30 s; its exit code."""
        if self.proc is None:
            return None
        if not procs.exited_within(self.proc, 30.0):
            procs.kill(self.proc)
        code, self.proc = self.proc.returncode, None
        return code

    def close(self) -> None:
        """Kill the child (and whatever it started)."""
        if self.proc is not None:
            procs.kill(self.proc)
            self.proc = None


def _answer(stream: Any, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def request_of(problem: Any, config: dict | None, timing: Any, rounds: int, workspace_bytes: int) -> dict[str, Any]:
    """The request for ``problem`` (a ``GemmProblem``) against ``config`` under ``timing`` (``TimingSettings``)."""
    return {
        "problem": problem.to_dict(),
        "config": config,
        "timing": dataclasses.asdict(timing),
        "rounds": rounds,
        "workspace_bytes": workspace_bytes,
    }


def _timed(backend: Any, request: dict[str, Any]) -> dict[str, list[float]]:
    from ..problem import GemmProblem
    from .measure import TimingSettings

    timing = request["timing"]
    settings = TimingSettings(**{key: tuple(v) if isinstance(v, list) else v for key, v in timing.items()})
    problem = GemmProblem.from_dict(request["problem"])
    return backend.time_verdict(problem, request["config"], settings, request["rounds"], request["workspace_bytes"])


def main(make_backend: Callable[[int], Any], argv: Sequence[str] | None = None) -> int:
    """The child: ``python -m pipeline.stages verdict-child --gpu N``, stdin and stdout its pipe;
    ``make_backend(gpu)`` the backend that times (``cublaslt.CublasLtBackend`` without a child of its own)."""
    parser = argparse.ArgumentParser(description="time Bench's verdicts in a process that never searched")
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args(argv)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints of torch, Triton or nvmath land in the log, never in the protocol
    backend = make_backend(args.gpu)
    _answer(protocol, {"ready": os.getpid()})
    for line in sys.stdin:
        try:
            samples = _timed(backend, json.loads(line))
        except Exception as err:  # the parent records it against the candidate; a bad config never fails the run
            _answer(protocol, {"error": f"{type(err).__name__}: {err}"})
            return 1
        _answer(protocol, {"samples": samples})
    return 0

"""Count CUDA-graph replays in a workload under collection, so that a GEMM captured once weighs as often as it
runs; and route GEMMs through the runtime only while a graph is captured (``CaptureOnly``).

Under CUDA graphs (``torch.compile(mode="reduce-overhead")``, ``torch.cuda.graph``) a GEMM goes through the
dispatcher, and through TunableOp's lookup, only while its graph is captured; every replay runs its kernel
again without a trace on the host. Call counts from the lookup log (``stages.call_weights``) therefore count
captures. ``GraphCounter`` wraps ``torch.cuda.CUDAGraph``'s ``capture_begin``, ``capture_end`` and ``replay``
(the Python methods that ``torch.cuda.graph`` and Inductor's cudagraph trees call) in the workload's processes:
it writes a marker line to stderr around each capture, in order with TunableOp's own lookup lines on the same
stream, counts each graph's replays, and writes them at exit. Collection weighs each lookup logged between a
graph's markers by that graph's replays.
"""

from __future__ import annotations

import os
import re
import sys
import weakref
from collections import Counter
from collections.abc import Mapping

MARK = "gemm-tune: CUDA graph"
_LINE = re.compile(rf"^{MARK} (?P<graph>\d+\.\d+) (?:capture (?P<edge>begin|end)|replayed (?P<replays>\d+))\s*$")


def parse_marker(line: str) -> tuple[str, str, int] | None:
    """``(graph, "begin" | "end" | "replayed", replays)`` for a marker line, None for any other line."""
    match = _LINE.match(line)
    if match is None:
        return None
    if match["edge"]:
        return match["graph"], match["edge"], 0
    return match["graph"], "replayed", int(match["replays"])


def add_replayed(calls: Counter, captured: Mapping[str, Counter], replays: Mapping[str, int]) -> None:
    """Add to ``calls`` each call made while a graph was captured (``captured``: graph -> calls by key), once
    per replay of that graph."""
    for graph, keys in captured.items():
        for key, count in keys.items():
            calls[key] += count * replays.get(graph, 0)


class GraphCounter:
    """Names each captured graph ``<pid>.<n>``, marks its capture on stderr and counts its replays."""

    def __init__(self) -> None:
        self.capturing: str | None = None
        self.replays: Counter = Counter()
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> name, never reused
        self._named: list[str] = []  # every name given, graphs freed since included (their replays count)
        self._saved: tuple | None = None

    def name(self, graph) -> str:
        if graph not in self._names:  # by identity of a live graph: a freed graph's id may come back
            self._names[graph] = f"{os.getpid()}.{len(self._named)}"
            self._named.append(self._names[graph])
        return self._names[graph]

    @staticmethod
    def say(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()  # before the C++ lookup lines that follow on the same stream

    def install(self) -> None:
        import torch

        graph_class = torch.cuda.CUDAGraph
        begin, end, replay = graph_class.capture_begin, graph_class.capture_end, graph_class.replay
        counter = self

        def capture_begin(graph, *args, **kwargs):
            counter.capturing = counter.name(graph)
            counter.say(f"{MARK} {counter.capturing} capture begin")
            return begin(graph, *args, **kwargs)

        def capture_end(graph, *args, **kwargs):
            try:
                return end(graph, *args, **kwargs)
            finally:
                counter.say(f"{MARK} {counter.name(graph)} capture end")
                counter.capturing = None

        def counted_replay(graph, *args, **kwargs):
            counter.replays[counter.name(graph)] += 1
            return replay(graph, *args, **kwargs)

        graph_class.capture_begin, graph_class.capture_end, graph_class.replay = (
            capture_begin,
            capture_end,
            counted_replay,
        )
        self._saved = (graph_class, begin, end, replay)

    def uninstall(self) -> None:
        if self._saved is not None:
            graph_class, begin, end, replay = self._saved
            graph_class.capture_begin, graph_class.capture_end, graph_class.replay = begin, end, replay
            self._saved = None

    def report(self) -> None:
        """The replays of every graph captured in this process (at exit)."""
        for graph in self._named:
            self.say(f"{MARK} {graph} replayed {self.replays[graph]}")


class CaptureOnly:
    """The runtime's ``--graphs-only`` mode: the router's kernels are registered while a CUDA graph is captured
    and torch's put back when the capture ends (``torch.cuda.CUDAGraph.capture_begin``/``capture_end``, which
    ``torch.cuda.graph`` and Inductor's cudagraph trees call), so a graph's GEMMs replay the tuned choices and an
    eager call outside a capture never meets the runtime: no host cost at all (docs/serving.md). While a capture
    is open, GEMMs that other threads run eagerly are routed too: the dispatcher is process-wide."""

    def __init__(self, router) -> None:
        self.router = router
        self.depth = 0  # captures open (nested captures register once)
        self.captures = 0
        self._saved: tuple | None = None

    def install(self) -> None:
        import torch

        graph_class = torch.cuda.CUDAGraph
        begin, end = graph_class.capture_begin, graph_class.capture_end
        gate = self

        def capture_begin(graph, *args, **kwargs):
            gate.enter()
            try:
                return begin(graph, *args, **kwargs)
            except BaseException:
                gate.leave()
                raise

        def capture_end(graph, *args, **kwargs):
            try:
                return end(graph, *args, **kwargs)
            finally:
                gate.leave()

        graph_class.capture_begin, graph_class.capture_end = capture_begin, capture_end
        self._saved = (graph_class, begin, end)

    def enter(self) -> None:
        if self.depth == 0:
            self.router.register()
        self.depth += 1
        self.captures += 1

    def leave(self) -> None:
        self.depth = max(self.depth - 1, 0)
        if self.depth == 0:
            self.router.unregister()

    def uninstall(self) -> None:
        if self._saved is not None:
            graph_class, begin, end = self._saved
            graph_class.capture_begin, graph_class.capture_end = begin, end
            self._saved = None
        self.depth = 0
        self.router.unregister()

"""Calls under CUDA graphs: a GEMM looked up while its graph is captured counts once per replay
(``runtime.graphs`` marks captures and counts replays; ``call_weights.split_stderr`` weighs)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import ClassVar

import pytest

from pipeline.runtime.graphs import MARK, GraphCounter, parse_marker
from pipeline.stages.gather.call_weights import split_stderr

from .helpers import O_PROJ, QKV


def _lookup(key: str) -> str:
    return f"missing op_signature, returning null ResultEntry for {key}\n"


def test_lookups_inside_a_capture_count_once_per_replay_and_markers_are_stripped():
    lines = [
        _lookup(QKV),
        "no result, using default\n",
        f"{MARK} 7.0 capture begin\n",
        _lookup(QKV),
        _lookup(O_PROJ),
        f"{MARK} 7.0 capture end\n",
        "the workload's own line\n",
        _lookup(O_PROJ),
        f"{MARK} 7.1 capture begin\n",
        _lookup(O_PROJ),
        f"{MARK} 7.1 capture end\n",
        f"{MARK} 7.0 replayed 40\n",
        f"{MARK} 7.1 replayed 0\n",
    ]
    calls: Counter = Counter()
    kept = list(split_stderr(lines, calls))
    assert kept == ["the workload's own line\n"]
    assert calls == {QKV: 1 + 40, O_PROJ: 40 + 1}  # 7.1 was captured and never replayed: its call never ran


def test_markers_parse_and_nothing_else_does():
    assert parse_marker(f"{MARK} 123.4 capture begin") == ("123.4", "begin", 0)
    assert parse_marker(f"{MARK} 123.4 capture end\n") == ("123.4", "end", 0)
    assert parse_marker(f"{MARK} 123.4 replayed 17") == ("123.4", "replayed", 17)
    assert parse_marker("gemm-tune: CUDA graph 1.2 replayed many") is None
    assert parse_marker("CUDA graph 1.2 capture begin") is None


class _Graph:
    """The three methods of torch.cuda.CUDAGraph that the counter wraps."""

    log: ClassVar[list] = []

    def capture_begin(self, pool=None, capture_error_mode="global"):
        self.log.append(("begin", capture_error_mode))

    def capture_end(self):
        self.log.append("end")

    def replay(self):
        self.log.append("replay")


def test_the_counter_wraps_capture_and_replay_and_unwraps(monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Graph)
    counter = GraphCounter()
    counter.install()
    one, two = _Graph(), _Graph()
    one.capture_begin(capture_error_mode="thread_local")
    assert counter.capturing is not None
    one.capture_end()
    assert counter.capturing is None
    for _ in range(3):
        one.replay()
    two.capture_begin()
    two.capture_end()
    two.replay()
    counter.report()
    counter.uninstall()
    one.replay()  # unwrapped: not counted
    assert _Graph.log[:2] == [("begin", "thread_local"), "end"]
    err = capsys.readouterr().err.splitlines()
    names = [parse_marker(line)[0] for line in err]
    assert [parse_marker(line)[1:] for line in err] == [
        ("begin", 0),
        ("end", 0),
        ("begin", 0),
        ("end", 0),
        ("replayed", 3),
        ("replayed", 1),
    ]
    assert names[0] == names[1] == names[4] != names[2] == names[3] == names[5]


def test_a_graph_made_after_another_was_freed_gets_a_name_of_its_own(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Graph)
    counter = GraphCounter()
    seen = set()
    for _ in range(50):  # CPython hands a freed object's id to the next one of its size
        graph = _Graph()
        seen.add(counter.name(graph))
        del graph
    assert len(seen) == 50


def test_the_scaled_recorder_weighs_captured_calls_by_replays(tmp_path):
    torch = pytest.importorskip("torch")
    from pipeline.runtime.record import ScaledRecorder, read_counts

    class Graphs:
        def __init__(self) -> None:
            self.capturing: str | None = None
            self.replays = Counter({"9.0": 25})

    graphs = Graphs()
    x = torch.randn(16, 32).to(torch.float8_e4m3fn)
    w = torch.randn(64, 32).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    recorder = ScaledRecorder(tmp_path, dispatch_key="CPU", graphs=graphs)
    recorder.install()
    try:
        torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16)
        graphs.capturing = "9.0"
        torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16)
        graphs.capturing = None
    finally:
        recorder.uninstall()
    recorder.write()
    assert list(read_counts(tmp_path)[0].values()) == [1 + 25]


@pytest.mark.gpu
@pytest.mark.gpu_untimed
def test_collection_weighs_a_captured_gemm_by_its_replays(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False")
    from pipeline.stages.gather.collect import collect

    script = tmp_path / "graphed.py"
    script.write_text(
        "import torch\n"
        "a = torch.randn(64, 256, device='cuda', dtype=torch.bfloat16)\n"
        "b = torch.randn(256, 128, device='cuda', dtype=torch.bfloat16)\n"
        "c = torch.randn(32, 256, device='cuda', dtype=torch.bfloat16)\n"
        "torch.mm(a, b)\n"  # eager: one call
        "s = torch.cuda.Stream()\n"
        "s.wait_stream(torch.cuda.current_stream())\n"
        "with torch.cuda.stream(s):\n"
        "    torch.mm(c, b)\n"  # warm-up before capture: one eager call of the graphed shape
        "torch.cuda.current_stream().wait_stream(s)\n"
        "g = torch.cuda.CUDAGraph()\n"
        "with torch.cuda.graph(g):\n"
        "    out = torch.mm(c, b)\n"
        "for _ in range(9):\n"
        "    g.replay()\n"
        "torch.cuda.synchronize()\n"
    )
    out = tmp_path / "collect"
    collect(out, [sys.executable, str(script)])
    calls = json.loads((out / "calls.json").read_text())["calls"]
    by_m = {key.split(",")[1].split("_")[2]: n for key, n in calls.items()}  # n of the BLAS frame: torch's m
    assert sorted(by_m.values()) == [1, 1 + 9], calls
    assert MARK not in (out / "workload.stderr.log").read_text()

"""Triton rows through ``pipeline.runtime`` on the GPU (docs/triton.md): eager ``F.linear`` with and without
bias, tensorwise FP8 ``_scaled_mm``, CUDA-graph capture and replay, ``torch.compile``; a row tuned under
another kernel source and an unfused addmm fall back per row with their reasons."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pipeline.formats.tunableop import TunableOpEntry, write_file
from pipeline.kernels import triton_gemm as tg
from pipeline.kernels import triton_runner as tr
from pipeline.problem import GemmProblem

from .helpers import nvmath_gpu_marks, recorded_scaled_calls

pytestmark = [
    *nvmath_gpu_marks("the runtime"),
    pytest.mark.gpu_untimed,  # routing and numerics, no timings
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
]
TOKENS, K, N_OUT = 8, 4096, 6144


def _rows(path: Path, problems: list[GemmProblem]) -> dict[GemmProblem, str]:
    """A results file giving each problem a Triton config it is served by (split-K where one is offered)."""
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chosen = {}
    for problem in problems:
        offered = tg.configs(problem, sms)
        chosen[problem] = next((c for c in offered if c.split_k > 1), offered[0]).name
    entries = [TunableOpEntry.from_problem(p, name, 0.01) for p, name in chosen.items()]
    write_file(path, {"PT_VERSION": torch.__version__.split("+")[0]}, entries)
    return chosen


def _linear(bias: bool) -> GemmProblem:
    op = "gemm_and_bias" if bias else "gemm"
    return GemmProblem(op, "T", "N", N_OUT, TOKENS, K, K, K, N_OUT)


def _close(have, want) -> bool:
    return float((have.float() - want.float()).norm() / want.float().norm()) < 1e-2


@pytest.fixture
def weights():
    import torch

    torch.manual_seed(0)
    w = torch.randn(N_OUT, K, device="cuda", dtype=torch.bfloat16) / K**0.5
    b = torch.randn(N_OUT, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(TOKENS, K, device="cuda", dtype=torch.bfloat16)
    return x, w, b


def test_eager_linears_run_their_triton_rows(tmp_path, weights):
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt

    x, w, b = weights
    chosen = _rows(tmp_path / "r.csv", [_linear(False), _linear(True)])
    want_plain, want_bias = F.linear(x, w), F.linear(x, w, b)
    rt.install(tmp_path / "r.csv")
    try:
        plain, biased = F.linear(x, w), F.linear(x, w, b)
        torch.cuda.synchronize()
        status = rt.installed().status()
    finally:
        rt.uninstall()
    assert _close(plain, want_plain) and _close(biased, want_bias)
    called = {k.split(" ", 1)[0]: n for k, n in status["tuned_calls"].items()}
    assert called == {name: 1 for name in chosen.values()}, status
    assert status["fallbacks"] == {} and status["rows_rejected"] == {}


def test_install_compiles_every_triton_row_so_that_no_call_meets_the_jit(tmp_path, weights, monkeypatch):
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt
    from pipeline.kernels import triton_kernels

    x, w, b = weights
    batched = GemmProblem("gemm_strided_batched", "T", "N", 256, TOKENS, K, K, K, 256, batch=3)
    chosen = _rows(tmp_path / "r.csv", [_linear(False), _linear(True), batched])
    xb = torch.randn(3, TOKENS, K, device="cuda", dtype=torch.bfloat16)
    wb = torch.randn(3, 256, K, device="cuda", dtype=torch.bfloat16) / K**0.5
    want = [F.linear(x, w), F.linear(x, w, b), torch.bmm(xb, wb.transpose(1, 2))]
    # the frame a plan is prepared for is the one the router hands it
    assert tr.Frame.of_problem(_linear(False)) == tr.Frame.of_call(x, w.t(), want[0])
    assert tr.Frame.of_problem(batched) == tr.Frame.of_call(xb, wb.transpose(1, 2), want[2])
    jit_runs = []
    runtime = rt.install(tmp_path / "r.csv")
    try:
        built = {plan.name for plan in runtime.router._built.values()}
        for kernel in (triton_kernels.gemm, triton_kernels.reduce):  # JITFunction.run: every call through the JIT
            monkeypatch.setattr(kernel, "run", lambda *a, _run=kernel.run, **k: jit_runs.append(1) or _run(*a, **k))
        got = [F.linear(x, w), F.linear(x, w, b), torch.bmm(xb, wb.transpose(1, 2))]
        torch.cuda.synchronize()
        status = runtime.status()
    finally:
        rt.uninstall()
    assert built == set(chosen.values()), "install built every Triton row's plan before any call"
    assert status["startup"]["plan_build_s"] > 0
    assert jit_runs == [], "a call went through Triton's JIT"
    assert all(_close(have, expected) for have, expected in zip(got, want, strict=True))
    assert sorted(k.split(" ", 1)[0] for k in status["tuned_calls"]) == sorted(chosen.values()), status


@pytest.mark.parametrize(
    "family, top, lo, counts",
    [
        ("tiled", 32, 17, (17, 20, 31, 32)),
        ("swapped_range", 8, 1, (1, 3, 7, 8)),  # a swapped winner's twin: one token compiles apart (a constant)
        ("swapped_range", 16, 9, (9, 12, 15, 16)),  # 16 divides by 16: the grid point's own kernel
    ],
)
def test_a_range_row_serves_unseen_token_counts_with_kernels_compiled_at_install(
    tmp_path, weights, family, top, lo, counts
):
    """A Triton winner at a grid point serving its range (the manifest's ``m_ranges``, docs/serving.md): a tiled
    config, and the swapped tile's twin that takes the token count (``triton_gemm.ranged_twin``); calls at counts
    nobody tuned run its kernel at their own size, right against an fp32 reference, and compile nothing
    (install built the range's other frames, ``TunedTable.triton_builds``)."""
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt
    from pipeline.formats.tunableop import format_key

    w = weights[1]
    grid = GemmProblem("gemm", "T", "N", N_OUT, top, K, K, K, N_OUT)
    if family == "tiled":
        name = _rows(tmp_path / "tunableop_results.csv", [grid])[grid]
    else:
        name = tg.TritonConfig(16, 64, 256, 1, 1, 4, 4, family=family).name
        versions = {"PT_VERSION": torch.__version__.split("+")[0]}
        write_file(tmp_path / "tunableop_results.csv", versions, [TunableOpEntry.from_problem(grid, name, 0.01)])
    assert tg.serves_range(name, lo, top), name
    key = ",".join(format_key(grid))
    (tmp_path / "manifest.json").write_text(
        json.dumps({"m_ranges": [{"key": key, "solution": name, "lo": lo, "hi": top}]})
    )
    runtime = rt.install(tmp_path)
    try:
        cache = next(iter(runtime.router.executor.kernel_caches.values()))
        compiled = sorted(p.name for p in cache.rglob("*") if p.is_file())
        xs = {m: torch.randn(m, K, device="cuda", dtype=torch.bfloat16) for m in counts}
        got = {m: F.linear(x, w) for m, x in xs.items()}
        torch.cuda.synchronize()
        status = runtime.status()
        after = sorted(p.name for p in cache.rglob("*") if p.is_file())
    finally:
        rt.uninstall()
    for m, x in xs.items():
        want = x.float() @ w.float().t()
        assert _close(got[m], want), m
    called = {k.split(" ", 1)[0] for k in status["tuned_calls"]}
    assert called == {name} and sum(status["tuned_calls"].values()) == 4 and status["fallbacks"] == {}, status
    assert after == compiled, "a call inside the range compiled a kernel install had not"


def test_a_packages_kernels_load_in_a_fresh_process_without_compiling(tmp_path):
    """What a package ships (``triton_cache.seed`` of the runtime's cache, paths rewritten) is what a fresh
    process of an image loads: its own cache seeded from the package, nothing compiled or written again."""
    import hashlib
    import os
    import shutil
    import subprocess
    import sys

    from pipeline.kernels import triton_cache as tc
    from pipeline.runtime.table import KERNELS

    package = tmp_path / "package"
    package.mkdir()
    rows = package / "runtime_results.csv"
    chosen = _rows(rows, [_linear(False), _linear(True)])
    install = (
        "import sys, pipeline.runtime as rt\nrt.install(sys.argv[1])\n"  # a process of its own: no kernel in memory
    )
    env = {**os.environ, "GEMM_TUNE_CACHE": str(tmp_path / "validated")}
    subprocess.run([sys.executable, "-c", install, str(rows)], check=True, env=env)  # as Validate's e2e compiles
    (compiled,) = (tmp_path / "validated").glob("triton-*")
    key = json.loads((compiled / "key.json").read_text())
    assert tc.seed(compiled, tc.cache_dir(package / KERNELS, key)) >= 2  # the package step's copy
    shutil.rmtree(tmp_path / "validated")  # what the package holds must stand alone
    files = {p.relative_to(package).as_posix(): p for p in package.rglob("*") if p.is_file()}
    digests = {name: hashlib.sha256(p.read_bytes()).hexdigest() for name, p in files.items()}
    (package / "manifest.json").write_text(json.dumps({"files": digests}))  # as the package's manifest lists them
    load = (  # a fresh process, as an image's first: every file Triton writes to a cache is recorded
        "import json, sys\nfrom triton.runtime import cache\nputs = []\nput = cache.FileCacheManager.put\n"
        "cache.FileCacheManager.put = lambda self, d, name, b=True: puts.append(name) or put(self, d, name, b)\n"
        "import pipeline.runtime as rt\nruntime = rt.install(sys.argv[1])\n"
        "built = sorted(p.name for p in runtime.router._built.values())\n"
        "print(json.dumps({'rejected': runtime.status()['rows_rejected'], 'built': built, 'puts': puts}))\n"
    )
    env = {**os.environ, "GEMM_TUNE_CACHE": str(tmp_path / "image-user")}
    proc = subprocess.run([sys.executable, "-c", load, str(rows)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rejected"] == {} and result["built"] == sorted(chosen.values())
    # Triton's own driver module (cuda_utils) is built once per process wherever Triton first ran: not a kernel
    assert [name for name in result["puts"] if not name.startswith("cuda_utils")] == [], result["puts"]


def test_a_captured_graph_replays_the_triton_kernel(tmp_path, weights):
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt

    x, w, b = weights
    _rows(tmp_path / "r.csv", [_linear(True)])
    runtime = rt.install(tmp_path / "r.csv")
    try:
        static = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            F.linear(static, w, b)  # warm-up: compiles outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = F.linear(static, w, b)
        static.copy_(x * 2)
        graph.replay()
        torch.cuda.synchronize()
        calls = sum(runtime.status()["tuned_calls"].values())
    finally:
        rt.uninstall()
    assert calls == 2 and _close(out, F.linear(x * 2, w, b))


def test_a_compiled_linear_reaches_its_triton_row(tmp_path, weights):
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt

    x, w, b = weights
    _rows(tmp_path / "r.csv", [_linear(False), _linear(True)])
    want = F.linear(x, w, b).relu()
    torch._dynamo.reset()
    rt.install(tmp_path / "r.csv")
    try:
        f = torch.compile(lambda t: F.linear(t, w, b).relu())
        got = [f(x) for _ in range(2)][-1]
        torch.cuda.synchronize()
        status = rt.installed().status()
    finally:
        rt.uninstall()
        torch._dynamo.reset()
    assert _close(got, want)
    assert any(k.startswith("triton_") for k in status["tuned_calls"]), status


def test_rows_of_another_kernel_source_and_an_unfused_addmm_fall_back_with_the_reason(tmp_path, weights):
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt

    x, w, _ = weights
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    _rows(bundle / "tunableop_results.csv", [_linear(False)])
    manifest = {"runtime": {"triton": {"triton": "0.0", "source": "0" * 16}}}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    rt.install(bundle, any_device=True)
    try:
        stale = F.linear(x, w)
        status = rt.installed().status()
    finally:
        rt.uninstall()
    assert _close(stale, x @ w.T)
    (reason,) = status["rows_rejected"].values()
    assert "StaleTriton" in reason and "tuned with Triton 0.0" in reason
    assert status["tuned_calls"] == {}

    _rows(tmp_path / "r.csv", [_linear(False)])
    full_bias = torch.randn(TOKENS, N_OUT, device="cuda", dtype=torch.bfloat16)
    rt.install(tmp_path / "r.csv")
    try:
        got = torch.addmm(full_bias, x, w.T)  # a 2-D bias: torch's unfused form, copied then accumulated
        status = rt.installed().status()
    finally:
        rt.uninstall()
    assert _close(got, full_bias + x @ w.T)
    assert any("a Triton row takes a vector bias" in r for r in status["fallbacks"]), status


def test_a_tensorwise_fp8_linear_runs_its_triton_row(tmp_path):
    import torch

    import pipeline.runtime as rt
    from pipeline.workloads.llama import FP8Linear

    linear = torch.nn.Linear(K, N_OUT, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = FP8Linear(linear, torch.float8_e4m3fn)
    x = torch.randn(TOKENS, K, device="cuda", dtype=torch.bfloat16)
    problems = [p for p in recorded_scaled_calls(tmp_path, layer, x) if tg.serves(p) is None]
    assert problems, "the recorded tensorwise call is one the kernels serve"
    _rows(tmp_path / "r.csv", problems)
    want = layer(x)
    rt.install(tmp_path / "r.csv")
    try:
        got = layer(x)
        torch.cuda.synchronize()
        status = rt.installed().status()
    finally:
        rt.uninstall()
    assert float((got.float() - want.float()).norm() / want.float().norm()) < 2e-2
    assert any(k.startswith("triton_") for k in status["tuned_calls"]), status

"""GPU tests of pipeline.runtime (run on the device machine: pytest -m gpu): torch's calls routed through
tuned cuBLASLt algorithms give torch's results, keys match what torch's TunableOp records, CUDA graphs, the
CLI in-process and through a child process, and graph decode of the embedded workload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.formats.tunableop import TunableOpEntry, format_key, read_file, write_file
from pipeline.problem import GemmProblem
from pipeline.runtime.table import runtime_key
from pipeline.stages.gather.compiled import padded_twin

from .helpers import nvmath_gpu_marks, source_module

pytestmark = [*nvmath_gpu_marks("the runtime"), pytest.mark.gpu_untimed]  # routing and numerics, no timings

CALLS = '''
import torch
import torch.nn.functional as F

def calls():
    """(name, thunk) for each GEMM call the tests route; fixed seeds, so every process makes the same ones."""
    g = torch.Generator("cuda").manual_seed(0)
    r = lambda *s, dtype=torch.bfloat16: torch.randn(*s, device="cuda", generator=g).to(dtype)
    w1, w2, b2, w3 = r(6144, 4096), r(11008, 4096), r(11008), r(3072, 1024)
    x1, x2, x3, qkv = r(1, 4096), r(64, 4096), r(2, 32, 1024), r(48, 3072)
    ba, bb = r(8, 128, 64), r(8, 64, 128)
    ha, hb = r(256, 512, dtype=torch.float16), r(512, 1024, dtype=torch.float16)
    fx, fw = r(128, 512, dtype=torch.float32), r(1024, 512, dtype=torch.float32)
    x5, b3, x6, w6, b6 = r(1, 1024), r(3072), r(32, 512), r(2048, 512), r(2048)
    x7, w7, b7 = r(128, 768), r(1536, 768), r(1536)
    return [
        ("decode M=1 linear", lambda: F.linear(x1, w1)),
        ("linear with bias (addmm)", lambda: F.linear(x2, w2, b2)),
        ("3-D linear (mm on the folded input)", lambda: F.linear(x3, w3)),
        ("bmm", lambda: torch.bmm(ba, bb)),
        ("fp16 NN mm", lambda: torch.mm(ha, hb)),
        ("fp32 linear", lambda: F.linear(fx, fw)),
        ("q slice of a fused qkv (ld 3072)", lambda: F.linear(qkv[:, :1024], w3)),
        ("decode linear with bias (torch: a Gemm onto the copied bias)", lambda: F.linear(x5, w3, b3)),
        ("addmm with an expanded 2-D bias", lambda: torch.addmm(b6.expand(32, 2048), x6, w6.t())),
        ("compiled linear with bias (Inductor's extern addmm, out=)", lambda: COMPILED(x7, w7, b7)),
    ]


COMPILED = torch.compile(lambda x, w, b: F.linear(x, w, b))
'''


CALLS_NAMES = [line.split('("', 1)[1].split('"', 1)[0] for line in CALLS.splitlines() if line.startswith('        ("')]


def _calls_module(tmp_path: Path):
    return source_module(tmp_path, "gemm_calls", CALLS)


def _recorded_keys(tmp_path: Path) -> list[GemmProblem]:
    """The keys torch's TunableOp records for CALLS (a separate process, recording on)."""
    script = tmp_path / "record.py"
    script.write_text(CALLS + "\nfor _, call in calls():\n    call()\ntorch.cuda.synchronize()\n")
    env = {
        **os.environ,
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_TUNING": "0",
        "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "1",
        "PYTORCH_TUNABLEOP_UNTUNED_FILENAME": str(tmp_path / "untuned.csv"),
    }
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=300)
    return [e.problem for e in read_file(tmp_path / "untuned0.csv").entries]


def _tuned_rows(problems: list[GemmProblem], path: Path) -> Path:
    """A results file that gives each problem a cuBLASLt algorithm other than the heuristic's first."""
    import torch

    from pipeline.kernels.cublaslt_algo import read_config
    from pipeline.kernels.lt_gemm import LtGemm, lt

    handle, workspace = lt.create(), torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    entries = []
    for problem in problems:
        gemm = LtGemm(problem, handle, workspace)
        records = gemm.heuristic(8)
        gemm.close()
        assert records, f"no cuBLASLt algorithm for {problem}"
        entries.append(TunableOpEntry.from_problem(problem, read_config(records[-1])["SolutionNameMin"], 0.01))
    write_file(path, {"PT_VERSION": torch.__version__.split("+")[0]}, entries)
    return path


def test_torchs_launcher_leaves_the_tf32_setting_as_it_found_it():
    import torch

    from pipeline.kernels.torch_gemm import allocate, torch_launcher

    problem = GemmProblem(
        "gemm",
        "N",
        "N",
        64,
        64,
        64,
        64,
        64,
        64,
        a_type="float32",
        b_type="float32",
        c_type="float32",
        compute_type="tf32",
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch_launcher(problem)(allocate(problem, 1, torch.device("cuda"))[0])
    assert torch.backends.cuda.matmul.allow_tf32 is False


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("runtime")
    recorded = _recorded_keys(tmp_path)
    return tmp_path, _tuned_rows(recorded, tmp_path / "tunableop_results.csv"), recorded


@pytest.mark.long
def test_keys_are_the_ones_torch_records(tuned):
    """frame.gemm_key mirrors torch: every routed call finds the key TunableOp recorded for it."""
    tmp_path, csv, recorded = tuned
    import pipeline.runtime as rt

    module = _calls_module(tmp_path)
    runtime = rt.install(csv)
    outcomes = {}
    try:
        for name, call in module.calls():
            before = runtime.status()
            call()
            after = runtime.status()
            tuned = {k: v - before["tuned_calls"].get(k, 0) for k, v in after["tuned_calls"].items()}
            fell = {k: v - before["fallbacks"].get(k, 0) for k, v in after["fallbacks"].items()}
            outcomes[name] = ([k for k, v in tuned.items() if v], [k for k, v in fell.items() if v])
        status = runtime.status()
    finally:
        rt.uninstall()
    report = "\n".join(f"{name}: tuned {t} fell back {f}" for name, (t, f) in outcomes.items())
    report += "\nrecorded: " + "; ".join(" ".join(map(str, runtime_key(p))) for p in recorded)
    assert len({runtime_key(p) for p in recorded}) == len(module.calls()), report
    assert all(len(t) == 1 and not f for t, f in outcomes.values()), report
    assert status["fallbacks"] == {} and status["rows_rejected"] == {}, report


def test_the_host_cost_child_times_a_call_without_a_row_on_the_gpu(tuned):
    """``python -m pipeline.runtime.hostcost`` as Validate runs it: every timed call of the runtime's arm falls
    back for want of a row, none of torch's arm passes the runtime, and the record says what it timed."""
    tmp_path, csv, _ = tuned
    out = tmp_path / "hostcost.json"
    argv = [sys.executable, "-m", "pipeline.runtime.hostcost", "--bundle", str(csv), "--out", str(out)]
    proc = subprocess.run([*argv, "--rounds", "2", "--calls", "200"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["call"].startswith("F.linear x[8,") and "mm" in record["routed_ops"]
    assert record["fallbacks"] == {"no tuned row": 3 * 200} and record["tuned_calls"] == 0
    assert len(record["samples_us"]["torch"]) == 2 and record["torch_us"] > 0
    assert "gemm-tune runtime host cost: " in proc.stderr and " us a call over torch" in proc.stderr


def test_routed_calls_equal_torchs_within_the_dtype_tolerance(tuned):
    import torch

    import pipeline.runtime as rt
    from pipeline.backends.measure import TOLERANCES

    tmp_path, csv, _ = tuned
    module = _calls_module(tmp_path)
    expected = [(name, call()) for name, call in module.calls()]
    rt.install(csv)
    try:
        got = [call() for _, call in module.calls()]
    finally:
        rt.uninstall()
    for (name, want), out in zip(expected, got, strict=True):
        assert out.shape == want.shape and out.dtype == want.dtype and out.is_contiguous(), name
        error = float(torch.linalg.vector_norm((out - want).double()) / torch.linalg.vector_norm(want.double()))
        dtype = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[want.dtype]
        assert error <= TOLERANCES[(dtype, "float32")], f"{name}: relative error {error:.3g}"


def test_settings_the_rows_were_not_tuned_under_fall_back(tuned):
    import torch

    import pipeline.runtime as rt

    tmp_path, csv, _ = tuned
    calls = dict(_calls_module(tmp_path).calls())
    runtime = rt.install(csv)
    try:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        try:
            calls["decode M=1 linear"]()
        finally:
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            calls["fp32 linear"]()  # a tf32 key: the row is 'float'
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
        status = runtime.status()
    finally:
        rt.uninstall()
    assert sum(status["tuned_calls"].values()) == 0
    assert status["fallbacks"] == {"bf16 reduced-precision reduction off": 1, "no tuned row": 1}


@pytest.mark.parametrize("graphs_only", [False, True], ids=["every-call", "graphs-only"])
def test_cuda_graph_capture_replays_the_tuned_algorithm(tuned, graphs_only):
    """The captured call runs the tuned plan and its replays pass no Python; under ``graphs_only`` the eager
    warm-up before the capture never meets the runtime."""
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt

    _tmp_path, csv, _ = tuned
    x, w = torch.randn(1, 4096, device="cuda").bfloat16(), torch.randn(6144, 4096, device="cuda").bfloat16()
    runtime = rt.install(csv, graphs_only=graphs_only)
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            F.linear(x, w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = F.linear(x, w)
        calls_after_capture = sum(runtime.status()["tuned_calls"].values())
        results = []
        for _ in range(2):
            x.normal_()
            graph.replay()
            results.append((x.clone(), out.clone()))
        expected = 1 if graphs_only else 2  # replays: no host call
        assert sum(runtime.status()["tuned_calls"].values()) == calls_after_capture == expected
        assert runtime.router._lib is None if graphs_only else runtime.router._lib is not None
    finally:
        rt.uninstall()
    for xi, got in results:
        want = F.linear(xi, w)
        assert float((got.float() - want.float()).norm() / want.float().norm()) < 1e-2


@pytest.mark.parametrize("graphs_only", [False, True], ids=["every-call", "graphs-only"])
def test_compiled_code_under_cuda_graphs_reaches_the_tuned_plans(tuned, graphs_only):
    """torch.compile's reduce-overhead mode (Inductor's extern addmm.out, captured in a CUDA graph tree), also
    where the runtime routes only inside captures (the graph tree's eager warm-up goes to torch)."""
    import torch
    import torch.nn.functional as F

    import pipeline.runtime as rt

    _tmp_path, csv, _ = tuned
    g = torch.Generator("cuda").manual_seed(5)
    x, w, b = (torch.randn(*s, device="cuda", generator=g).bfloat16() for s in ((128, 768), (1536, 768), (1536,)))
    want = F.linear(x, w, b)
    runtime = rt.install(csv, graphs_only=graphs_only)
    try:
        torch._dynamo.reset()  # each parametrisation compiles and captures its own graph
        graphed = torch.compile(lambda x: F.linear(x, w, b), mode="reduce-overhead")
        outs = [graphed(x).clone() for _ in range(4)]
        status = runtime.status()
    finally:
        rt.uninstall()
    assert sum(status["tuned_calls"].values()) >= 1 and status["fallbacks"] == {}, status
    for out in outs:
        assert float((out.float() - want.float()).norm() / want.float().norm()) < 1e-2


def test_cli_in_process_and_in_child_processes(tuned):
    tmp_path, csv, _ = tuned
    script = tmp_path / "workload.py"
    script.write_text(CALLS + "\nfor _, call in calls():\n    call()\ntorch.cuda.synchronize()\nprint('done')\n")
    commands = {"in-process": [str(script)], "child": ["bash", "-c", f"{sys.executable} {script}"]}
    procs = {  # side by side: each start-up (torch, CUDA, the plans) is most of its time
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline.runtime",
                "--bundle",
                str(csv),
                "--status-file",
                str(tmp_path / f"status-{name}.json"),
                "--",
                *command,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, command in commands.items()
    }
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0 and out.strip() == "done", err
            assert "calls ran a tuned algorithm" in err
            record = json.loads((tmp_path / f"status-{name}.json").read_text())
            assert sum(record["tuned_calls"].values()) == len(CALLS_NAMES), (name, record)
    finally:
        for proc in procs.values():
            proc.kill()


def test_graph_decode_makes_the_same_tokens_as_eager_decode():
    import torch

    from pipeline.workloads import llama

    cfg = llama.LlamaConfig(hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1000, layers=2)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = llama.Llama(cfg).float().eval()
    runs = {}
    with torch.inference_mode():
        for mode in ("eager", "graph"):
            runs[mode] = llama.generate(model, 2, 12, 6, torch.Generator("cuda").manual_seed(1), mode)["tokens"]
    assert torch.equal(runs["eager"], runs["graph"])


MODEL = '''
import torch
from pipeline.workloads import llama


def model_and_tokens():
    """A small decoder (the embedded workload's model) and a prefill batch; fixed seeds."""
    torch.manual_seed(0)
    cfg = llama.LlamaConfig(hidden=512, heads=8, kv_heads=4, intermediate=1536, vocab=2048, layers=2)
    with torch.device("cuda"):
        model = llama.Llama(cfg).to(torch.bfloat16).eval()
    g = torch.Generator("cuda").manual_seed(1)
    return model, torch.randint(0, cfg.vocab, (4, 32), device="cuda", generator=g)


def compiled(model, mode):
    def forward(tokens):
        return model(tokens, model.new_cache(tokens.shape[0], tokens.shape[1]), 0)
    return torch.compile(forward, mode=mode)


def autotune_configs():
    """Max-autotune times the extern GEMM beside two of Inductor's GEMM templates, not beside its twenty-odd:
    the calls it makes to the library are the same, its compile a fraction (torch's own test knob)."""
    return torch._inductor.config.patch({"test_configs.max_mm_configs": 2})
'''
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def _record_compiled(tmp_path_factory, modes: tuple[str, ...]):
    """Per compile mode of ``modes``, the keys torch's TunableOp records for the whole compiled model (one
    recording process each, run side by side), and a results file giving each a non-default cuBLASLt
    algorithm."""
    tmp_path = tmp_path_factory.mktemp("compiled")
    procs = {}
    for mode in modes:
        script = tmp_path / f"record_{mode}.py"
        script.write_text(
            MODEL + f"\nmodel, tokens = model_and_tokens()\nf = compiled(model, {mode!r})\n"
            "with torch.inference_mode(), autotune_configs():\n    for _ in range(3):\n        f(tokens)\n"
            "torch.cuda.synchronize()\n"
        )
        env = {
            **os.environ,
            "PYTORCH_TUNABLEOP_ENABLED": "1",
            "PYTORCH_TUNABLEOP_TUNING": "0",
            "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "1",
            "PYTORCH_TUNABLEOP_UNTUNED_FILENAME": str(tmp_path / f"untuned_{mode}.csv"),
            # a cold Inductor cache: a warm one (an earlier run's) skips max-autotune's benchmarks, whose extern
            # GEMMs are what TunableOp records of that mode
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor_{mode}"),
        }
        procs[mode] = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path)
    assert all(p.wait(timeout=600) == 0 for p in procs.values())
    recorded = {mode: [e.problem for e in read_file(tmp_path / f"untuned_{mode}0.csv").entries] for mode in modes}
    every = list({runtime_key(p): p for ps in recorded.values() for p in ps}.values())
    return tmp_path, _tuned_rows(every, tmp_path / "tuned.csv"), recorded


@pytest.fixture(scope="module")
def plain_compiled_rows(tmp_path_factory):
    return _record_compiled(tmp_path_factory, COMPILE_MODES[:2])


@pytest.fixture(scope="module")
def autotuned_compiled_rows(tmp_path_factory):
    return _record_compiled(tmp_path_factory, COMPILE_MODES[2:])


@pytest.mark.long
@pytest.mark.parametrize(  # max-autotune in a process of its own, beside the other two (its compile is the longest)
    "mode",
    [
        pytest.param(mode, marks=pytest.mark.xdist_group("runtime-compiled" + "-autotune" * (mode == COMPILE_MODES[2])))
        for mode in COMPILE_MODES
    ],
)
def test_a_whole_compiled_model_runs_every_tuned_plan(request, mode):
    """Issue 26 items 1-2: the whole model compiled in ``mode``; the keys the runtime looks up are exactly the
    ones TunableOp recorded under the same compile, every call with a tuned row ran its plan (no fallback of
    any reason), and the logits equal torch's within bf16 tolerance."""
    import torch

    import pipeline.runtime as rt

    autotuned = mode.startswith("max-autotune")  # its logits are not compared (below): no reference compile
    rows = "autotuned_compiled_rows" if autotuned else "plain_compiled_rows"
    tmp_path, csv, recorded = request.getfixturevalue(rows)
    module = source_module(tmp_path, f"compiled_model_{mode.replace('-', '_')}", MODEL)
    model, tokens = module.model_and_tokens()
    with torch.inference_mode(), module.autotune_configs():
        if not autotuned:
            torch._dynamo.reset()
            f = module.compiled(model, mode)
            want = [f(tokens).float() for _ in range(3)][-1]
        runtime = rt.install(csv)
        try:
            torch._dynamo.reset()
            f = module.compiled(model, mode)
            got = [f(tokens).float() for _ in range(3)]
            torch.cuda.synchronize()
            status = runtime.status()
        finally:
            rt.uninstall()
            torch._dynamo.reset()
    looked_up = {k.split(" ", 1)[1] for k in status["tuned_calls"]}
    by_key = {",".join(format_key(p)): p for p in recorded[mode]}
    assert recorded[mode], f"TunableOp recorded no GEMM of the model compiled in {mode}"
    assert looked_up <= set(by_key), (mode, looked_up - set(by_key))
    assert status["fallbacks"] == {} and status["rows_rejected"] == {}, status
    unused = [p for k, p in by_key.items() if k not in looked_up]
    if autotuned:
        # autotuning times the extern GEMM of a shape beside Inductor's Triton templates; a shape a template won
        # never reaches the library again (on this small model, often none does)
        return
    assert looked_up, f"no GEMM of the model compiled in {mode} reached the library"
    served = [by_key[k] for k in looked_up]
    for p in unused:  # only Inductor's pad_mm benchmark at compile time: the other of a served GEMM's two shapes
        # (which one runs is pad_mm's timing: the padded twin, or the original when padding won)
        assert any(padded_twin(p, q) or padded_twin(q, p) for q in served), (mode, p, "recorded but never looked up")
    for out in got:
        assert float((out - want).norm() / want.norm()) < 2e-2, mode

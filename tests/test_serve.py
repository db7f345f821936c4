"""The serving workload (``python -m pipeline.workloads.serve``): its schedule (continuous batching, chunked
prefill, decode batches padded to capture sizes) and its engine, whose tokens must be the model's own greedy
tokens (HF ``generate``) however the requests were chunked, batched and padded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.workloads import engine as engine_module
from pipeline.workloads import serve

from .helpers import ROOT


def test_steps_pad_up_to_the_capture_sizes():
    assert [engine_module.padded_size(b) for b in (1, 2, 3, 5, 8, 9, 250, 257, 512)] == [
        1,
        2,
        4,
        8,
        8,
        16,
        256,
        272,
        512,
    ]


def test_the_engine_captures_the_sizes_the_grid_tunes():
    """The workload stands alone (it imports nothing of the stages), so it spells vLLM's capture sizes itself:
    the same the M grid tunes and the bundle serves (``mgrid.CAPTURE_SIZES``)."""
    from pipeline.stages.gather import mgrid

    assert engine_module.CAPTURE_SIZES == mgrid.CAPTURE_SIZES


def test_the_schedule_decodes_every_prefilled_request_and_chunks_prompts_first_come_first_served():
    a, b, c = engine_module.Request([1] * 10, 3), engine_module.Request([1] * 7, 2), engine_module.Request([1] * 4, 2)
    a.prefilled, a.generated = 10, [5]
    b.prefilled = 2
    step = serve.schedule([a, b, c], budget=8)
    assert step.decodes == (a,)
    assert [(r, start, n) for r, start, n in step.chunks] == [(b, 2, 5), (c, 0, 3)]
    assert step.prefill_tokens == 8


def test_requests_are_drawn_from_the_seed():
    one = serve.draw_requests(3, 20, (4, 64), (2, 9), 1000)
    assert [(r.ids, r.output) for r in one] == [
        (r.ids, r.output) for r in serve.draw_requests(3, 20, (4, 64), (2, 9), 1000)
    ]
    assert [r.ids for r in one] != [r.ids for r in serve.draw_requests(4, 20, (4, 64), (2, 9), 1000)]
    assert all(4 <= r.prompt <= 64 and 2 <= r.output <= 9 and all(0 < t < 1000 for t in r.ids) for r in one)


def _tiny_model(torch, transformers, family: str):
    """A two-layer decoder of HF's ``family`` (``Llama``, ``Qwen2``) with GQA, seeded: (model, config)."""
    config = getattr(transformers, f"{family}Config")(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=97,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return getattr(transformers, f"{family}ForCausalLM")(config).eval(), config


@pytest.mark.parametrize("fp8", [False, True], ids=["llama", "qwen2-fp8"])
def test_served_tokens_are_the_models_own_greedy_tokens(fp8):
    torch = pytest.importorskip("torch", reason="the engine needs torch")
    transformers = pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    model, config = _tiny_model(torch, transformers, "Qwen2" if fp8 else "Llama")
    if fp8:  # Qwen2's q/k/v carry a bias: FP8Linear adds it in the scaled product's epilogue
        assert model.model.layers[0].self_attn.q_proj.bias is not None
        serve.to_fp8(model)
        assert type(model.model.layers[0].mlp.down_proj).__name__ == "FP8Linear"
    requests = serve.draw_requests(1, 5, (3, 20), (2, 7), config.vocab_size)
    with torch.inference_mode():
        # FP8 scales each call's activations as a whole, so a request's tokens depend on its batch-mates: it is
        # served alone there (one slot, whole prompts), chunked and batched in 16-bit
        slots, budget = (1, 32) if fp8 else (3, 8)
        engine = engine_module.Engine(model, config, max_seqs=slots, max_len=32)
        result = serve.serve(engine, requests, max_seqs=slots, budget=budget, sync=lambda: None)
        for request in requests:
            ids = torch.tensor([request.ids])
            want = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=request.output,
                min_new_tokens=request.output,  # a server stops at the output length, not at an end token
                do_sample=False,
                pad_token_id=0,
            )[0, request.prompt :].tolist()
            assert request.generated == want
    steps = result["steps"]
    assert sum(step["tokens"] for step in steps) == sum(r.output for r in requests)
    summary = serve.summary(steps)
    assert summary["steps"] == len(steps) and summary["p99_ms"] >= summary["p50_ms"] > 0
    assert summary["tokens_per_s"] == pytest.approx(summary["tokens"] / sum(step["s"] for step in steps))
    saturated = [step for step in steps if step["saturated"]]  # 5 requests, fewer slots: the first steps wait
    assert 0 < len(saturated) == summary["saturated_steps"] < len(steps)
    assert sum(step["prefill_tokens"] for step in steps) == sum(r.prompt for r in requests)
    assert sum(step["decodes"] for step in steps) == sum(r.output - 1 for r in requests)  # the first: prefill's
    decode_only = [step for step in steps if step["decode_only"]]  # the steps after the last prompt's chunks
    assert 0 < len(decode_only) == summary["decode_steps"] < len(steps)
    rate = sum(step["tokens"] for step in decode_only) / sum(step["s"] for step in decode_only)
    assert summary["decode_tokens_per_s"] == pytest.approx(rate)


def test_compiled_layers_serve_the_models_own_tokens(monkeypatch):
    """``--compile``: the layers of both passes through Dynamo (the eager pass's for any token count), their cache
    writes (slot and position indexed) kept. On the CPU through ``aot_eager`` (Inductor's C++ build takes a minute
    and a half here); Inductor itself in the GPU test."""
    torch = pytest.importorskip("torch", reason="the engine needs torch")
    transformers = pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    compile_ = torch.compile
    compiled = []
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kw: compiled.append(kw) or compile_(fn, backend="aot_eager", **kw)
    )
    served = [_served_tokens(torch, transformers, "cpu", on) for on in (False, True)]
    assert served[0] == served[1] and any(served[0])
    assert compiled == [{}, {"dynamic": True}], "the captured pass's layer, then the eager pass's for any count"


def _served_tokens(torch, transformers, device: str, compiled: bool, graphs: bool = False) -> list[list[int]]:
    model, config = _tiny_model(torch, transformers, "Llama")
    model = model.to(device)
    requests = serve.draw_requests(1, 5, (3, 20), (2, 7), config.vocab_size)
    with torch.inference_mode():
        engine = engine_module.Engine(model, config, max_seqs=3, max_len=32, compiled=compiled)
        if graphs:
            engine.capture([1, 2, 4, 8])  # steps of up to 8 tokens (prefill and decode mixed) as graphs, the rest eager
        serve.serve(engine, requests, max_seqs=3, budget=8, sync=lambda: None)
    return [request.generated for request in requests]


class _Replay:
    """A CUDA graph's double on the CPU: ``replay`` runs the engine's pass of fixed shapes on the graph's rows into
    its output, as a replay recomputes what was captured; it counts the replays that padded their rows and those
    that held a prompt chunk (a slot on several rows)."""

    def __init__(self, engine, rows, out):
        self.engine, self.rows, self.out = engine, rows, out
        self.padded = self.chunked = 0

    def replay(self):
        self.out.copy_(self.engine._by_slot(*self.rows))
        slots = self.rows[1].tolist()
        real = [slot for slot in slots if slot != self.engine.scratch]
        self.padded += len(real) < len(slots)
        self.chunked += len(set(real)) < len(real)


def test_steps_padded_to_a_capture_size_serve_the_eager_passs_tokens():
    """A step of a captured size runs the pass of fixed shapes, padded (the padding rows write the scratch
    slot), prompt chunks and decodes in one batch; its tokens are the eager pass's."""
    torch = pytest.importorskip("torch", reason="the engine needs torch")
    transformers = pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    eager = _served_tokens(torch, transformers, "cpu", False)
    model, config = _tiny_model(torch, transformers, "Llama")
    requests = serve.draw_requests(1, 5, (3, 20), (2, 7), config.vocab_size)
    with torch.inference_mode():
        engine = engine_module.Engine(model, config, max_seqs=3, max_len=32)
        for size in (1, 2, 4, 8):
            rows = torch.tensor([[1] * size, [engine.scratch] * size, [0] * size])
            out = torch.zeros(size, config.hidden_size)
            engine.graphs[size] = (_Replay(engine, rows, out), rows, out)
        serve.serve(engine, requests, max_seqs=3, budget=8, sync=lambda: None)
    assert [request.generated for request in requests] == eager
    replays = [graph for graph, _, _ in engine.graphs.values()]
    assert sum(r.padded for r in replays) > 0 and sum(r.chunked for r in replays) > 0


@pytest.mark.gpu
def test_compiled_and_captured_steps_serve_the_eager_passs_tokens():
    torch = pytest.importorskip("torch", reason="the engine needs torch")
    transformers = pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    if not torch.cuda.is_available():
        pytest.skip("Inductor's GPU kernels and CUDA graphs need a CUDA GPU")
    eager = _served_tokens(torch, transformers, "cuda", False)
    assert _served_tokens(torch, transformers, "cuda", True, graphs=True) == eager


def test_the_command_writes_every_timed_passs_steps(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch", reason="the engine needs torch")
    transformers = pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    monkeypatch.setattr(serve, "build", lambda *args: _tiny_model(torch, transformers, "Llama"))
    out = tmp_path / "steps.json"
    argv = ["--device", "cpu", "--requests", "3", "--prompt-min", "4", "--prompt-max", "9", "--output-max", "17"]
    assert (
        serve.main([*argv, "--max-seqs", "2", "--max-batched-tokens", "8", "--repeat", "2", "--steps-out", str(out)])
        == 0
    )
    written = json.loads(out.read_text())
    assert len(written["passes"]) == 2 and written["passes"][0] == [
        {**step, "s": pytest.approx(step["s"], abs=1)} for step in written["passes"][1]
    ], "the same schedule each pass"
    made = [sum(step["tokens"] for step in steps) for steps in written["passes"]]
    printed = capsys.readouterr().out
    assert made[0] == made[1] > 3 and f"{made[0]} tokens" in printed and "throughput:" in printed.splitlines()[-1]
    assert set(written["allocator"]) >= {"num_alloc_retries", "num_device_alloc"}  # None off the GPU


def test_a_steps_file_that_is_there_or_has_no_directory_is_refused_before_the_run(tmp_path):
    held = tmp_path / "inputs"
    held.mkdir()
    (held / "prompts.txt").write_text("kept\n")
    for target, said in (
        (held, "is already there"),
        (held / "prompts.txt", "is already there"),
        (Path("."), "is already there"),  # the cwd
        (tmp_path / "missing" / "steps.json", f"its directory {tmp_path / 'missing'} does not exist"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.workloads.serve", "--steps-out", str(target)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 12 and f"--steps-out {target}: {said}" in done.stderr, done.stderr
    assert (held / "prompts.txt").read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir()) == ["inputs"]


def test_bad_counts_are_refused_by_the_command_line():
    bad = ["--max-seqs", "0", "--prompt-min", "9", "--prompt-max", "3", "--max-capture", "513"]
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.workloads.serve", *bad],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "max-seqs" in done.stderr and "prompt-max/output-max below its min" in done.stderr
    assert "max-capture 513 (1 to 512)" in done.stderr


def test_layers_zero_builds_the_released_depth_and_a_bad_count_is_refused():
    from pipeline.workloads.hf import depth

    assert (depth("qwen2-7b", 0), depth("llama3-8b", 0), depth("llama3-8b", 3)) == (28, 32, 3)
    for arch, layers, said in (("llama", 0, "llama has no full depth recorded"), ("qwen2-7b", -1, "--layers -1")):
        with pytest.raises(ValueError, match=said):
            depth(arch, layers)
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.workloads.serve", "--arch", arch, "--layers", str(layers)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert done.returncode == 2 and said in done.stderr, done.stderr

"""The embedded Llama workload: CPU smoke tests (need torch) and the GPU collection test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipeline.stages.gather.collect import collect
from pipeline.stages.gather.shapes import gather

from .helpers import luigi_argv


def _tiny_args(*extra: str) -> list[str]:
    return [
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--hidden",
        "64",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--intermediate",
        "96",
        "--vocab",
        "101",
        "--layers",
        "2",
        "--batch-sizes",
        "1",
        "2",
        "--prompt-lengths",
        "5",
        "9",
        "--decode-steps",
        "4",
        *extra,
    ]


def test_cpu_smoke_run_prints_throughput(capsys):
    llama = pytest.importorskip("pipeline.workloads.llama", reason="the workload needs torch")
    assert llama.main(_tiny_args()) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert out.count("batch=") == 4 and lines[-2].startswith("throughput: ")
    assert lines[-1].startswith("decode throughput: ") and lines[-1].endswith(" tokens/s")


def test_bad_head_split_is_refused(capsys):
    llama = pytest.importorskip("pipeline.workloads.llama", reason="the workload needs torch")
    assert llama.main(_tiny_args("--heads", "5")) == 2
    assert "must split into 5 heads" in capsys.readouterr().err


@pytest.fixture
def tiny():
    """A 2-layer model in float64 with seeded weights, and the torch module."""
    llama = pytest.importorskip("pipeline.workloads.llama", reason="the workload needs torch")
    import torch

    torch.manual_seed(0)
    cfg = llama.LlamaConfig(hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=101, layers=2)
    return llama.Llama(cfg).double().eval(), torch


def test_cached_decode_matches_full_forward(tiny):
    model, torch = tiny
    tokens = torch.randint(0, model.cfg.vocab, (2, 7))
    with torch.inference_mode():
        cache = model.new_cache(2, 7)
        model(tokens[:, :5], cache, 0)
        step5 = model(tokens[:, 5:6], cache, 5)
        step6 = model(tokens[:, 6:7], cache, 6)
        full6 = model(tokens[:, :6], model.new_cache(2, 6), 0)
        full7 = model(tokens, model.new_cache(2, 7), 0)
    torch.testing.assert_close(step5, full6)
    torch.testing.assert_close(step6, full7)


def test_static_decode_step_matches_the_dynamic_one(tiny):
    """The capturable decode (fixed-size cache under a position mask) computes what the sliced one does."""
    model, torch = tiny
    tokens = torch.randint(0, model.cfg.vocab, (2, 8))
    with torch.inference_mode():
        dynamic, static = model.new_cache(2, 8), model.new_cache(2, 8)
        model(tokens[:, :5], dynamic, 0)
        model(tokens[:, :5], static, 0)
        for pos in (5, 6, 7):
            expected = model(tokens[:, pos : pos + 1], dynamic, pos)
            got = model.decode(tokens[:, pos : pos + 1], static, torch.tensor([pos]))
            torch.testing.assert_close(got, expected)


def test_graph_decode_needs_a_gpu(capsys):
    llama = pytest.importorskip("pipeline.workloads.llama", reason="the workload needs torch")
    assert llama.main(_tiny_args("--decode-mode", "graph")) == 2
    assert "needs a CUDA or ROCm GPU" in capsys.readouterr().err


def expected_linear_keys(
    hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=128256, batches=(1, 4), prompts=(128, 1024)
) -> set[tuple[str, str]]:
    """The TunableOp keys the embedded workload's linear layers imply, in the BLAS frame."""
    head_dim = hidden // heads
    widths = {  # name: (out features, in features)
        "qkv": ((heads + 2 * kv_heads) * head_dim, hidden),
        "o": (hidden, hidden),
        "gate_up": (2 * intermediate, hidden),
        "down": (hidden, intermediate),
    }
    tokens = {b * p for b in batches for p in prompts} | set(batches)
    keys = {
        ("GemmTunableOp_BFloat16_TN", f"tn_{out}_{t}_{inp}_ld_{inp}_{inp}_{out}")
        for out, inp in widths.values()
        for t in tokens
    }
    keys |= {("GemmTunableOp_BFloat16_TN", f"tn_{vocab}_{b}_{hidden}_ld_{hidden}_{hidden}_{vocab}") for b in batches}
    return keys


def expected_linear_calls(
    hidden=4096,
    qkv=6144,
    intermediate=14336,
    vocab=128256,
    layers=2,
    batches=(1, 4),
    prompts=(128, 1024),
    steps=16,
    warmup=1,
) -> dict[str, int]:
    """Calls of each linear GEMM in the embedded workload's default run: every generation prefills once and
    decodes ``steps - 1`` times through every layer, with the logits of one position per step; the warm-up
    generates every (batch, prompt) pair once more."""
    runs = [(b, p) for b in batches for p in prompts] * (1 + warmup)
    tokens: dict[int, int] = {}
    heads: dict[int, int] = {}
    for b, p in runs:
        tokens[b * p] = tokens.get(b * p, 0) + layers
        tokens[b] = tokens.get(b, 0) + layers * (steps - 1)
        heads[b] = heads.get(b, 0) + steps
    widths = [(qkv, hidden), (hidden, hidden), (2 * intermediate, hidden), (hidden, intermediate)]
    calls = {
        f"GemmTunableOp_BFloat16_TN,tn_{out}_{t}_{inp}_ld_{inp}_{inp}_{out}": n
        for out, inp in widths
        for t, n in tokens.items()
    }
    calls |= {
        f"GemmTunableOp_BFloat16_TN,tn_{vocab}_{b}_{hidden}_ld_{hidden}_{hidden}_{vocab}": n for b, n in heads.items()
    }
    return calls


def test_expected_calls_follow_the_loop():
    calls = expected_linear_calls()
    # batch 1: 2 prompts x (timed + warm-up) generations x 2 layers x 15 decode steps
    assert calls["GemmTunableOp_BFloat16_TN,tn_6144_1_4096_ld_4096_4096_6144"] == 2 * 2 * 2 * 15
    assert calls["GemmTunableOp_BFloat16_TN,tn_128256_4_4096_ld_4096_4096_128256"] == 2 * 2 * 16
    assert calls["GemmTunableOp_BFloat16_TN,tn_4096_128_4096_ld_4096_4096_4096"] == 2 * 2
    assert set(calls) == {",".join(key) for key in expected_linear_keys()}


def test_expected_keys_include_the_spec_example():
    keys = expected_linear_keys()
    assert ("GemmTunableOp_BFloat16_TN", "tn_6144_128_4096_ld_4096_4096_6144") in keys
    assert len(keys) == 4 * 6 + 2


@pytest.mark.gpu
@pytest.mark.gpu_untimed
@pytest.mark.xdist_group("workload-collect")
def test_gpu_collection_records_every_linear_problem(tmp_path):
    result = collect(tmp_path / "collect")
    gathered = gather([str(f) for f in result.files])
    recorded = {(r.op_signature, r.params_signature) for r in gathered.shapes}
    missing = expected_linear_keys() - recorded
    assert not missing, f"not recorded: {sorted(missing)}"
    assert result.tokens_per_s and result.tokens_per_s > 0
    calls = json.loads((tmp_path / "collect" / "calls.json").read_text())["calls"]
    expected = expected_linear_calls()
    assert {key: calls.get(key) for key in expected} == expected, "torch's lookup log counts every call"
    print(
        f"\nrecorded {len(recorded)} distinct GEMMs ({len(recorded - expected_linear_keys())} beyond the "
        f"linear layers), {result.tokens_per_s:.0f} tokens/s, {result.seconds:.1f} s"
    )


@pytest.mark.long
@pytest.mark.gpu
@pytest.mark.gpu_untimed
@pytest.mark.xdist_group("workload-gather")
def test_gpu_luigi_gather_with_calls_and_time_shares(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        luigi_argv(
            "GatherShapes",
            workdir=str(tmp_path),
            run_name="gpu",
        ),
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads((tmp_path / "gpu" / "shapes" / "shapes.json").read_text())
    recorded = {(r["op_signature"], r["params_signature"]) for r in rows}
    assert expected_linear_keys() <= recorded
    manifest = json.loads((tmp_path / "gpu" / "collect" / "manifest.json").read_text())
    assert manifest["tokens_per_s"] > 0
    shares = {(r["op_signature"], r["params_signature"]): r["time_share"] for r in rows}
    assert all(s > 0 for s in shares.values()) and sum(shares.values()) == pytest.approx(1.0)
    calls = {(r["op_signature"], r["params_signature"]): r["calls"] for r in rows}
    assert {",".join(k): calls[k] for k in expected_linear_keys()} == expected_linear_calls()
    top = max(rows, key=lambda r: r["time_share"])
    print(
        f"\ntop GEMM by time share: {top['params_signature']}: {100 * top['time_share']:.1f}%, "
        f"{top['calls']} calls, {top['per_call_us']:.1f} us per call"
    )

"""FP8 scaled GEMMs on NVIDIA without a GPU: the key of a ``_scaled_mm`` call, the recorder that writes it where
TunableOp does not, collection merging its counts, which keys the cuBLASLt backend takes, and the runtime routing
``_scaled_mm`` (on the CPU dispatch key, with the double executor of ``runtime_double``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.formats.tunableop import TunableOpEntry, format_key, parse_key, read_file, write_file
from pipeline.kernels.support import unsupported_reason
from pipeline.runtime.record import read_counts, tunableop_records_scaled
from pipeline.runtime.scaled import Meta, scaled_problem
from pipeline.runtime.table import RESULTS, load_table, runtime_key

from .helpers import needs_torch, optional_torch

SOLUTION = "Gemm_Cublaslt_id_66_tile_10_stages_35_splitk_1_red_0_swizzle_0_custom_3"
OP = "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN"
# F.linear-like: x[16, 32] @ w[64, 32].t() -> BLAS m = 64, n = 16, k = 32 (docs/tunableop.md section 1.3)
TENSORWISE = (
    "tn_64_16_32_ld_32_32_64_a_Float8_e4m3fn_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float"
    "_ast_0_bst_0_dscale_0_fast_0_bias_None"
)


def _meta(shape, dtype="float8_e4m3fn", stride=None):
    if stride is None:
        stride = (shape[1], 1) if len(shape) == 2 else (1,) * len(shape)
    return Meta(tuple(shape), tuple(stride), dtype)


X, W_T = _meta((16, 32)), _meta((32, 64), stride=(1, 32))  # w[64, 32] viewed as w.t()
ONE = Meta((), (), "float32")


def test_a_tensorwise_call_has_the_newest_cuda_key():
    problem = scaled_problem(X, W_T, ONE, ONE, None, False, "bfloat16", False)
    assert format_key(problem) == (OP, TENSORWISE)
    assert parse_key(OP, TENSORWISE) == problem


def test_rowwise_bias_fast_accum_and_mixed_types_are_in_the_key():
    w_t = _meta((32, 64), "float8_e5m2", stride=(1, 32))
    problem = scaled_problem(
        X,
        w_t,
        Meta((16, 1), (1, 1), "float32"),
        Meta((1, 64), (64, 1), "float32"),
        _meta((64,), "bfloat16"),
        False,
        "bfloat16",
        True,
    )
    op, params = format_key(problem)
    assert op == "ScaledGemmTunableOp_Float8_e5m2_Float8_e4m3fn_BFloat16_TN"  # BLAS A is the weight
    assert params.endswith(
        "_a_Float8_e5m2_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float_ast_1_bst_1_dscale_0_fast_1_bias_BFloat16"
    )


def test_a_one_row_activation_with_rowwise_weights_is_rowwise_as_torch_pairs_them():
    x = _meta((1, 32))
    problem = scaled_problem(
        x, W_T, Meta((1, 1), (1, 1), "float32"), Meta((1, 64), (64, 1), "float32"), None, False, "bfloat16", False
    )
    assert problem.scale_a_recipe == problem.scale_b_recipe == 1


@pytest.mark.parametrize(
    ("scale_x", "scale_y", "why"),
    [
        (Meta((16, 1), (1, 1), "float32"), ONE, "block or MX"),  # rowwise with tensorwise: not a pair torch runs
        (Meta((16, 4), (4, 1), "float32"), Meta((4, 64), (64, 1), "float32"), "block or MX"),  # 1x8 blocks
    ],
)
def test_scales_the_key_cannot_state_are_refused_with_the_reason(scale_x, scale_y, why):
    assert why in scaled_problem(X, W_T, scale_x, scale_y, None, False, "bfloat16", False)


def test_a_weight_torch_would_copy_first_is_not_keyed():
    assert scaled_problem(X, _meta((32, 64), stride=(1, 16)), ONE, ONE, None, False, None, False) == (
        "layout torch copies first"
    )


def test_which_torch_records_scaled_gemms_itself():
    assert not tunableop_records_scaled("2.11.0+cu130", None)
    assert tunableop_records_scaled("2.11.0", "6.4")
    assert tunableop_records_scaled("2.15.0.dev20261101", None)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        (TENSORWISE, None),
        (TENSORWISE.replace("ast_0_bst_0", "ast_1_bst_1"), None),
        ("tn_64_16_32_ld_32_32_64_rw_0_bias_None", "rw_ form cannot tell tensorwise from block"),
        (TENSORWISE.replace("ast_0_bst_0", "ast_4_bst_4"), "only tensorwise (0) and rowwise (1)"),
        (TENSORWISE.replace("dscale_0", "dscale_1"), "output scale"),
        (TENSORWISE.replace("bias_None", "bias_Float"), "bias on a bfloat16 output"),
    ],
)
def test_the_cublaslt_backend_takes_stated_scales_only(params, reason):
    problem = parse_key(OP, params)
    got = unsupported_reason(problem)
    assert got is None if reason is None else reason in got


def test_a_scaled_row_never_lands_under_a_plain_gemm_key_or_the_reverse(tmp_path):
    plain = parse_key("GemmTunableOp_BFloat16_TN", "tn_64_16_32_ld_32_32_64")
    rowwise_form = parse_key(OP, "tn_64_16_32_ld_32_32_64_rw_0_bias_None")
    scaled = parse_key(OP, TENSORWISE)
    path = tmp_path / RESULTS
    write_file(
        path,
        {"PT_VERSION": "2.11.0"},
        [TunableOpEntry.from_problem(p, SOLUTION, 0.01) for p in (plain, rowwise_form, scaled)],
    )
    table = load_table(path)
    assert set(table.solutions) == {runtime_key(plain), runtime_key(scaled)}
    assert table.solutions[runtime_key(scaled)][0] == scaled and table.solutions[runtime_key(plain)][0] == plain
    assert runtime_key(scaled) != runtime_key(plain)
    assert sum(table.left_out.values()) == 1  # the rw_ row, with its reason
    assert "rw_ form" in next(iter(table.left_out))


torch = optional_torch()
needs = needs_torch("recording and routing tests need torch (CPU torch will do)")


def _fp8(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.float8_e4m3fn)


@needs
def test_the_recorder_counts_keys_and_leaves_torchs_result(tmp_path):
    from pipeline.runtime.record import ScaledRecorder

    x, w = _fp8(16, 32), _fp8(64, 32, seed=1)
    one, half = torch.tensor(1.0), torch.tensor(0.5)
    expected = torch._scaled_mm(x, w.t(), one, half, out_dtype=torch.bfloat16)
    recorder = ScaledRecorder(tmp_path, dispatch_key="CPU")
    recorder.install()
    try:
        got = torch._scaled_mm(x, w.t(), one, half, out_dtype=torch.bfloat16)
        out = torch.empty(16, 64, dtype=torch.bfloat16)
        torch._scaled_mm(x, w.t(), one, half, out_dtype=torch.bfloat16, out=out)
    finally:
        recorder.uninstall()
    torch._scaled_mm(x, w.t(), one, half, out_dtype=torch.bfloat16)  # uninstalled: not counted
    assert torch.equal(got, expected) and torch.equal(out, expected)
    files = recorder.write()
    untuned = next(f for f in files if f.suffix == ".csv")
    parsed = read_file(untuned)
    assert [(e.op_signature, e.params_signature) for e in parsed.entries] == [(OP, TENSORWISE)]
    assert read_counts(tmp_path)[0] == {f"{OP},{TENSORWISE}": 2}


@needs
def test_collection_merges_the_recorded_calls(tmp_path):
    """A workload whose processes record through the recorder (installed by hand on the CPU key here; on a GPU
    the autoload hook installs it on the CUDA key): its keys join torch's files and its counts calls.json."""
    from pipeline.stages.gather.collect import collect

    script = tmp_path / "fp8_workload.py"
    script.write_text(
        "import os, torch\n"
        "from pipeline.runtime.record import ScaledRecorder\n"
        "r = ScaledRecorder(os.environ['GEMM_TUNE_RECORD_SCALED'], 'CPU'); r.install()\n"
        "x = torch.randn(16, 32).to(torch.float8_e4m3fn); w = torch.randn(64, 32).to(torch.float8_e4m3fn)\n"
        "one = torch.tensor(1.0)\n"
        "for _ in range(3): torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16)\n"
        "try:\n"  # counted, then refused by torch's kernel: the workload carries on
        "    torch._scaled_mm(x, w.t(), torch.ones(16, 4), torch.ones(4, 64), out_dtype=torch.bfloat16)\n"
        "except (RuntimeError, ValueError):\n"
        "    pass\n"
        "r.write()\n"
    )
    out = tmp_path / "collect"
    collection = collect(out, [sys.executable, str(script)])
    assert [f.name for f in collection.files] == [f.name for f in sorted(out.glob("untuned_scaled_*.csv"))]
    assert collection.calls == {f"{OP},{TENSORWISE}": 3}
    assert json.loads((out / "calls.json").read_text())["calls"] == {f"{OP},{TENSORWISE}": 3}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scaled_calls_not_recorded"] == {
        "block or MX scales (only tensorwise and rowwise scales are keyed)": 1
    }


@needs
def test_the_autoload_hook_never_breaks_a_workload_whose_torch_has_no_cuda_kernels(tmp_path):
    from pipeline.runtime.__main__ import AUTOLOAD

    env = {
        "GEMM_TUNE_RECORD_SCALED": str(tmp_path),
        "PYTHONPATH": f"{AUTOLOAD}:{Path(__file__).parents[1]}",
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.ones(2).sum().item())"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "2.0"
    if not torch.cuda.is_available():
        assert "_scaled_mm calls not recorded" in proc.stderr


@pytest.fixture
def routed_fp8(tmp_path):
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    rows = [parse_key(OP, TENSORWISE), parse_key(OP, TENSORWISE.replace("ast_0_bst_0", "ast_1_bst_1"))]
    write_file(
        tmp_path / RESULTS, {"PT_VERSION": "2.11.0"}, [TunableOpEntry.from_problem(p, SOLUTION, 0.01) for p in rows]
    )
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True)
    try:
        yield runtime
    finally:
        rt.uninstall()


def _tuned(runtime) -> int:
    return sum(runtime.status()["tuned_calls"].values())


@needs
def test_scaled_calls_with_a_tuned_row_take_the_plan_and_match_torch(routed_fp8):
    x, w = _fp8(16, 32), _fp8(64, 32, seed=1)
    sx, sw = torch.tensor(0.75), torch.tensor(1.25)
    got = torch._scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16)
    assert _tuned(routed_fp8) == 1 and got.dtype == torch.bfloat16 and got.shape == (16, 64)
    rows, cols = torch.rand(16, 1) + 0.5, torch.rand(1, 64) + 0.5
    out = torch.empty(16, 64, dtype=torch.bfloat16)
    torch._scaled_mm(x, w.t(), rows, cols, out_dtype=torch.bfloat16, out=out)
    assert _tuned(routed_fp8) == 2
    routed_fp8.uninstall()
    assert torch.allclose(
        got.float(), torch._scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16).float(), rtol=2e-2, atol=1e-1
    )
    reference = (x.float() * rows) @ (w.float().t() * cols)
    assert torch.allclose(out.float(), reference, rtol=2e-2, atol=1e-1)


@needs
def test_scaled_calls_without_a_row_or_with_another_form_fall_back_counted(routed_fp8):
    x, w, one = _fp8(16, 32), _fp8(64, 32, seed=1), torch.tensor(1.0)
    torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.float16)  # no fp16-out row
    torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)  # tuned without
    torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, out=torch.empty(64, 16, dtype=torch.bfloat16).t())
    fallbacks = routed_fp8.status()["fallbacks"]  # torch's CPU _scaled_mm runs mm inside: more untuned calls
    assert _tuned(routed_fp8) == 0
    assert fallbacks["no tuned row"] >= 2
    assert fallbacks["out= not a contiguous output of the product's shape and dtype"] == 1


@needs
def test_the_fp8_workload_layer_stays_close_to_its_linear():
    from pipeline.workloads.llama import FP8Linear, main

    linear = torch.nn.Linear(64, 32, bias=False).bfloat16()
    layer = FP8Linear(linear, torch.float8_e4m3fn)
    x = torch.randn(2, 3, 64).bfloat16()
    got, want = layer(x), linear(x)
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert float((got.float() - want.float()).norm() / want.float().norm()) < 0.1
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight_scale.numel() == 1
    assert main(["--fp8", "--device", "cpu"]) == 2  # FP8 tensor cores or nothing


def test_tune_records_a_problem_the_library_refuses_as_a_skip_with_its_reason():
    from pipeline.backends.base import TuneSettings, tune
    from pipeline.kernels.support import Unsupported

    class Refusing:
        name = "refusing"

        def unsupported_reason(self, problem):
            return None

        def tune_one(self, problem, settings):
            raise Unsupported("rowwise FP8 scales (OUTER_VEC_32F): no algorithm for them")

    rowwise = parse_key(OP, TENSORWISE.replace("ast_0_bst_0", "ast_1_bst_1"))
    result = next(tune(Refusing(), [rowwise], TuneSettings()))
    assert result.skipped == "rowwise FP8 scales (OUTER_VEC_32F): no algorithm for them" and not result.errors


@pytest.mark.parametrize("text", ['{"calls": {"k": 1}', '{"calls": {"k": 1}}', "[1, 2]"])
def test_a_corrupt_count_file_is_an_error_naming_it(tmp_path, text):
    from pipeline.errors import BadInput

    bad = tmp_path / "scaled_calls_123.json"
    bad.write_text(text)
    with pytest.raises(BadInput, match=r"scaled_calls_123\.json"):
        read_counts(tmp_path)

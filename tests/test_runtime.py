"""The runtime consumer (pipeline.runtime): BLAS frame of torch calls, the tuned table, routing with torch's
kernel as fallback (on the CPU dispatch key with a double executor), the CLI and the autoload hook."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.formats.tunableop import TunableOpEntry, parse_key, write_file
from pipeline.kernels import triton_gemm as tg
from pipeline.runtime import DeviceMismatch, tunableop_consumes
from pipeline.runtime.frame import gemm_key, operand
from pipeline.runtime.table import BELOW_FIXED, RESULTS, RUNTIME_RESULTS, TUNED_DEFAULT, load_table, runtime_key

from .helpers import FIXTURES, needs_torch, optional_torch

SOLUTION = "Gemm_Cublaslt_id_66_tile_10_stages_35_splitk_1_red_0_swizzle_0_custom_3"
SWAPPED = "triton_r16c64k128_s1_g8_w4_st3_swap"  # a Triton winner compiled for its own token count
REFUSED = "Gemm_Cublaslt_id_999_tile_1_stages_1_splitk_1_red_0_swizzle_0_custom_0"


def _rows(path: Path, rows: list[tuple[str, str, str]], validators: dict | None = None) -> Path:
    entries = [TunableOpEntry.from_problem(parse_key(op, params), solution, 0.01) for op, params, solution in rows]
    write_file(path, validators if validators is not None else {"PT_VERSION": "2.11.0"}, entries)
    return path


# -- frame -------------------------------------------------------------------------------------------------
def test_operand_layouts():
    assert operand((64, 4096), (4096, 1)) == ("N", 4096)  # row-major
    assert operand((4096, 11008), (1, 4096)) == ("T", 4096)  # W.t() of a row-major W
    assert operand((64, 4096), (6144, 1)) == ("N", 6144)  # a column slice of a wider matrix (qkv split)
    assert operand((64, 1), (1, 1)) == ("N", 1)  # one column: torch records ld 1
    assert operand((64, 4096), (2, 128)) is None  # torch copies this first
    assert operand((64, 4096), (8192, 2)) is None


def test_linear_key_matches_what_torch_records():
    # x[64, 4096] @ W.t(), W[11008, 4096]: torch records tn_11008_64_4096_ld_4096_4096_11008 (h100-measurements)
    key = gemm_key("gemm_and_bias", "bfloat16", "float32", (64, 4096), (4096, 1), (4096, 11008), (1, 4096))
    recorded = runtime_key(parse_key("GemmAndBiasTunableOp_BFloat16_TN", "tn_11008_64_4096_ld_4096_4096_11008"))
    assert key == recorded
    # [8,128,64] @ [8,64,128] bf16: nn_128_128_64_B_8_ld_128_64_128
    key = gemm_key(
        "gemm_strided_batched", "bfloat16", "float32", (8, 128, 64), (8192, 64, 1), (8, 64, 128), (8192, 128, 1)
    )
    assert key == runtime_key(parse_key("GemmStridedBatchedTunableOp_BFloat16_NN", "nn_128_128_64_B_8_ld_128_64_128"))


def test_batched_operands_must_be_evenly_packed():
    base = ("gemm_strided_batched", "float16", "float32", (8, 128, 64))
    assert gemm_key(*base, (8192, 64, 1), (8, 64, 128), (8192, 128, 1)) is not None
    assert gemm_key(*base, (9000, 64, 1), (8, 64, 128), (8192, 128, 1)) is None  # padded batch stride
    assert gemm_key(*base, (8192, 64, 1), (8, 64, 128), (0, 128, 1)) is None  # broadcast (expanded) weight


# -- table -------------------------------------------------------------------------------------------------
def test_table_keeps_cublaslt_rows_and_counts_the_rest(tmp_path):
    csv = _rows(
        tmp_path / RESULTS,
        [
            ("GemmTunableOp_BFloat16_TN", "tn_4096_8_4096_ld_4096_4096_4096", SOLUTION),
            ("GemmTunableOp_BFloat16_TN", "tn_4096_16_4096_ld_4096_4096_4096", "Default"),
            ("GemmTunableOp_float_NN", "nn_512_128_256_ld_512_256_512", SOLUTION),
            ("GemmTunableOp_Half_TN", "tn_4096_8_4096_ld_4096_4096_4096", "Gemm_Hipblaslt_1234"),
        ],
    )
    table = load_table(tmp_path)
    assert len(table) == 2
    assert table.left_out == {"Default (torch's own kernel)": 1, "not a cuBLASLt or Triton solution": 1}
    assert ("gemm", "float32", "float32", "N", "N", 512, 128, 256, 512, 256, 512, 1) in table.solutions
    assert load_table(csv).solutions == table.solutions


def test_table_keeps_triton_rows_the_kernels_serve_and_says_why_not_the_others(tmp_path):
    triton = "triton_r16c64k256_s2_g8_w4_st4"
    _rows(
        tmp_path / RESULTS,
        [
            ("GemmTunableOp_BFloat16_TN", "tn_4096_8_4096_ld_4096_4096_4096", triton),
            ("GemmTunableOp_BFloat16_TN", "tn_4096_16_4096_ld_4096_4096_4096", SOLUTION),
            ("GemmTunableOp_float_TN", "tn_512_128_256_ld_256_256_512", triton),  # fp32: not served
            ("GemmTunableOp_BFloat16_TN", "tn_4096_4_4096_ld_4096_4096_4096", "triton_r16c64k256_s2"),  # cut short
        ],
    )
    table = load_table(tmp_path)
    assert sorted(solution for _, solution in table.solutions.values()) == [SOLUTION, triton]
    assert table.left_out == {
        tg.serves(parse_key("GemmTunableOp_float_TN", "tn_512_128_256_ld_256_256_512")): 1,
        "unreadable Triton solution name (not triton_r<R>c<C>k<K>_s<S>_g<G>_w<W>_st<N>)": 1,
    }
    assert table.triton_rows() == 1
    only = table.only_triton()
    assert [solution for _, solution in only.solutions.values()] == [triton]
    assert only.left_out["cuBLASLt row: TunableOp applies it"] == 1 and only.meta is table.meta


def test_table_prefers_a_packages_runtime_rows(tmp_path):
    _rows(tmp_path / RESULTS, [])
    _rows(tmp_path / RUNTIME_RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_4096_8_4096_ld_4096_4096_4096", SOLUTION)])
    assert len(load_table(tmp_path)) == 1


def test_table_errors_name_the_file_and_line(tmp_path):
    csv = _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_4096_8_4096_ld_4096_4096_4096", SOLUTION)])
    csv.write_text(csv.read_text() + "GemmTunableOp_BFloat16_TN,tn_x_8_4096,Default,0.1\n")
    with pytest.raises(ValueError, match=rf"{RESULTS}:3"):
        load_table(csv)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: no runtime_results\.csv or tunableop_results\.csv"):
        load_table(tmp_path / "empty")


@pytest.mark.parametrize(
    ("version", "hip", "consumer"),
    [
        ("2.11.0+cu130", None, False),
        ("2.13.1", None, False),
        ("2.14.0", None, True),
        ("2.15.0.dev20261101", None, True),
        ("2.11.0+rocm7.0", "7.0.1", True),
    ],
)
def test_who_consumes_the_rows(version, hip, consumer):
    assert (tunableop_consumes(version, hip) is not None) == consumer


# -- routing on the CPU dispatch key with the double executor -----------------------------------------------
torch = optional_torch()
needs = needs_torch("routing tests need torch (the cuda/rocm extra; CPU torch will do)")


@pytest.fixture
def routed(tmp_path):
    """A runtime installed on the CPU key for: linear 64x4096 -> 512 (bf16, bias), its fp32 and tf32 twins
    (fp32 only as 'float'), a bmm, and a row this 'library' refuses."""
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    _rows(
        tmp_path / RESULTS,
        [
            ("GemmAndBiasTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", SOLUTION),
            ("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", SOLUTION),
            ("GemmTunableOp_float_TN", "tn_512_64_256_ld_256_256_512", SOLUTION),
            ("GemmStridedBatchedTunableOp_BFloat16_NN", "nn_32_16_8_B_4_ld_32_8_32", SOLUTION),
            ("GemmTunableOp_BFloat16_TN", "tn_512_32_256_ld_256_256_512", REFUSED),
        ],
    )
    (tmp_path / "manifest.json").write_text(json.dumps({"runtime": {"name": "CPU double"}}))
    executor = DoubleExecutor()
    runtime = rt.install(tmp_path, executor=executor, dispatch_key="CPU")
    try:
        yield runtime
    finally:
        rt.uninstall()
    assert executor.closed and rt.installed() is None


@needs
def test_the_routed_dtypes_are_those_torchs_path_runs():
    from pipeline.kernels.support import SUPPORTED_DTYPES
    from pipeline.kernels.torch_gemm import TORCH_DTYPES

    assert set(TORCH_DTYPES) == set(SUPPORTED_DTYPES)


def _tuned(runtime) -> int:
    return sum(runtime.status()["tuned_calls"].values())


@needs
def test_tuned_calls_take_the_plan_and_match_torch(routed):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g).bfloat16()
    w, b = torch.randn(512, 256, generator=g).bfloat16(), torch.randn(512, generator=g).bfloat16()
    out = F.linear(x, w, b)  # addmm, gemm_and_bias
    out2 = F.linear(x, w)  # mm
    batched = torch.bmm(torch.randn(4, 16, 8, generator=g).bfloat16(), torch.randn(4, 8, 32, generator=g).bfloat16())
    assert _tuned(routed) == 3
    assert routed.status()["fallbacks"] == {}
    assert {name.split(" ", 1)[1] for name in routed.status()["tuned_calls"]} == {  # the bundle rows' own keys
        "GemmAndBiasTunableOp_BFloat16_TN,tn_512_64_256_ld_256_256_512",
        "GemmTunableOp_BFloat16_TN,tn_512_64_256_ld_256_256_512",
        "GemmStridedBatchedTunableOp_BFloat16_NN,nn_32_16_8_B_4_ld_32_8_32",
    }
    import pipeline.runtime as rt

    rt.uninstall()
    assert torch.allclose(out.float(), F.linear(x, w, b).float(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(out2.float(), F.linear(x, w).float(), rtol=2e-2, atol=2e-2)
    assert batched.shape == (4, 16, 32)


@needs
def test_untuned_and_unsafe_calls_fall_back_to_torch(routed):
    F = torch.nn.functional
    x, w = torch.randn(64, 256).bfloat16(), torch.randn(512, 256).bfloat16()
    F.linear(torch.randn(63, 256).bfloat16(), w)  # its weight is tuned at 64 tokens, not at 63
    torch.mm(x, w.t().contiguous())  # same shape, NN layout: no row
    torch.addmm(torch.randn(512).bfloat16(), x, w.t(), beta=0.5)  # beta != 1
    torch.mm(x[:, ::2], torch.randn(128, 512).bfloat16())  # torch copies a strided operand
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    try:
        F.linear(x, w)
    finally:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    torch.use_deterministic_algorithms(True)
    try:
        F.linear(x, w)
    finally:
        torch.use_deterministic_algorithms(False)
    F.linear(torch.randn(32, 256).bfloat16(), w)  # tuned row this library refuses
    fallbacks = routed.status()["fallbacks"]
    assert _tuned(routed) == 0
    assert fallbacks["no tuned row"] == 1
    assert fallbacks["outside every range (its weight is tuned at other token counts)"] == 1
    assert routed.status()["untuned_keys"] == [
        "GemmTunableOp_BFloat16_TN,tn_512_63_256_ld_256_256_512",
        "GemmTunableOp_BFloat16_NN,nn_512_64_256_ld_512_256_512",
    ]
    assert sum(n for reason, n in fallbacks.items() if reason.startswith("tuned row rejected")) == 1
    assert fallbacks["alpha or beta not 1"] == 1
    assert fallbacks["layout torch copies first"] == 1
    assert fallbacks["bf16 reduced-precision reduction off"] == 1
    assert fallbacks["deterministic algorithms on"] == 1
    from pipeline.runtime.dispatch import Fallback

    routes = list(routed.router.plans.values())
    assert all(type(r) is Fallback or callable(getattr(r, "run", None)) for r in routes), "a plan or a Fallback"
    assert all(type(reason) is Fallback for reason in routed.router.fallbacks), "every counted fallback is typed"
    assert len(routed.status()["rows_rejected"]) == 1
    assert "cublasLtMatmulAlgoCheck" in next(iter(routed.status()["rows_rejected"].values()))


@needs
def test_autocast_calls_arrive_cast_and_compute_as_torch_does(routed):
    x, w = torch.randn(64, 256), torch.randn(512, 256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        routed_out = torch.nn.functional.linear(x, w)  # autocast casts to bf16 first: the bf16 tuned key
    assert _tuned(routed) == 1 and routed_out.dtype == torch.bfloat16
    import pipeline.runtime as rt

    rt.uninstall()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        own = torch.nn.functional.linear(x, w)
    assert torch.allclose(routed_out.float(), own.float(), rtol=2e-2, atol=5e-2)


@needs
def test_fp32_rows_apply_only_under_the_tf32_setting_they_were_tuned_with(routed):
    x, w = torch.randn(64, 256), torch.randn(512, 256)
    torch.nn.functional.linear(x, w)
    assert _tuned(routed) == 1
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        torch.nn.functional.linear(x, w)  # now a tf32 key: no row
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    assert _tuned(routed) == 1 and routed.status()["fallbacks"] == {"no tuned row": 1}


@needs
def test_uninstall_restores_torchs_kernels(routed):
    import pipeline.runtime as rt

    x, w = torch.randn(64, 256).bfloat16(), torch.randn(512, 256).bfloat16()
    torch.nn.functional.linear(x, w)
    assert _tuned(routed) == 1
    with pytest.raises(RuntimeError, match="already installed"):
        rt.install(routed.table.source, executor=routed.executor, dispatch_key="CPU")
    rt.uninstall()
    assert torch.equal(torch.nn.functional.linear(x, w), torch.nn.functional.linear(x, w))
    assert rt.installed() is None


@needs
def test_rows_tuned_on_another_gpu_are_refused(tmp_path):
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", SOLUTION)])
    (tmp_path / "manifest.json").write_text(json.dumps({"runtime": {"name": "NVIDIA H100 80GB HBM3"}}))
    with pytest.raises(DeviceMismatch, match="tuned on NVIDIA H100 80GB HBM3, this is CPU double"):
        rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU")
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True)
    try:
        assert runtime.status()["notes"] and runtime.status()["installed"]
    finally:
        rt.uninstall()


@needs
def test_only_the_ops_the_table_has_rows_for_are_overridden(tmp_path):
    """A table of ``gemm`` rows routes mm and addmm (a bias copied into a gemm's output) and leaves bmm and
    _scaled_mm to torch's own kernels: their calls are neither routed nor counted."""
    import torch.nn.functional as F

    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", SOLUTION)])
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True)
    try:
        assert runtime.status()["routed_ops"] == ["mm", "addmm"]
        a, b = torch.randn(4, 16, 8).bfloat16(), torch.randn(4, 8, 32).bfloat16()
        torch.bmm(a, b)
        torch.bmm(a, b, out=torch.empty(4, 16, 32, dtype=torch.bfloat16))
        assert runtime.status()["fallbacks"] == {} and runtime.router.plans == {}
        F.linear(torch.randn(64, 256).bfloat16(), torch.randn(512, 256).bfloat16())
        F.linear(torch.randn(8, 256).bfloat16(), torch.randn(512, 256).bfloat16())  # tuned at 64 tokens only
        assert _tuned(runtime) == 1 and runtime.status()["fallbacks"] == {
            "outside every range (its weight is tuned at other token counts)": 1
        }
    finally:
        rt.uninstall()
    _rows(tmp_path / RESULTS, [("GemmStridedBatchedTunableOp_BFloat16_NN", "nn_32_16_8_B_4_ld_32_8_32", SOLUTION)])
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True)
    try:
        assert runtime.status()["routed_ops"] == ["bmm"]
        F.linear(torch.randn(8, 256).bfloat16(), torch.randn(512, 256).bfloat16())
        assert runtime.status()["fallbacks"] == {}
    finally:
        rt.uninstall()


@needs
def test_a_call_without_a_row_reads_no_setting_and_a_tuned_one_reads_them_all(routed, monkeypatch):
    """The hot path: a signature without a row falls back before any setting, the device or ``out`` is read;
    a tuned signature is checked against all of them on every call, not only the first."""
    from pipeline.runtime import dispatch

    reads = []
    monkeypatch.setattr(dispatch, "blocked", lambda dtype: reads.append(dtype))
    x, w = torch.randn(64, 256).bfloat16(), torch.randn(512, 256).bfloat16()
    for _ in range(3):
        torch.nn.functional.linear(torch.randn(63, 256).bfloat16(), w)
    assert reads == [] and routed.status()["fallbacks"] == {
        "outside every range (its weight is tuned at other token counts)": 3
    }
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    assert reads == [torch.bfloat16] * 3 and _tuned(routed) == 3
    monkeypatch.undo()
    torch.use_deterministic_algorithms(True)
    try:
        torch.nn.functional.linear(x, w)  # the cached plan, refused by the setting read now
        torch.nn.functional.linear(torch.randn(63, 256).bfloat16(), w)  # no row at 63 tokens: counted as such
    finally:
        torch.use_deterministic_algorithms(False)
    assert _tuned(routed) == 3
    assert routed.status()["fallbacks"] == {
        "outside every range (its weight is tuned at other token counts)": 4,
        "deterministic algorithms on": 1,
    }


@needs
def test_a_call_from_another_device_builds_no_plan(tmp_path):
    """A first call whose operands are not on the current device falls back without building a plan there or
    caching the signature: the plan is built by a call made on its own device."""
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    class OnDeviceZero(DoubleExecutor):
        device = 0

        def current_device(self) -> int:
            return self.device  # CPU tensors say -1

    _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", SOLUTION)])
    executor = OnDeviceZero()
    runtime = rt.install(tmp_path, executor=executor, dispatch_key="CPU", any_device=True)
    try:
        x, w = torch.randn(64, 256).bfloat16(), torch.randn(512, 256).bfloat16()
        torch.nn.functional.linear(x, w)
        assert runtime.router.plans == {} and runtime.router._built == {}
        assert runtime.status()["fallbacks"] == {"operands not on the current device": 1}
        executor.device = -1
        torch.nn.functional.linear(x, w)
        assert _tuned(runtime) == 1
        executor.device = 0
        torch.nn.functional.linear(x, w)  # the cached plan, its device no longer current
        assert _tuned(runtime) == 1
        assert runtime.status()["fallbacks"] == {"operands not on the current device": 2}
    finally:
        rt.uninstall()


@needs
def test_the_host_cost_is_timed_on_a_call_without_a_row_with_the_runtime_off_in_torchs_arm(tmp_path):
    """runtime.hostcost: torch's arm runs torch's kernels (the router unregistered), the runtime's arm passes the
    dispatch to no row, and the runtime is gone afterwards; a bmm-only bundle is timed on bmm, an FP8-only one
    is not timed, with the reason."""
    import pipeline.runtime as rt
    from pipeline.runtime.hostcost import measure

    from .runtime_double import DoubleExecutor

    _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", SOLUTION)])
    record = measure(tmp_path, device="cpu", rounds=3, calls=20, executor=DoubleExecutor(), dispatch_key="CPU")
    assert rt.installed() is None and record["routed_ops"] == ["mm", "addmm"]
    assert record["call"].startswith("F.linear x[8,264]") and record["tuned_calls"] == 0
    assert record["fallbacks"] == {"no tuned row": 4 * 20}  # the runtime's arm alone, warm-up round included
    assert len(record["samples_us"]["torch"]) == len(record["samples_us"]["runtime"]) == 3
    differences = [b - a for a, b in zip(record["samples_us"]["torch"], record["samples_us"]["runtime"], strict=True)]
    assert record["over_us"] == pytest.approx(sorted(differences)[1])
    _rows(tmp_path / RESULTS, [("GemmStridedBatchedTunableOp_BFloat16_NN", "nn_32_16_8_B_4_ld_32_8_32", SOLUTION)])
    record = measure(tmp_path, device="cpu", rounds=1, calls=5, executor=DoubleExecutor(), dispatch_key="CPU")
    assert record["call"].startswith("torch.bmm") and record["fallbacks"] == {"no tuned row": 2 * 5}
    scaled = (
        "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN",
        "tn_64_16_32_ld_32_32_64_a_Float8_e4m3fn_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float"
        "_ast_0_bst_0_dscale_0_fast_0_bias_None",
        SOLUTION,
    )
    _rows(tmp_path / RESULTS, [scaled])
    record = measure(tmp_path, device="cpu", rounds=1, calls=5, executor=DoubleExecutor(), dispatch_key="CPU")
    assert record == {
        "skipped": "the bundle routes _scaled_mm: no mm or bmm call to time (an FP8-only bundle is not measured)",
        "routed_ops": ["_scaled_mm"],
    }


# -- CLI and autoload (no GPU here: they must say so clearly, and the hook must fire on 'import torch') --------
def _cli(tmp_path, *command: str) -> subprocess.CompletedProcess:
    csv = _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", SOLUTION)])
    return subprocess.run(
        [sys.executable, "-m", "pipeline.runtime", "--bundle", str(csv), "--", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(torch is not None and torch.cuda.is_available(), reason="checks the no-GPU message")
@needs
def test_cli_without_a_gpu_says_what_is_missing(tmp_path):
    proc = _cli(tmp_path, "-c", "print('ran')")
    assert proc.returncode == 11 and "ran" not in proc.stdout and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("gemm-tune runtime: cannot apply ")
    assert "nvmath-python" in proc.stderr or "torch.cuda.is_available() is False" in proc.stderr


@needs
def test_cli_names_a_bundle_that_is_not_there(tmp_path):
    """Before importing torch (seconds): a torch that cannot be imported does not hide the bundle's error."""
    (tmp_path / "shadow" / "torch").mkdir(parents=True)
    (tmp_path / "shadow" / "torch" / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.runtime", "--bundle", str(tmp_path / "nope"), "--", "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert proc.returncode == 11 and f"{tmp_path / 'nope'}: no such bundle directory or results file" in proc.stderr


@pytest.mark.skipif(torch is not None and torch.cuda.is_available(), reason="checks the no-GPU message")
@needs
def test_cli_child_processes_install_on_importing_torch(tmp_path):
    proc = _cli(tmp_path, "bash", "-c", f"{sys.executable} -c 'import torch; print(torch.__name__)'")
    assert proc.returncode == 0 and proc.stdout.strip() == "torch"
    assert "gemm-tune runtime: not installed in process" in proc.stderr


def test_cli_graphs_only_reaches_the_commands_child_processes(tmp_path):
    echo = ["bash", "-c", "echo $GEMM_TUNE_RUNTIME_GRAPHS_ONLY $GEMM_TUNE_RUNTIME_ANY_DEVICE."]
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.runtime", "--bundle", str(tmp_path), "--graphs-only", "--", *echo],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "1 .", proc.stderr


def test_cli_needs_a_command(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.runtime", "--bundle", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "usage" in proc.stderr


@needs
def test_the_out_overloads_take_the_plan_too(routed):
    """Compiled code calls mm.out/addmm.out/bmm.out into buffers it owns: the same routing writes there."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 256, generator=g).bfloat16()
    w, b = torch.randn(512, 256, generator=g).bfloat16(), torch.randn(512, generator=g).bfloat16()
    out = torch.empty(64, 512, dtype=torch.bfloat16)
    torch.mm(x, w.t(), out=out)
    biased = torch.empty(64, 512, dtype=torch.bfloat16)
    torch.addmm(b, x, w.t(), out=biased)
    batched = torch.empty(4, 16, 32, dtype=torch.bfloat16)
    torch.bmm(torch.randn(4, 16, 8, generator=g).bfloat16(), torch.randn(4, 8, 32, generator=g).bfloat16(), out=batched)
    assert _tuned(routed) == 3 and routed.status()["fallbacks"] == {}
    strided = torch.empty(512, 64, dtype=torch.bfloat16).t()  # a transposed out: torch's kernel, counted
    torch.mm(x, w.t(), out=strided)
    assert _tuned(routed) == 3
    assert routed.status()["fallbacks"] == {"out= not a contiguous output of the product's shape and dtype": 1}
    import pipeline.runtime as rt

    rt.uninstall()
    assert torch.allclose(out.float(), (x @ w.t()).float(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(biased.float(), torch.addmm(b, x, w.t()).float(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(strided.float(), (x @ w.t()).float(), rtol=2e-2, atol=2e-2)


@needs
def test_a_compiled_model_reaches_the_plans(routed):
    """torch.compile (Inductor) lowers F.linear to an extern mm/addmm with out=: it must still route."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 256, generator=g).bfloat16()
    w, b = torch.randn(512, 256, generator=g).bfloat16(), torch.randn(512, generator=g).bfloat16()
    if not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        pytest.skip("Inductor's CPU backend needs a C++ compiler (g++, c++ or clang++) on PATH")
    got = torch.compile(lambda x: F.linear(x, w, b) + F.linear(x, w), backend="inductor")(x)
    assert _tuned(routed) >= 2, routed.status()
    import pipeline.runtime as rt

    rt.uninstall()
    assert torch.allclose(got.float(), (F.linear(x, w, b) + F.linear(x, w)).float(), rtol=3e-2, atol=3e-2)


@needs
def test_the_bias_takes_the_key_torch_records():
    """torch's CUDA addmm gives only a contiguous vector bias of the output's width to the cuBLASLt epilogue
    (GemmAndBias); every other bias is broadcast into the output and a Gemm accumulates."""
    from pipeline.runtime.dispatch import contiguous, epilogue_bias, expandable

    assert epilogue_bias((256, 512), (512,), (1,))
    assert epilogue_bias((256, 512), (1, 512), (7, 1))  # squeezes to a vector
    assert not epilogue_bias((256, 512), (512,), (1,), lt_disabled=True)
    assert not epilogue_bias((256, 512), (64, 512), (0, 1))  # an expanded 2-D bias
    assert not epilogue_bias((256, 512), (64, 512), (512, 1))  # a full 2-D bias
    assert not epilogue_bias((256, 512), (512,), (2,))  # a strided vector
    assert not epilogue_bias((256, 512), (64, 1), (1, 1))  # a column
    assert contiguous((1, 512), (7, 1)) and not contiguous((64, 512), (0, 1))
    assert expandable((512,), (64, 512)) and expandable((64, 1), (64, 512)) and not expandable((63, 512), (64, 512))


@needs
def test_a_bias_torch_does_not_fuse_routes_to_the_gemm_row(routed):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 256, generator=g).bfloat16()
    w, b = torch.randn(512, 256, generator=g).bfloat16(), torch.randn(512, generator=g).bfloat16()
    full = torch.randn(64, 512, generator=g).bfloat16()
    strided = torch.randn(1024, generator=g).bfloat16()[::2]
    got = [torch.addmm(b.expand(64, 512), x, w.t()), torch.addmm(full, x, w.t()), torch.addmm(strided, x, w.t())]
    into = full.clone()
    torch.addmm(into, x, w.t(), out=into)  # the bias is the output (torch's in-place form)
    tuned = routed.status()["tuned_calls"]
    assert sum(tuned.values()) == 4 and all(" GemmTunableOp_" in name for name in tuned), tuned
    assert routed.status()["fallbacks"] == {}
    import pipeline.runtime as rt

    rt.uninstall()
    for out, bias in ((got[0], b), (got[1], full), (got[2], strided), (into, full)):
        assert torch.allclose(out.float(), torch.addmm(bias, x, w.t()).float(), rtol=2e-2, atol=2e-2)


@needs
def test_a_triton_row_takes_a_vector_bias_and_leaves_torchs_unfused_addmm_to_torch(tmp_path):
    import pipeline.runtime as rt
    from pipeline.runtime.dispatch import NO_ACCUMULATE

    from .runtime_double import DoubleExecutor

    triton = "triton_r16c64k256_s2_g8_w4_st4"
    _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", triton)])
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(64, 256, generator=g).bfloat16(), torch.randn(512, 256, generator=g).bfloat16()
    full = torch.randn(64, 512, generator=g).bfloat16()
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU")
    try:
        built_at_install = [plan.name for plan in runtime.router._built.values()]
        plain, unfused = torch.nn.functional.linear(x, w), torch.addmm(full, x, w.t())
        status = runtime.status()
    finally:
        rt.uninstall()
    assert built_at_install == [triton], "install builds the Triton rows' plans, not their first calls"
    assert status["tuned_calls"] == {f"{triton} GemmTunableOp_BFloat16_TN,tn_512_64_256_ld_256_256_512": 1}
    assert status["fallbacks"] == {str(NO_ACCUMULATE): 1}, status
    assert torch.allclose(plain.float(), (x.float() @ w.float().t()), rtol=2e-2, atol=2e-2)
    assert torch.allclose(unfused.float(), torch.addmm(full, x, w.t()).float(), rtol=2e-2, atol=2e-2)


@needs
@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="checks a runtime without Triton")
def test_triton_rows_in_a_runtime_without_triton_fall_back_per_row_with_the_reason(tmp_path):
    import pipeline.runtime as rt
    from pipeline.runtime.triton_plan import TritonPlan

    from .runtime_double import DoubleExecutor

    class WithTritonRows(DoubleExecutor):
        """The double, building a Triton row as the cuBLASLt executor does (runtime/cublaslt.py)."""

        errors = (ValueError, ImportError)

        def plan(self, problem, solution, device):
            if solution.startswith("triton_"):
                return TritonPlan(problem, solution, device, None, tmp_path)
            return super().plan(problem, solution, device)

    triton = "triton_r16c64k256_s2_g8_w4_st4"
    _rows(
        tmp_path / RESULTS,
        [
            ("GemmTunableOp_BFloat16_TN", "tn_512_64_256_ld_256_256_512", triton),
            ("GemmTunableOp_BFloat16_TN", "tn_512_32_256_ld_256_256_512", SOLUTION),
        ],
    )
    g = torch.Generator().manual_seed(5)
    w = torch.randn(512, 256, generator=g).bfloat16()
    x64, x32 = torch.randn(64, 256, generator=g).bfloat16(), torch.randn(32, 256, generator=g).bfloat16()
    runtime = rt.install(tmp_path, executor=WithTritonRows(), dispatch_key="CPU")
    try:
        rejected_at_install = dict(runtime.status()["rows_rejected"])
        out64, out32 = torch.nn.functional.linear(x64, w), torch.nn.functional.linear(x32, w)
        status = runtime.status()
    finally:
        rt.uninstall()
    (reason,) = status["rows_rejected"].values()
    assert reason.startswith("ModuleNotFoundError") and "triton" in reason
    assert rejected_at_install == status["rows_rejected"], "the Triton row was refused at install"
    assert list(status["tuned_calls"]) == [f"{SOLUTION} GemmTunableOp_BFloat16_TN,tn_512_32_256_ld_256_256_512"]
    assert sum(status["fallbacks"].values()) == 1, status  # the Triton row's call, with that reason
    assert torch.allclose(out64.float(), x64.float() @ w.float().t(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(out32.float(), x32.float() @ w.float().t(), rtol=2e-2, atol=2e-2)


def test_helper_processes_without_gemm_calls_leave_the_status_file_to_the_command(tmp_path):
    """torch.compile's workers import torch under the hook too: an idle one writes no record and no line."""
    from pipeline.runtime.__main__ import report

    class Runtime:
        def __init__(self, calls: int) -> None:
            self.calls = calls

        def status(self) -> dict:
            return {
                "installed": True,
                "tuned_rows": 1,
                "source": "x",
                "rows_rejected": {},
                "fallbacks": {},
                "tuned_calls": {"row": self.calls} if self.calls else {},
            }

    status = tmp_path / "status.json"
    report(Runtime(0), status, skip_idle=True)
    assert not status.exists()
    report(Runtime(3), status, skip_idle=True)
    assert json.loads(status.read_text())["tuned_calls"] == {"row": 3}
    report(Runtime(0), tmp_path / "own.json")  # the launching process always reports
    assert (tmp_path / "own.json").exists()
    report(Runtime(5), status)  # another process of the command: its own record, beside the first
    assert json.loads(status.read_text())["tuned_calls"] == {"row": 3}
    assert json.loads((tmp_path / f"status.{os.getpid()}.json").read_text())["tuned_calls"] == {"row": 5}


def test_a_record_is_created_once_whole_and_never_replaced(tmp_path, monkeypatch):
    """``create_json``: the first writer of a name wins and a later one is told so, nothing replaced and
    nothing staged left behind (the runtime's status records: one per process of a command)."""
    from pipeline.atomic import create_json

    path = tmp_path / "runtime.json"
    assert create_json(path, {"n": 1}) and not create_json(path, {"n": 2})
    assert json.loads(path.read_text()) == {"n": 1} and sorted(p.name for p in tmp_path.iterdir()) == ["runtime.json"]

    def no_links(*_):
        raise PermissionError("no hard links on this file system")

    monkeypatch.setattr(os, "link", no_links)
    other = tmp_path / "other.json"
    assert create_json(other, {"n": 3}) and not create_json(other, {"n": 4})
    assert json.loads(other.read_text()) == {"n": 3} and len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize(
    "fixture", ["torch2.11_hf_llama_untuned0.csv", "torch2.11_hf_t5_untuned0.csv", "torch2.11_rocm_scaled_untuned0.csv"]
)
def test_a_runtime_key_reads_back_as_the_tunableop_key_it_came_from(fixture):
    from pipeline.runtime.table import key_text, runtime_key

    lines = (FIXTURES / "tunableop" / fixture).read_text().splitlines()
    keys = [",".join(line.split(",")[:2]) for line in lines if "TunableOp" in line.split(",")[0]]
    assert keys
    for key in keys:
        assert key_text(runtime_key(parse_key(*key.split(",")))) == key


@needs
def test_calls_at_untuned_token_counts_are_counted_per_key_with_the_coverage(tmp_path):
    """A weight tuned over a range of token counts (the bundle's spread rows): a call inside the range runs it,
    one outside counts as outside every range, per key; the coverage figure takes the keys the collection never
    saw (not in the manifest's ``collected``)."""
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    op = "GemmTunableOp_BFloat16_TN"
    _rows(tmp_path / RESULTS, [(op, f"tn_512_{n}_256_ld_256_256_512", SOLUTION) for n in (5, 6, 7, 8)])
    manifest = {"runtime": {"name": "NVIDIA H100 80GB HBM3"}, "collected": [f"{op},tn_512_8_256_ld_256_256_512"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True)
    try:
        w = torch.randn(512, 256).bfloat16()
        for tokens in (8, 6, 6, 9, 9, 9):
            torch.nn.functional.linear(torch.randn(tokens, 256).bfloat16(), w)
        torch.nn.functional.linear(torch.randn(6, 128).bfloat16(), torch.randn(512, 128).bfloat16())
        status = runtime.status()
    finally:
        rt.uninstall()
    assert status["fallbacks"] == {
        "outside every range (its weight is tuned at other token counts)": 3,
        "no tuned row": 1,
    }
    assert status["missed_calls"] == {
        f"{op},tn_512_9_256_ld_256_256_512": 3,
        f"{op},tn_512_6_128_ld_128_128_512": 1,
    }
    coverage = status["coverage"]
    assert coverage["unseen_calls"] == 6  # the two calls at 6 tokens, tuned, and the four without a row
    assert coverage["tuned_share_of_calls"] == pytest.approx(2 / 6)
    floor = {
        nk: parse_key(op, "tn_512_{}_{}_ld_{}_{}_512".format(*nk, nk[1], nk[1])).floor_us("H100")
        for nk in ((6, 256), (9, 256), (6, 128))
    }
    tuned_us = 2 * floor[6, 256]
    assert coverage["tuned_share_of_time"] == pytest.approx(tuned_us / (tuned_us + 3 * floor[9, 256] + floor[6, 128]))
    from pipeline.runtime.__main__ import summary_line

    share = f"{coverage['tuned_share_of_time']:.1%}"
    unseen = f"{coverage['unseen_us']:.3g} us by the roofline estimate"
    said = f"the collection never saw: {share} of their GEMM time ({unseen}; 2 of 6 calls)"
    assert said in summary_line(status), "the time the share is of, so that a share of almost nothing reads as such"


@needs
def test_a_call_where_the_tuner_chose_torchs_default_counts_as_a_tuned_choice_apart(tmp_path):
    """The manifest's ``default_ranges`` (the counts where Bench or Validate measured torch's default best): a
    call there runs torch's kernel, counted by its own reason and, in the coverage, as a tuned choice, apart."""
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    op = "GemmTunableOp_BFloat16_TN"
    _rows(tmp_path / RESULTS, [(op, "tn_512_8_256_ld_256_256_512", SOLUTION)])
    manifest = {
        "runtime": {"name": "NVIDIA H100 80GB HBM3"},
        "collected": [f"{op},tn_512_8_256_ld_256_256_512"],
        "m_ranges": [
            {"key": f"{op},tn_512_8_256_ld_256_256_512", "solution": SOLUTION, "lo": 7, "hi": 8},
            {"key": f"{op},tn_512_4_256_ld_256_256_512", "solution": SWAPPED, "lo": 4, "hi": 4, "bucket_lo": 3},
        ],
        "default_ranges": [
            {"key": f"{op},tn_512_8_256_ld_256_256_512", "lo": 5, "hi": 6, "why": "split: serves 7-8"},
            {"key": f"{op},tn_512_16_256_ld_256_256_512", "lo": 9, "hi": 16, "why": "nothing to ship"},
        ],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True)
    try:
        w = torch.randn(512, 256).bfloat16()
        for tokens in (7, 5, 12, 12, 17, 3):  # 3: below the swapped winner of M = 4, in its bucket
            torch.nn.functional.linear(torch.randn(tokens, 256).bfloat16(), w)
        status = runtime.status()
    finally:
        rt.uninstall()
    assert status["fallbacks"] == {
        TUNED_DEFAULT: 3,
        "outside every range (its weight is tuned at other token counts)": 1,
        BELOW_FIXED: 1,
    }
    assert status["defaulted_calls"] == {
        f"{op},tn_512_5_256_ld_256_256_512": 1,
        f"{op},tn_512_12_256_ld_256_256_512": 2,
    }
    assert status["missed_calls"] == {f"{op},tn_512_17_256_ld_256_256_512": 1, f"{op},tn_512_3_256_ld_256_256_512": 1}
    coverage = status["coverage"]
    assert (coverage["unseen_calls"], coverage["unseen_tuned_calls"], coverage["unseen_default_calls"]) == (6, 4, 3)
    from pipeline.runtime.__main__ import summary_line

    assert "4 of 6 calls) ran a tuned choice (3 of them torch's default, measured best there)" in summary_line(status)


def test_a_call_inside_a_manifest_range_takes_its_grid_rows_solution_at_its_own_size(tmp_path):
    """A bundle whose manifest lists M ranges needs no spread row for the runtime: an unseen token count inside a
    range finds its grid row's solution, built for its own size (kept for the next call), a Triton one too where
    its kernel takes the sizes as arguments; one below a range, a Triton grid row compiled for its own sizes and
    a weight the ranges do not hold find nothing."""
    op = "GemmTunableOp_BFloat16_TN"
    triton, tiled = "triton_r16c64k128_s1_g8_w4_st3_swap", "triton_r32c64k64_s1_g8_w4_st3"
    _rows(
        tmp_path / RESULTS,
        [
            (op, "tn_512_8_256_ld_256_256_512", SOLUTION),
            (op, "tn_512_16_256_ld_256_256_512", REFUSED),
            (op, "tn_1024_16_256_ld_256_256_1024", triton),
            (op, "tn_2048_32_256_ld_256_256_2048", tiled),
            (op, "tn_2048_20_256_ld_256_256_2048", tiled),  # a copy a bundle spreads over the range
        ],
    )
    ranges = [
        {"key": f"{op},tn_512_8_256_ld_256_256_512", "solution": SOLUTION, "lo": 5, "hi": 8},
        {"key": f"{op},tn_512_16_256_ld_256_256_512", "solution": REFUSED, "lo": 12, "hi": 16},
        {"key": f"{op},tn_1024_16_256_ld_256_256_1024", "solution": triton, "lo": 9, "hi": 16},  # cannot serve it
        {"key": f"{op},tn_2048_32_256_ld_256_256_2048", "solution": tiled, "lo": 17, "hi": 32},
    ]
    (tmp_path / "manifest.json").write_text(json.dumps({"m_ranges": ranges}))
    table = load_table(tmp_path)
    rows = len(table)

    def key(m: int, n: int) -> tuple:
        return runtime_key(parse_key(op, f"tn_{m}_{n}_256_ld_256_256_{m}"))

    problem, solution = table.find(key(512, 6))
    assert solution == SOLUTION and problem == parse_key(op, "tn_512_6_256_ld_256_256_512")
    assert len(table) == rows + 1 and table.find(key(512, 6))[0] is problem  # kept
    assert table.find(key(512, 13))[1] == REFUSED and table.find(key(512, 16))[1] == REFUSED
    assert table.find(key(512, 4)) is None and table.find(key(512, 10)) is None  # below a range, between two
    assert table.find(key(512, 17)) is None and table.find(key(1024, 15)) is None  # above every range; Triton
    assert table.find(runtime_key(parse_key(op, "tn_512_6_128_ld_128_128_512"))) is None  # another weight
    assert table.miss(key(512, 10)).startswith("outside every range")
    # install builds the Triton rows but the range's copy (20), and 17, the one other frame the tiled kernel's
    # range compiles apart (32 divides by 16, 17..31 do not): no call inside the range compiles
    assert table.triton_builds() == {
        key(1024, 16): (parse_key(op, "tn_1024_16_256_ld_256_256_1024"), triton),
        key(2048, 32): (parse_key(op, "tn_2048_32_256_ld_256_256_2048"), tiled),
        key(2048, 17): (parse_key(op, "tn_2048_17_256_ld_256_256_2048"), tiled),
    }
    assert table.find(key(2048, 20)) == (parse_key(op, "tn_2048_20_256_ld_256_256_2048"), tiled)
    assert table.find(key(2048, 21)) == (parse_key(op, "tn_2048_21_256_ld_256_256_2048"), tiled)
    assert table.find(key(2048, 33)) is None


def test_the_counts_a_range_compiles_apart_are_one_per_frame_triton_specialises():
    from pipeline.kernels.triton_runner import Frame, compiled_counts

    linear = parse_key("GemmTunableOp_BFloat16_TN", "tn_2048_32_256_ld_256_256_2048")
    assert compiled_counts(linear, 17, 32) == [17] and compiled_counts(linear, 32, 32) == []
    assert compiled_counts(linear, 1, 48) == [1, 2]  # 1 is a literal to Triton; 16, 32 and 48 are one frame
    # a batch stride moves with the count (n x ldb = 72 n divides by 16 where n is even): 17 is a frame of its
    # own, 18 the grid point's
    batched = parse_key("GemmStridedBatchedTunableOp_BFloat16_TN", "tn_64_24_64_B_4_ld_64_72_64")
    alike = [Frame.of_problem(batched.with_tokens(n)).compiled_alike() for n in (17, 18, 24)]
    assert compiled_counts(batched, 17, 24) == [17] and alike[0] != alike[1] == alike[2]


@needs
def test_the_runtime_routes_an_unseen_token_count_through_its_manifest_range(tmp_path):
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    op = "GemmTunableOp_BFloat16_TN"
    _rows(tmp_path / RESULTS, [(op, "tn_512_8_256_ld_256_256_512", SOLUTION)])
    ranges = [{"key": f"{op},tn_512_8_256_ld_256_256_512", "solution": SOLUTION, "lo": 5, "hi": 8}]
    (tmp_path / "manifest.json").write_text(json.dumps({"m_ranges": ranges, "collected": [ranges[0]["key"]]}))
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True)
    try:
        assert "ranges" not in vars(runtime.router.table), "no Triton row: install leaves the ranges to the first miss"
        w = torch.randn(512, 256).bfloat16()
        for tokens in (6, 6, 7, 9):
            torch.nn.functional.linear(torch.randn(tokens, 256).bfloat16(), w)
        status = runtime.status()
    finally:
        rt.uninstall()
    assert status["tuned_calls"] == {
        f"{SOLUTION} {op},tn_512_6_256_ld_256_256_512": 2,
        f"{SOLUTION} {op},tn_512_7_256_ld_256_256_512": 1,
    }
    assert status["fallbacks"] == {"outside every range (its weight is tuned at other token counts)": 1}
    assert status["coverage"]["tuned_share_of_calls"] == pytest.approx(3 / 4)


class _Graph:
    """``torch.cuda.CUDAGraph``'s capture methods, on CPU: ``fail`` makes the next capture_begin raise."""

    fail = False

    def capture_begin(self, pool=None, capture_error_mode="global"):
        if _Graph.fail:
            raise RuntimeError("capture refused")

    def capture_end(self):
        pass


@needs
def test_graphs_only_routes_inside_a_capture_and_leaves_an_eager_call_to_torch(tmp_path, monkeypatch):
    """``--graphs-only``: the kernels are registered only while a graph is captured, so an eager call never meets
    the runtime (no count, torch's kernel), a captured call runs the plan, and a capture that fails to begin or
    an uninstall leaves torch's kernels in place."""
    import pipeline.runtime as rt

    from .runtime_double import DoubleExecutor

    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Graph)
    _rows(tmp_path / RESULTS, [("GemmTunableOp_BFloat16_TN", "tn_512_8_256_ld_256_256_512", SOLUTION)])
    runtime = rt.install(tmp_path, executor=DoubleExecutor(), dispatch_key="CPU", any_device=True, graphs_only=True)
    x, w = torch.randn(8, 256).bfloat16(), torch.randn(512, 256).bfloat16()
    try:
        torch.nn.functional.linear(x, w)
        from pipeline.runtime.__main__ import summary_line

        assert "no CUDA graph was captured, so nothing was routed" in summary_line(runtime.status())
        assert runtime.router._lib is None and not runtime.status()["tuned_calls"]
        assert not runtime.status()["fallbacks"]  # the runtime never saw it
        graph = _Graph()
        graph.capture_begin()
        captured = torch.nn.functional.linear(x, w)
        torch.nn.functional.linear(torch.randn(3, 256).bfloat16(), w)  # no row: torch's, counted
        graph.capture_end()
        torch.nn.functional.linear(x, w)
        _Graph.fail = True
        with pytest.raises(RuntimeError, match="capture refused"):
            _Graph().capture_begin()
        _Graph.fail = False
        assert runtime.router._lib is None and runtime.capture_only.depth == 0
        status = runtime.status()
        line = summary_line(status)
    finally:
        rt.uninstall()
    assert sum(status["tuned_calls"].values()) == 1 and sum(status["fallbacks"].values()) == 1
    assert status["installed"] and status["graphs_only"] == {"captures": 2}
    assert "(graphs only: routed inside 2 CUDA-graph captures); 1 calls ran a tuned algorithm" in line
    torch.testing.assert_close(captured.float(), x.float() @ w.float().t(), rtol=2e-2, atol=2e-2)
    assert _Graph.capture_begin.__qualname__ == "_Graph.capture_begin"  # uninstall put the class back

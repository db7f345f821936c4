"""hipblaslt-bench command lines and output, odd corners included (spec section 5)."""

from __future__ import annotations

import subprocess

import pytest

from pipeline.formats.hipblaslt_bench import (
    BenchFormatError,
    BenchOptions,
    Generation,
    bench_args,
    parse_output,
    problem_args,
    split_values,
    unsupported_reason,
)
from pipeline.problem import GemmProblem

from .helpers import DOUBLE

HEADER = (
    "transA,transB,grouped_gemm,batch_count,m,n,k,alpha,lda,stride_a,beta,ldb,stride_b,ldc,stride_c,ldd,"
    "stride_d,d_type,compute_type,activation_type,bias_vector,hipblaslt-Gflops,us"
)
# the layout hipBLASLt 600 printed on an MI300X: no colon after [i], no indent, a space before a value
MI300X_600 = f"""hipBLASLt version: 600
hipBLASLt git version: 52776da
Query device success: there are 1 devices
-------------------------------------------------------------------------------
Device ID 0 : AMD Radeon Graphics gfx942:sramecc+:xnack-
with 206.1 GB memory, max. SCLK 2100 MHz, max. MCLK 1300 MHz, compute capability 9.4
-------------------------------------------------------------------------------

Is supported 1 / Total solutions: 1
[0]{HEADER}
N,N,0,1,896,896,896,1,896,802816,0,896,802816,896,802816,896,802816,fp16_r,f32_r,none,0, 58624.5, 24.54
"""
RL_HEADER = (
    "transA,transB,grouped_gemm,batch_count,m,n,k,alpha,lda,stride_a,beta,ldb,stride_b,ldc,stride_c,ldd,"
    "stride_d,a_type,b_type,c_type,d_type,compute_type,scaleA,scaleB,scaleC,scaleD,amaxD,swizzle_a,"
    "swizzle_b,activation_type,bias_vector,bias_type,aux_type,rotating_buffer,flush,use_gpu_timer,"
    "hipblaslt-Gflops,hipblaslt-GB/s,us"
)


def rl_block(i: int, us: float, index: int) -> str:
    values = (
        f"N,N,0,1,3584,2048,3584,1,3584,12845056,0,3584,7340032,3584,7340032,3584,7340032,bf16_r,bf16_r,bf16_r,"
        f"bf16_r,f32_r,0,0,0,0,0,0,0,none,0,bf16_r,bf16_r,640,1,1,591344,576.241,{us}"
    )
    return (
        f"[{i}]:{RL_HEADER}\n    {values}\n    --Solution index: {index}\n"
        f"    --Solution name:  Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_{index}\n"
        f"    --kernel name:    Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_{index}\n"
    )


def test_output_of_an_older_build_without_kernel_info():
    run = parse_output(MI300X_600)
    assert (run.version, run.git_version, run.arch) == ("600", "52776da", "gfx942")
    assert run.fastest.us == 24.54 and run.fastest.gflops == 58624.5 and run.fastest.index is None
    assert run.winner is None, "a single solution prints no Winner: block"


def test_newer_layout_with_winner_block():
    text = (
        "hipBLASLt version: 100200\nhipBLASLt git version: de5c1aebb6-dirty\n"
        "Device ID 0 : AMD Instinct MI350X gfx950:sramecc+:xnack-\n"
        "Rotating buffer 640 MiB. Needed Size: 52 MiB. Needed block count: 13 (Capped to max iters: 50)\n"
        "Is supported 3 / Total solutions: 3\n"
        + rl_block(0, 88.97, 300662)
        + rl_block(1, 80.5, 299001)
        + rl_block(2, 95.0, 12)
        + "Winner: \n"
        + rl_block(1, 80.5, 299001)
    )
    run = parse_output(text)
    assert run.device == "AMD Instinct MI350X" and run.arch == "gfx950"
    assert [s.index for s in run.solutions] == [300662, 299001, 12]
    assert run.winner.index == 299001 and run.fastest is run.winner
    assert run.winner.fields["rotating_buffer"] == "640" and run.winner.name.endswith("_299001")


def test_winner_by_time_when_the_block_is_missing_and_kernel_lines_without_dashes():
    text = rl_block(0, 9.0, 5) + rl_block(1, 7.0, 6).replace("--Solution index", "Solution index")
    run = parse_output(text)
    assert run.winner is None and run.fastest.index == 6


def test_grouped_values_keep_their_commas():
    assert split_values(" N,N,2,(128,256),(64,64), 1.5") == ["N", "N", "2", "(128,256)", "(64,64)", "1.5"]
    header = "transA,m,n,us"
    run = parse_output(f"[0]:{header}\n    T,(128,256),(64,64),12.5\n")
    assert run.fastest.fields["m"] == "(128,256)" and run.fastest.us == 12.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hipBLASLt version: 600\nno results here\n", "no result line"),
        (f"[0]{HEADER}\nN,N,0,1,896\n", "<hipblaslt-bench>:2: 5 values for 23 columns"),
        (f"[0]{HEADER}\n", "a header line with no value line"),
        ("[0]transA,m,us\nN,8,fast\n", "us 'fast' is not a number"),
        ("[0]transA,m,n\nN,8,8\n", "no us column"),
    ],
)
def test_garbage_says_where(text, message):
    with pytest.raises(BenchFormatError, match=message):
        parse_output(text)


def test_command_line_of_a_padded_batched_problem_with_bias():
    padded = GemmProblem("gemm", "T", "N", 4096, 128, 4096, 4224, 4224, 4096)
    args = bench_args(padded, BenchOptions(cold_iters=5, iters=50, rotating_mb=512, flush=True, splitk=(0, 4)), 3)
    pairs = dict(zip(args, [*args[1:], ""], strict=True))
    assert (pairs["--lda"], pairs["--ldb"], pairs["--ldc"], pairs["--ldd"]) == ("4224", "4224", "4096", "4096")
    assert pairs["--algo_method"] == "all" and pairs["--requested_solution"] == "-1"
    assert pairs["-j"] == "5" and pairs["-i"] == "50" and pairs["--rotating"] == "512" and pairs["--device"] == "3"
    assert "--flush" in args and "--print_kernel_info" in args and args.count("--splitk") == 2
    batched = GemmProblem(
        "gemm_strided_batched",
        "N",
        "N",
        128,
        128,
        64,
        128,
        64,
        128,
        batch=8,
        a_type="float32",
        b_type="float32",
        c_type="float32",
        compute_type="tf32",
    )
    args = bench_args(batched, BenchOptions(), 0, "heuristic")
    pairs = dict(zip(args, [*args[1:], ""], strict=True))
    assert (pairs["--stride_a"], pairs["--stride_b"], pairs["--stride_c"]) == (
        str(128 * 64),
        str(64 * 128),
        str(128 * 128),
    )
    assert pairs["--compute_type"] == "xf32_r" and pairs["--batch_count"] == "8"
    assert pairs["--algo_method"] == "heuristic" and pairs["--requested_solution"] == "1"
    bias = GemmProblem(
        "gemm_and_bias",
        "T",
        "N",
        11008,
        64,
        4096,
        4096,
        4096,
        11008,
        a_type="float16",
        b_type="float16",
        c_type="float16",
    )
    args = bench_args(bias, BenchOptions(), 0, "index", 2061)
    assert "--bias_vector" in args and args[args.index("--bias_type") + 1] == "f16_r"
    assert args[args.index("--solution_index") + 1] == "2061"


def test_lds_under_the_row_count_are_raised_for_the_bench():
    rotary = GemmProblem(
        "gemm_strided_batched",
        "T",
        "N",
        32,
        1,
        1,
        1,
        1,
        1,
        batch=2,
        a_type="float32",
        b_type="float32",
        c_type="float32",
    )
    args = bench_args(rotary, BenchOptions(), 0)
    assert args[args.index("--ldc") + 1] == "32" and args[args.index("--lda") + 1] == "1"


def test_what_the_bench_cannot_run():
    assert "wildcard" in unsupported_reason(GemmProblem("gemm", "T", "N", "*", 8, 8))
    scaled = GemmProblem(
        "scaled_gemm", "T", "N", 64, 64, 64, a_type="float8_e4m3fnuz", b_type="float8_e4m3fnuz", rowwise=False
    )
    assert unsupported_reason(scaled) is None, "a tensorwise FP8 GEMM runs with its scales (--scaleA/--scaleB)"
    swizzled = GemmProblem(
        "scaled_gemm",
        "T",
        "N",
        64,
        64,
        64,
        a_type="float8_e4m3fnuz",
        b_type="float8_e4m3fnuz",
        rowwise=False,
        swizzle=("1", "1"),
    )
    assert "MX block-scaled" in unsupported_reason(swizzled)
    assert "complex64" in unsupported_reason(
        GemmProblem(
            "gemm",
            "N",
            "N",
            8,
            8,
            8,
            a_type="complex64",
            b_type="complex64",
            c_type="complex64",
            compute_type="complex64",
        )
    )


@pytest.mark.parametrize(
    ("version", "generation", "fnuz"),
    [
        ("1000", "2024", "f8_r"),
        ("1100", "2024", "f8_r"),
        ("1200", "2025", "f8_fnuz_r"),
        ("100200", "2025", "f8_fnuz_r"),
    ],
)
def test_each_generation_gets_the_fp8_names_it_takes(version, generation, fnuz, monkeypatch):
    """The 2024 client spells the fnuz types f8_r/bf8_r and knows no f8_fnuz_r; the 2025 one takes f8_fnuz_r."""
    gen = Generation.of(version)
    assert gen.name == generation and gen.tuning_file == (generation == "2025")
    problem = GemmProblem(
        "gemm",
        "T",
        "N",
        256,
        64,
        512,
        512,
        512,
        256,
        a_type="float8_e4m3fnuz",
        b_type="float8_e4m3fnuz",
        c_type="float8_e4m3fnuz",
    )
    args = problem_args(problem, gen)
    assert args[args.index("--a_type") + 1] == fnuz and args[args.index("--c_type") + 1] == fnuz
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", generation)
    proc = subprocess.run(
        [DOUBLE, *bench_args(problem, BenchOptions(iters=1, cold_iters=1), 0, "heuristic", None, gen)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr  # the strict double of that generation takes every name
    other = Generation.of("100200" if generation == "2024" else "1000")
    wrong = subprocess.run(
        [DOUBLE, *bench_args(problem, BenchOptions(iters=1, cold_iters=1), 0, "heuristic", None, other)],
        capture_output=True,
        text=True,
    )
    assert generation == "2025" or wrong.returncode != 0, "the 2024 bench refuses f8_fnuz_r"


def test_ocp_fp8_is_not_run_where_the_bench_would_run_fnuz():
    ocp = GemmProblem(
        "gemm", "T", "N", 256, 64, 512, 512, 512, 256, a_type="float8_e4m3fn", b_type="float8_e4m3fn", c_type="bfloat16"
    )
    assert "OCP FP8" in unsupported_reason(ocp, Generation.of("100200"), "gfx942")
    assert unsupported_reason(ocp, Generation.of("100200"), "gfx950") is None

"""FP8 scaled GEMMs (torch._scaled_mm) on AMD, through hipblaslt-bench of each generation (issue 25 item 1):
tuned with their scales, never as plain GEMMs; keys a bench cannot express skipped with the reason."""

from __future__ import annotations

import json
import subprocess

import pytest

from pipeline.backends.hipblaslt import HipblasltBackend
from pipeline.formats.hipblaslt_bench import Generation, problem_args, scale_spelling_from_help, unsupported_reason
from pipeline.formats.hipblaslt_override import read_override
from pipeline.formats.tunableop import TunableOpEntry, parse_key, read_file
from pipeline.stages.merge.results_merge import merge_results

from .helpers import DOUBLE, FIXTURES, amd_dag

SCALED = FIXTURES / "tunableop" / "torch2.11_rocm_scaled_untuned0.csv"
ROWWISE = parse_key(
    "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN", "tn_4096_8_4096_ld_4096_4096_4096_rw_1_bias_None"
)


@pytest.mark.parametrize(
    ("version", "tensorwise", "rowwise", "fp8"), [("1000", "s", "v", "f8_r"), ("100200", "1", "2", "f8_fnuz_r")]
)
def test_the_scale_options_each_generation_takes(version, tensorwise, rowwise, fp8):
    gen = Generation.of(version)
    tensor = parse_key(
        "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN",
        "tn_4096_8_4096_ld_4096_4096_4096_rw_0_bias_BFloat16",
    )
    args = problem_args(tensor, gen)
    assert args[args.index("--scaleA") + 1] == args[args.index("--scaleB") + 1] == tensorwise
    assert args[args.index("--a_type") + 1] == fp8 and args[args.index("--bias_type") + 1] == "bf16_r"
    args = problem_args(ROWWISE, gen)
    assert args[args.index("--scaleA") + 1] == rowwise and "--bias_vector" not in args


@pytest.mark.parametrize(
    ("key", "why"),
    [
        (
            (
                "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN",
                "tn_4096_128_4096_ld_4096_4096_4096_a_Float8_e4m3fn_b_Float8_e4m3fn_c_BFloat16_as_Float_bs_Float_ast_0_bst_0"
                "_dscale_0_fast_1_bias_None",
            ),
            "a CUDA scaled-GEMM key",
        ),
        (
            (
                "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN",
                "tn_4096_8_4096_ld_4096_4096_4096_rw_0_bias_None_swz_1_1",
            ),
            "MX block-scaled GEMM",
        ),
        (
            (
                "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN",
                "tn_4096_8_4096_ld_4096_4096_4096_rw_0_bias_None",
            ),
            "OCP FP8",
        ),
    ],
)
def test_a_scale_form_the_bench_cannot_express_is_skipped_with_its_reason(key, why):
    assert why in unsupported_reason(parse_key(*key), Generation.of("100200"), "gfx942")


def test_a_scaled_row_never_lands_under_a_plain_key_nor_the_reverse():
    plain = parse_key("GemmTunableOp_BFloat16_TN", "tn_4096_8_4096_ld_4096_4096_4096")
    validators = {"PT_VERSION": "2.11.0", "HIPBLASLT_VERSION": "100200-de5c1aebb6-dirty"}
    from pipeline.formats.tunableop import TunableOpFile

    files = [
        TunableOpFile("a.csv", validators, [TunableOpEntry.from_problem(ROWWISE, "Gemm_Hipblaslt_2061", 0.01)]),
        TunableOpFile("b.csv", validators, [TunableOpEntry.from_problem(plain, "Gemm_Hipblaslt_3150", 0.005)]),
    ]
    merged = merge_results(files)
    by_op = {e.op_signature: e.solution for e in merged.entries}
    assert by_op == {
        "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN": "Gemm_Hipblaslt_2061",
        "GemmTunableOp_BFloat16_TN": "Gemm_Hipblaslt_3150",
    }, "the faster plain row took nothing over"


@pytest.mark.parametrize("generation", ["2024", "2025"])
def test_scaled_gemms_are_tuned_with_their_scales_through_the_dag(generation, tmp_path):
    settings = tmp_path / "settings.log"
    command, env = amd_dag(tmp_path, "fp8", "", "TuneWorkload", untuned=SCALED, generation=generation, rounds=1)
    env["HIPBLASLT_DOUBLE_SETTINGS_LOG"] = str(settings)
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "fp8"
    results = json.loads((run / "bench" / "results.json").read_text())
    skipped = {r["problem"]["scale_a_recipe"] is not None: r["skipped"] for r in results if r["skipped"]}
    assert list(skipped) == [True] and "CUDA scaled-GEMM key" in skipped[True], "only the CUDA key is skipped"
    tuned = [r for r in results if r["problem"]["op"] == "scaled_gemm" and not r["skipped"]]
    assert len(tuned) == 4 and all(not r["errors"] and r["default_us"] for r in tuned)
    # every run of a scaled problem (heuristic, search, Validate's index runs) carried its scales
    want = {"2024": {False: "s", True: "v"}, "2025": {False: 1, True: 2}}[generation]
    runs = [json.loads(line) for line in settings.read_text().splitlines()]
    fp8 = [r for r in runs if "f8" in r["a_type"]]
    assert {r["method"] for r in fp8} == {"heuristic", "all", "index"}
    assert {(r["scaleA"], r["scaleB"]) for r in fp8} == {(want[False], want[False]), (want[True], want[True])}, (
        "an FP8 run without its scales is another problem"
    )
    assert {(r["scaleA"], r["scaleB"]) for r in runs if r["a_type"] == "bf16_r"} == {(None, None)}
    bundle = read_file(run / "bundle" / "tunableop_results.csv")
    scaled_rows = [e for e in bundle.entries if e.op_signature.startswith("ScaledGemmTunableOp_")]
    assert all(e.solution.startswith("Gemm_Hipblaslt_") for e in scaled_rows)
    assert all("_rw_" in e.params_signature for e in scaled_rows), "under the key TunableOp wrote"
    manifest = json.loads((run / "bundle" / "manifest.json").read_text())
    if generation == "2025" and (run / "bundle" / "hipblaslt_override.txt").exists():
        rows = read_override(run / "bundle" / "hipblaslt_override.txt").entries
        shapes = {(dict(r.fields)["m"], dict(r.fields)["n"], dict(r.fields)["a_type"]) for r in rows}
        kept = {e.params_signature for e in scaled_rows}
        both = {f"tn_4096_8_4096_ld_4096_4096_4096_rw_{rw}_bias_None" for rw in (0, 1)}
        if both <= kept:
            assert ("4096", "8", "f8_fnuz_r") not in shapes, "tensorwise and rowwise share the reader's key"
            assert manifest["hipblaslt_override"]["left_out"]


def test_the_scale_spelling_is_read_from_the_help_line_each_client_prints():
    """docs/upstream.md, "hipblaslt-bench": the 2024 client's --scaleA line says ``s = scalar, v = vector``,
    the 2025 one's ``0 = None, 1 = scalar, 2 = vector`` (later with ``3 = block``), in the options table."""
    pad = " " * 20
    assert scale_spelling_from_help(f"--scaleA <value>{pad}Apply scale for A buffer. s = scalar, v = vector.") == (
        "letters"
    )
    for said in ("0 = None, 1 = scalar, 2 = vector.", "0 = None, 1 = scalar, 2 = vector, 3 = block."):
        assert scale_spelling_from_help(f"--bias_vector\n--scaleA <value>{pad}Apply scale for A buffer. {said}") == (
            "numbers"
        )
    assert scale_spelling_from_help("--scaleA <value>  Apply scale for A buffer.") is None
    assert scale_spelling_from_help("--scaleB <value>  s = scalar") is None, "the A line decides"


@pytest.mark.parametrize(
    ("generation", "help_says", "sent", "timed"),
    [
        ("2024", "", "s", 1),
        ("2025", "", "1", 1),
        ("2025", "letters", "s", 1),  # a version past 0.12 whose client still reads letters: 1 would be no scale
        ("2025", "neither", "1", 1),  # the help says neither: the version decides
    ],
)
def test_a_scaled_gemm_is_sent_the_scales_the_installed_bench_reads(
    generation, help_says, sent, timed, monkeypatch, tmp_path, caplog
):
    settings = tmp_path / "settings.jsonl"
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", generation)
    monkeypatch.setenv("HIPBLASLT_DOUBLE_SCALE_HELP", help_says)
    monkeypatch.setenv("HIPBLASLT_DOUBLE_SETTINGS_LOG", str(settings))
    tensorwise = parse_key(
        "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN",
        "tn_4096_8_4096_ld_4096_4096_4096_rw_0_bias_None",
    )
    backend = HipblasltBackend(0, DOUBLE)
    args = backend.args(tensorwise, "heuristic")
    assert args[args.index("--scaleA") + 1] == args[args.index("--scaleB") + 1] == sent
    backend.heuristic(tensorwise)
    runs = [json.loads(line) for line in settings.read_text().splitlines()]
    assert runs[-1]["scales"] == [timed, timed], "the bench timed the scaled problem, not an unscaled one"
    assert ("neither" in caplog.text) == (help_says == "neither")

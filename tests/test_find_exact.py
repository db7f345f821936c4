"""The find_exact driver against the find_exact and hipblaslt-bench doubles in a fake hipBLASLt build."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from pipeline.backends.base import TuneSettings
from pipeline.backends.hipblaslt import ToolMissing
from pipeline.backends.slots import VISIBLE_DEVICES
from pipeline.formats.find_exact import parse_result_name
from pipeline.formats.logic import parse_logic, tensile_ld_order
from pipeline.formats.tunableop import read_file
from pipeline.problem import GemmProblem
from pipeline.stages.bench.config_tool import tune_configs
from pipeline.stages.bench.find_exact import FindExact, locate
from pipeline.stages.bench.tune import result_path
from pipeline.stages.configs import render as configs

from .fake_hipblaslt_build import fake_build
from .helpers import FIXTURES, ROOT, luigi_argv
from .logic_factory import logic as make_logic
from .logic_factory import solution

PROBLEMS = [
    GemmProblem("gemm", "T", "N", 6144, 128, 4096, 4096, 4096, 6144),
    GemmProblem("gemm", "T", "N", 4096, 2, 14336, 14336, 14336, 4096),
    GemmProblem("gemm", "T", "N", 2048, 128, 4096, 4100, 4100, 2048),
]  # non-packed: find_exact can't


def test_locate_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("HIPBLASLT_ROOT", raising=False)
    with pytest.raises(ToolMissing, match=r"pass --hipblaslt-root DIR or set \$HIPBLASLT_ROOT"):
        locate()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ToolMissing) as err:
        locate(str(tmp_path / "empty"))
    assert all(part in str(err.value) for part in ("no hipblaslt-bench", "no MatchTable.yaml", "no find_exact.py"))
    build = fake_build(tmp_path / "2024", "2024")
    monkeypatch.setenv("HIPBLASLT_ROOT", str(build))
    found = locate()
    assert found.bench == build / "clients" / "staging" / "hipblaslt-bench"
    assert found.script == build.parent.parent / "utilities" / "find_exact.py"
    newer = locate(str(fake_build(tmp_path / "2025")))
    assert newer.bench.parent.name == "clients" and newer.match_table.parent.name == "device-library"


def test_result_names_and_the_ld_order_fix():
    name = parse_result_name("result_TN_BBS_6144x128x1x4096.txt")
    assert (name.transa, name.gemm_type, name.m, name.n, name.batch, name.k) == ("T", "BBS", 6144, 128, 1, 4096)
    assert parse_result_name("result_NN_BB_HHS_Bias_64x64x2x32.txt").gemm_type == "BB_HHS_Bias"
    assert parse_result_name("find_exact.log") is None
    logic = parse_logic(yaml.safe_dump(make_logic([[[64, 32, 1, 16, 11, 22, 33, 44], [0, 1.0]]], [solution(64)])))
    assert tensile_ld_order(logic) == 1
    assert logic.exact_logic[0][0] == [64, 32, 1, 16, 44, 33, 11, 22], "LDD, LDC, LDA, LDB"


def test_tune_configs_through_find_exact(tmp_path, monkeypatch):
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", "2025")
    tool = FindExact(0, str(fake_build(tmp_path)))
    configs.write_configs(tmp_path / "configs", PROBLEMS, configs.ConfigSettings(padding="off"))
    out = tmp_path / "bench"
    tune_configs(tool, PROBLEMS, tmp_path / "configs", out, TuneSettings())
    results = {p.m: json.loads(result_path(out, p).read_text()) for p in PROBLEMS}
    assert "find_exact cannot take leading dimensions" in results[2048]["skipped"]
    for m in (6144, 4096):
        assert results[m]["default_us"] > 0 and not results[m]["errors"]
        assert results[m]["winner"].startswith("Gemm_Hipblaslt_")
        assert results[m]["record"]["solution"]["Tuner"] == "find_exact"
    runtime = json.loads((out / "runtime.json").read_text())
    assert runtime["tuner"] == "find_exact" and runtime["backend"] == "hipblaslt"
    raw = yaml.safe_load(next((out / "find_exact").glob("*/1_LogicYaml/*.yaml")).read_text())
    fixed = yaml.safe_load((out / "logic-tool" / "aquavanjaram_Cijk_Alik_Bljk_BBS_BH.yaml").read_text())
    assert raw[11] == fixed[11] == "Equality" and raw[8] is None
    lds = {tuple(row[0][:4]): row[0][4:] for row in fixed[7]}
    assert lds[(6144, 128, 1, 4096)] == [6144, 6144, 4096, 4096], "ldd, ldc, lda, ldb"
    assert [s["SolutionIndex"] for s in fixed[5]] == list(range(len(fixed[5])))


def test_tune_workload_with_find_exact(tmp_path):
    build = fake_build(tmp_path)  # the 2025 tree (bf16 needs its find_exact.py)
    untuned = tmp_path / "untuned0.csv"
    untuned.write_text(
        "".join(f"GemmTunableOp_BFloat16_TN,tn_{p.m}_{p.n}_{p.k}_ld_{p.lda}_{p.ldb}_{p.ldc}\n" for p in PROBLEMS)
    )
    proc = subprocess.run(
        luigi_argv(
            "TuneWorkload",
            workdir=str(tmp_path / "w"),
            run_name="night",
            untuned=str(untuned),
            backend="find_exact",
            hipblaslt_root=str(build),
            validators_from=str(FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv"),
            validate_rounds=1,  # the subject is find_exact.py, not the validation
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"), "HIPBLASLT_DOUBLE_GENERATION": "2025"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "night"
    assert json.loads((run / "validate" / "measurements.json").read_text())["meta"]["measured_with"] == (
        "hipblaslt-bench"
    )
    bundle = read_file(run / "bundle" / "tunableop_results.csv")
    assert all(e.solution.startswith("Gemm_Hipblaslt_") for e in bundle.entries)
    logic = yaml.safe_load((run / "merge" / "logic" / "aquavanjaram_Cijk_Alik_Bljk_BBS_BH.yaml").read_text())
    assert logic[11] == "Equality" and logic[7], "find_exact's logic, merged"


@pytest.mark.parametrize("generation", ["2024", "2025"])
def test_find_exact_benches_on_the_gpu_the_worker_claimed(generation, tmp_path, monkeypatch):
    """The heuristic it is judged against runs on the worker's GPU (--device 1); find_exact.py must bench
    there too: the 2024 script knows no device, the 2025 one reads TestConfig.Device."""
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", generation)
    monkeypatch.setenv("HIPBLASLT_DOUBLE_SETTINGS_LOG", str(tmp_path / "settings.log"))
    for name in VISIBLE_DEVICES:  # the worker's GPU 1 is the machine's GPU 1, whatever the caller's shell set
        monkeypatch.delenv(name, raising=False)
    half = [
        GemmProblem(
            "gemm", "T", "N", 4096, 128, 4096, 4096, 4096, 4096, a_type="float16", b_type="float16", c_type="float16"
        )
    ]
    tool = FindExact(1, str(fake_build(tmp_path, generation)))
    configs.write_configs(tmp_path / "configs", half, configs.ConfigSettings(padding="off"))
    tune_configs(tool, half, tmp_path / "configs", tmp_path / "bench", TuneSettings())
    runs = [json.loads(line) for line in (tmp_path / "settings.log").read_text().splitlines()]
    physical = {int(r["visible"].split(",")[r["device"]]) if r["visible"] else r["device"] for r in runs}
    assert physical == {1}, f"runs landed on GPUs {physical}: {runs}"


def test_the_2024_find_exact_is_not_asked_for_bf16(tmp_path, monkeypatch):
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", "2024")
    tool = FindExact(0, str(fake_build(tmp_path, "2024")))
    configs.write_configs(tmp_path / "configs", PROBLEMS, configs.ConfigSettings(padding="off"))
    tune_configs(tool, PROBLEMS, tmp_path / "configs", tmp_path / "bench", TuneSettings())
    results = [json.loads(result_path(tmp_path / "bench", p).read_text()) for p in PROBLEMS[:2]]
    assert all("bf16 needs the 2025 find_exact.py" in r["skipped"] for r in results)
    assert not (tmp_path / "bench" / "find_exact").exists(), "the script never ran on a config it asserts on"

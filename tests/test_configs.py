from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.problem import GemmProblem
from pipeline.stages.configs.render import (
    ConfigSettings,
    find_exact_reason,
    plan_configs,
    tensile_reason,
    write_configs,
)
from pipeline.stages.gather.shapes import read_shapes_json

from .helpers import FIXTURES

GOLDEN = Path(__file__).parent / "golden"
SHAPES = FIXTURES / "configs" / "shapes.json"


def _problems() -> list[GemmProblem]:
    return [record.problem for record in read_shapes_json(SHAPES)]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("golden", "settings"),
    [
        ("configs_gfx942_compact", ConfigSettings(preset="mi300x-compact")),
        ("configs_gfx90a", ConfigSettings(arch="gfx90a", preset="quick")),
    ],
)
def test_rendered_files_match_the_golden_files(golden, settings, tmp_path):
    write_configs(tmp_path / "out", _problems(), settings)
    assert _tree(tmp_path / "out") == _tree(GOLDEN / golden)


def test_find_exact_files_follow_the_schema(tmp_path):
    write_configs(tmp_path, _problems(), ConfigSettings(split_k=(0, 4)))
    files = sorted((tmp_path / "find_exact").glob("*.yaml"))
    assert files
    for path in files:
        config = yaml.safe_load(path.read_text())
        assert set(config) == {"Bench", "CreateLogic"} and config["CreateLogic"] == {}
        bench = config["Bench"]
        assert set(bench) == {"ProblemType", "TestConfig", "TuningParameters", "ProblemSizes"}
        pt = bench["ProblemType"]
        assert pt["ComputeDataType"] == "S" and pt["DataTypeC"] == pt["DataTypeD"]
        assert {pt["DataTypeA"], pt["DataTypeB"], pt["DataTypeC"]} <= {"H", "S", "B", "FP8", "FP8N"}
        assert pt["TransposeA"] in (0, 1) and isinstance(pt["UseBias"], bool)
        assert bench["TestConfig"] == {
            "ColdIter": 20,
            "Iter": 100,
            "AlgoMethod": "all",
            "RotatingBuffer": 512,
            "Device": 0,
        }, "the 2025 script's device (HIP_VISIBLE_DEVICES maps it)"
        assert bench["TuningParameters"] == {"SplitK": [0, 4]}
        assert all(len(size) == 4 and all(isinstance(v, int) for v in size) for size in bench["ProblemSizes"])
        assert bench["ProblemSizes"] == sorted(bench["ProblemSizes"])


def test_tensile_files_follow_the_schema(tmp_path):
    write_configs(tmp_path, _problems(), ConfigSettings())
    files = sorted((tmp_path / "tensile").glob("*.yaml"))
    assert files
    for path in files:
        config = yaml.safe_load(path.read_text())
        assert list(config) == ["GlobalParameters", "BenchmarkProblems", "LibraryLogic", "LibraryClient"]
        assert config["GlobalParameters"]["NumElementsToValidate"] == 0
        ((problem_type, group),) = config["BenchmarkProblems"]
        assert problem_type["OperationType"] == "GEMM" and problem_type["Batched"] is True
        for empty in (
            "InitialSolutionParameters",
            "BenchmarkForkParameters",
            "JoinParameters",
            "BenchmarkJoinParameters",
        ):
            assert empty in group and group[empty] is None
        ((pairs,),) = (p["Groups"] for p in group["ForkParameters"] if "Groups" in p)
        tile, stagger = {"MatrixInstruction", "DepthU", "1LDSBuffer"}, {"StaggerU", "StaggerUStride"}
        assert pairs and all(tile <= set(pair) <= tile | stagger for pair in pairs), "upstream's tile keys alone"
        assert {pair["1LDSBuffer"] for pair in pairs} <= {0, 1} and all(len(p["MatrixInstruction"]) == 9 for p in pairs)
        if "_BBS_" in path.name:  # upstream's bf16 tiles use both, 89 of 105 one LDS buffer
            assert {pair["1LDSBuffer"] for pair in pairs} == {0, 1} and len(pairs) == 89
        assert not any("DepthU" in p or "MatrixInstruction" in p for p in group["ForkParameters"] if "Groups" not in p)
        wgm = next(p["WorkGroupMapping"] for p in group["ForkParameters"] if "WorkGroupMapping" in p)
        assert all(v % 8 == 0 for v in wgm)
        final = group["BenchmarkFinalParameters"]
        assert list(final[0]) == ["ProblemSizes"]
        assert all(len(size["Exact"]) == 8 for size in final[0]["ProblemSizes"])
        assert config["LibraryLogic"] == {
            "ScheduleName": "aquavanjaram",
            "DeviceNames": ["Device 0049", "Device 0050"],
            "ArchitectureName": "gfx942",
            "LibraryType": "Equality",
        }
        assert config["LibraryClient"] is None


def test_padding_off_and_links_to_originals(tmp_path):
    data = write_configs(tmp_path / "off", _problems(), ConfigSettings(padding="off"))
    assert data["padded"] == [] and data["padding"]["rule"] is None
    data = write_configs(tmp_path / "on", _problems(), ConfigSettings())
    originals = {p["original"] for p in data["padded"]}
    assert "GemmTunableOp_BFloat16_TN,tn_6144_128_4096_ld_4096_4096_6144" in originals
    bf16 = yaml.safe_load((tmp_path / "on" / "tensile" / "Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml").read_text())
    exact = [s["Exact"] for s in bf16["BenchmarkProblems"][0][1]["BenchmarkFinalParameters"][0]["ProblemSizes"]]
    assert [6144, 128, 1, 4096, 6144, 6144, 4096, 4096] in exact
    assert [6144, 128, 1, 4096, 6144, 6144, 4224, 4224] in exact
    text = (tmp_path / "on" / "find_exact" / "Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml").read_text()
    assert "#   GemmTunableOp_BFloat16_TN,tn_6144_128_4096_ld_4224_4224_6144 (padded from" in text
    assert "tn_2048_128_4096_ld_4100_4100_2048 (recorded with non-packed ld's)" in text


def _gemm(dtype: str, compute: str = "float32", op: str = "gemm", **extra) -> GemmProblem:
    return GemmProblem(
        op,
        "T",
        "N",
        256,
        256,
        256,
        a_type=dtype,
        b_type=dtype,
        c_type="bfloat16" if op == "scaled_gemm" else dtype,
        compute_type=compute,
        **extra,
    )


@pytest.mark.parametrize(
    ("problem", "find_exact", "tensile"),
    [
        (_gemm("float16"), None, None),
        (_gemm("bfloat16"), None, None),
        (_gemm("float32"), None, None),
        (_gemm("float64", "float64"), "no type letter for float64", None),
        (_gemm("float32", "tf32"), "tf32", "tf32"),
        (
            _gemm("complex64", "complex64"),
            "no type letter for complex64",
            "no TensileLite DataType letter for complex64",
        ),
        (_gemm("float8_e4m3fn", op="scaled_gemm"), "no --scaleA/--scaleB", "OCP FP8"),  # gfx942 runs fnuz
        (_gemm("float8_e4m3fnuz", op="scaled_gemm", rowwise=False), "no --scaleA/--scaleB", None),
        (_gemm("float8_e4m3fnuz", op="scaled_gemm", rowwise=True), "no --scaleA/--scaleB", None),
        (_gemm("float8_e5m2fnuz", op="scaled_gemm", bias_type="bfloat16"), "no --scaleA/--scaleB", None),
        (
            GemmProblem(
                "scaled_gemm",
                "T",
                "N",
                256,
                256,
                256,
                a_type="float8_e4m3fnuz",
                b_type="float8_e5m2",
                c_type="bfloat16",
            ),
            "no --scaleA/--scaleB",
            "OCP FP8",
        ),
        (_gemm("float8_e4m3fnuz", op="scaled_gemm", swizzle=(1, 1)), "no --scaleA/--scaleB", "MX block-scaled"),
        (_gemm("float32", compute_suffix="bf16x9_r", lda=256, ldb=256, ldc=256), "bf16x9_r", "bf16x9_r"),
        (GemmProblem("gemm", "T", "N", "*", 256, 256), "wildcard", "wildcard"),
    ],
)
def test_every_dtype_mapping_is_tuned_or_skipped_with_a_reason(problem, find_exact, tensile):
    for reason, expected in ((find_exact_reason(problem), find_exact), (tensile_reason(problem, "gfx942"), tensile)):
        assert (reason is None) if expected is None else (expected in reason)
    plan = plan_configs([problem], ConfigSettings())
    skipped_tools = {s.tool for s in plan.skipped}
    assert ("find_exact" in skipped_tools) == (find_exact is not None)
    assert ("tensile" in skipped_tools) == (tensile is not None)


def test_bad_settings():
    with pytest.raises(ValueError, match="unknown arch 'gfx1030'; known: gfx942, gfx90a, gfx950"):
        ConfigSettings(arch="gfx1030")
    with pytest.raises(ValueError, match=r"SplitK values must be 0\.\.255"):
        ConfigSettings(split_k=(256,))
    with pytest.raises(
        ValueError, match=r"--tensile-preset 'nope': no such preset in .*; known: mi300x, mi300x-compact, quick"
    ):
        write_configs(Path("/nonexistent/never-written"), _problems(), ConfigSettings(preset="nope"))


def test_a_preset_that_cannot_fork_is_refused_naming_the_presets_file(tmp_path):
    import shutil

    from pipeline.errors import BadInput
    from pipeline.stages.configs.render import TEMPLATES

    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    presets_file = templates / "tensile_presets.yaml"
    presets = yaml.safe_load(presets_file.read_text())

    def without_depth_u(preset: dict) -> dict:
        return {
            **preset,
            "fork": [f for f in preset["fork"] if "DepthU" not in f],
            "common": [c for c in preset.get("common", []) if "DepthU" not in c],
        }

    cases = {
        "sets no DepthU": without_depth_u,
        "has no MatrixInstruction for DataType": lambda preset: {**preset, "matrix_instructions": {}},
    }
    for said, spoil in cases.items():
        presets_file.write_text(yaml.safe_dump({**presets, "mi300x": spoil(presets["mi300x"])}))
        with pytest.raises(BadInput, match=f"--tensile-preset 'mi300x' {said}.* in {presets_file}"):
            write_configs(tmp_path / "out", _problems(), ConfigSettings(templates=templates))
    presets_file.write_text("mi300x: [unclosed\n")
    with pytest.raises(BadInput, match=rf"(?s){presets_file}: .*line 1, column 9"):
        write_configs(tmp_path / "out", _problems(), ConfigSettings(templates=templates))
    assert not (tmp_path / "out").exists(), "refused before any file was written"


def test_cli_configs(tmp_path, capsys):
    assert main(["configs", str(SHAPES), "--out", str(tmp_path / "c"), "--padding", "off"]) == 0
    out = capsys.readouterr().out
    assert "9 config files for gfx942:" in out and "0 padded problems:" in out and "5 skipped:" in out
    assert json.loads((tmp_path / "c" / "configs.json").read_text())["padding"]["mode"] == "off"
    assert main(["configs", str(SHAPES), "--out", str(tmp_path / "d"), "--arch", "gfx1030"]) == 12
    assert "unknown arch 'gfx1030'" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_a_tensilelite_generation_without_the_arch_is_refused_in_one_line(tmp_path, capsys):
    """The 2024 tree's TensileLite has no gfx950 (docs/upstream.md, "TensileLite and the archs"): refused, naming
    the generation that has it; the 2025 tree writes gfx950 configs."""
    from pipeline.errors import BadInput

    with pytest.raises(BadInput, match=r"the 2024 TensileLite tree has no gfx950.*--tensile-generation 2025"):
        ConfigSettings(arch="gfx950", tensile_generation="2024")
    argv = ["configs", str(SHAPES), "--out", str(tmp_path / "o"), "--arch", "gfx950", "--tensile-generation", "2024"]
    assert main(argv) == 12 and not (tmp_path / "o").exists()
    assert "gfx950 comes with --tensile-generation 2025" in capsys.readouterr().err
    write_configs(tmp_path / "ok", _problems(), ConfigSettings(arch="gfx950", tensile_generation="2025"))
    assert list((tmp_path / "ok" / "tensile").glob("*.yaml"))


def test_the_configs_generation_is_read_from_the_manifest_and_a_torn_one_is_named(tmp_path):
    from pipeline.errors import BadInput
    from pipeline.stages.configs.render import configs_generation

    assert configs_generation(tmp_path) == "2025", "no manifest: configs written before it recorded one"
    write_configs(tmp_path / "old", _problems(), ConfigSettings(tensile_generation="2024"))
    assert configs_generation(tmp_path / "old") == "2024"
    (tmp_path / "configs.json").write_text('{"arch": "gfx942",\n "tensile_generation": ')
    with pytest.raises(BadInput, match=r"configs\.json:2: not a configs manifest"):
        configs_generation(tmp_path)
    (tmp_path / "configs.json").write_text("[]")
    with pytest.raises(BadInput, match=r"configs\.json: not a configs manifest"):
        configs_generation(tmp_path)


def test_gfx950_takes_ocp_fp8_and_refuses_fnuz_with_the_reason(tmp_path):
    """gfx950's FP8 is OCP: upstream's gfx950 logic names F8BS, F8B8BS, B8F8BS (docs/upstream.md), so an OCP
    scaled GEMM is configured as F8 on it, and an fnuz one (what a gfx942 torch records) is skipped saying why."""
    import yaml

    ocp, fnuz = _gemm("float8_e4m3fn", op="scaled_gemm"), _gemm("float8_e4m3fnuz", op="scaled_gemm")
    assert tensile_reason(ocp, "gfx950", "2025") is None
    reason = tensile_reason(fnuz, "gfx950", "2025")
    assert "fnuz FP8 (float8_e4m3fnuz) on gfx950, whose FP8 is OCP" in reason
    assert "OCP FP8" in tensile_reason(ocp, "gfx942", "2025") and tensile_reason(fnuz, "gfx942", "2025") is None
    settings = ConfigSettings(arch="gfx950", tensile_generation="2025")
    plan = plan_configs([ocp, fnuz], settings)
    assert [(s.tool, "fnuz FP8" in s.reason) for s in plan.skipped if s.tool == "tensile"] == [("tensile", True)]
    write_configs(tmp_path / "c", [ocp, fnuz], settings)
    (config,) = (tmp_path / "c" / "tensile").glob("*.yaml")
    problem_type = yaml.safe_load(config.read_text())["BenchmarkProblems"][0][0]
    assert problem_type["DataType"] == "F8" and "F8N" not in config.name and "_F8BS_" in config.name

"""TensileLite's fork rules (pipeline/formats/tensile_forks.py): the figures they give, every preset keeping forks
for every arch, type and transpose, and, where ``GEMM_TUNE_TENSILELITE`` points at a TensileLite tree, the tree
itself agreeing with them (tests/tensilelite_forks.py runs its Python with stand-ins for the ROCm tools)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.formats.tensile_forks import ARCH_LDS, fork_refusal, lds_limit
from pipeline.problem import GemmProblem
from pipeline.stages.configs.render import (
    TEMPLATES,
    ConfigSettings,
    _fork_plan,
    _matrix_instructions,
    forks_per_pair,
    load_presets,
    write_configs,
)

PROBE = Path(__file__).with_name("tensilelite_forks.py")
MT128 = [16, 16, 16, 1, 1, 4, 4, 2, 2]  # 16x16 MFMA, 4x4 wave tiles, 2x2 waves: a 128x128 macro tile
TYPES = {"2024": ("h", "b", "s", "d", "F8"), "2025": ("h", "b", "s", "d", "F8N")}
FP8_ARCHS = ("gfx942", "gfx950")


def test_a_128_tile_at_depth_64_needs_more_lds_than_mi300_has():
    """The issue's figure: fp16 TN, MT 128x128, DepthU 64: two padded 17408-byte tiles, doubled for the prefetch
    and rounded up to a power of two, 100352 bytes > 64 KiB; DepthU 32 fits; gfx950's 160 KiB holds both."""
    assert fork_refusal("h", True, False, MT128, 64, 65536) == "Kernel Uses 100352 > 65536 bytes of LDS"
    assert fork_refusal("h", True, False, MT128, 32, 65536) is None
    assert fork_refusal("h", True, False, MT128, 64, lds_limit("gfx950", "2025")) is None
    assert fork_refusal("h", True, False, MT128, 64, 65536, prefetch_global_read=False) is None, "one buffer"


def test_depth_below_the_instruction_k_or_beyond_the_stagger_stride_is_refused():
    assert fork_refusal("F8", True, False, [16, 16, 32, 1, 1, 1, 1, 2, 2], 16, 65536) == (
        "LoopIters need to greater than 0"
    )
    assert fork_refusal("s", True, False, [16, 16, 4, 1, 1, 1, 1, 2, 2], 128, 65536).startswith(
        "StaggerUStride=256 is less than size of DepthU=128"
    )


@pytest.mark.parametrize(("generation", "arch"), [(g, a) for g, archs in ARCH_LDS.items() for a in archs])
@pytest.mark.parametrize("preset", list(load_presets(TEMPLATES)))
def test_every_preset_keeps_forks_for_every_type_and_transpose(generation, arch, preset):
    table = load_presets(TEMPLATES)[preset]
    for data_type in TYPES[generation]:
        if data_type.startswith("F8") and arch not in FP8_ARCHS:
            continue
        for trans_a, trans_b in itertools.product((False, True), repeat=2):
            problem_type = {"DataType": data_type, "TransposeA": trans_a, "TransposeB": trans_b}
            settings = ConfigSettings(arch=arch, preset=preset, tensile_generation=generation)
            plan = _fork_plan(table, settings, problem_type, _matrix_instructions(table, data_type))
            assert plan.kept, f"{preset} {arch} {data_type} {trans_a=} {trans_b=}: {plan.lines()}"


def _problems(arch: str, generation: str) -> list[GemmProblem]:
    problems = [
        GemmProblem("gemm", ta, tb, 4096, 512, 4096, a_type=t, b_type=t, c_type=t)
        for t in ("float16", "bfloat16", "float32")
        for ta, tb in itertools.product("NT", repeat=2)
    ]
    if arch in FP8_ARCHS:
        fp8 = "float8_e4m3fnuz" if generation == "2024" or arch == "gfx942" else "float8_e4m3fn"
        problems.append(
            GemmProblem(
                "scaled_gemm",
                "T",
                "N",
                4096,
                512,
                4096,
                a_type=fp8,
                b_type=fp8,
                c_type="bfloat16",
                scale_a_type="float32",
                scale_b_type="float32",
            )
        )
    return problems


def test_the_quick_preset_writes_gfx942_configs_without_the_forks_lds_refuses(tmp_path):
    data = write_configs(tmp_path, _problems("gfx942", "2025"), ConfigSettings(preset="quick"))
    assert data["forks"] and all(0 < f["kept"] <= f["total"] for f in data["forks"].values())
    text = (tmp_path / "tensile" / "Cijk_Alik_Bljk_HHS_BH_UserArgs.yaml").read_text()
    assert "#   [16, 16, 16, 1, 1, 4, 4, 2, 2] DepthU 64: Kernel Uses 100352 > 65536 bytes of LDS" in text
    ((_, group),) = yaml.safe_load(text)["BenchmarkProblems"]
    ((pairs,),) = (f["Groups"] for f in group["ForkParameters"] if "Groups" in f)
    assert {"MatrixInstruction": MT128, "DepthU": 64} not in pairs
    assert {"MatrixInstruction": MT128, "DepthU": 32} in pairs


TREE = os.environ.get("GEMM_TUNE_TENSILELITE")


def _tree_generation() -> str:
    """Skip unless a 2024-layout TensileLite tree whose Python can run here is at hand; else its generation."""
    if not TREE:
        pytest.skip("GEMM_TUNE_TENSILELITE is not set: point it at a TensileLite tree (hipBLASLt's tensilelite)")
    if not (Path(TREE) / "Tensile" / "SolutionStructs.py").is_file():
        pytest.skip(f"{TREE}: not a 2024-layout TensileLite tree (the 2025 tree needs its rocisa extension built)")
    missing = [m for m in ("joblib", "msgpack", "yaml") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"TensileLite's Python needs {', '.join(missing)} (pip install {' '.join(missing)})")
    return "2024"


def _probe(*args: str) -> object:
    done = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("preset", list(load_presets(TEMPLATES)))
def test_the_tree_keeps_every_fork_the_configs_write(arch, preset, tmp_path):
    generation = _tree_generation()
    settings = ConfigSettings(arch=arch, preset=preset, tensile_generation=generation)
    data = write_configs(tmp_path, _problems(arch, generation), settings)
    files = sorted((tmp_path / "tensile").glob("*.yaml"))
    counts = _probe("count", TREE, arch, *map(str, files))
    others = forks_per_pair(load_presets(TEMPLATES)[preset])
    for path in files:
        valid, total = counts[str(path)]
        kept = data["forks"][f"tensile/{path.name}"]["kept"]
        assert valid == total == kept * others, (path.name, valid, total, kept)


@pytest.mark.parametrize("arch", ["gfx942"])
def test_stagger_u_zero_lifts_the_stride_rule_as_the_tree_does(arch, tmp_path):
    """Upstream's MI300X logic runs DepthU 256 and 512 with StaggerU 0 (docs/upstream.md): the tree clears the
    stride then, and the rule applies only with a stagger; the model agrees case by case."""
    _tree_generation()
    cases = [
        {"DataType": data_type, "TransposeA": 1, "TransposeB": 0, "MatrixInstruction": instruction, "DepthU": depth_u,
         "PrefetchGlobalRead": 2, "1LDSBuffer": 1, "StaggerU": stagger, "StaggerUStride": stride}
        for data_type, instruction in (("b", [16, 16, 16, 1, 1, 1, 1, 2, 2]), ("F8", [16, 16, 32, 1, 1, 1, 1, 2, 2]))
        for depth_u in (64, 128, 256, 512)
        for stagger in (0, 8, 32)
        for stride in (128, 256, 1024, -1)
    ]  # fmt: skip
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    found = _probe("solutions", TREE, arch, str(tmp_path / "cases.json"))
    ours = [
        fork_refusal(c["DataType"], True, False, c["MatrixInstruction"], c["DepthU"], lds_limit(arch, "2024"), True,
                     True, c["StaggerU"], c["StaggerUStride"])
        for c in cases
    ]  # fmt: skip
    differ = [(c, theirs, mine) for c, theirs, mine in zip(cases, found, ours, strict=True) if theirs != mine]
    assert not differ, f"{len(differ)} of {len(cases)} differ, e.g. {differ[:3]}"
    staggered = [r for c, r in zip(cases, found, strict=True) if c["StaggerU"] and c["StaggerUStride"] == 128]
    assert any(r and r.startswith("StaggerUStride=") for r in staggered), "the rule still bites with a stagger"
    assert all(
        r is None or not r.startswith("StaggerU") for c, r in zip(cases, found, strict=True) if not c["StaggerU"]
    )


@pytest.mark.parametrize(("arch", "max_lds"), [("gfx942", None), ("gfx90a", None), ("gfx942", 163840)])
def test_the_rules_agree_with_the_tree_solution_by_solution(arch, max_lds, tmp_path):
    _tree_generation()
    types = {
        "h": [MT128, [32, 32, 8, 1, 1, 2, 2, 2, 2], [16, 16, 16, 1, 1, 1, 1, 2, 2], [16, 16, 16, 1, 1, 8, 8, 2, 2]],
        "s": [[16, 16, 4, 1, 1, 4, 4, 2, 2], [32, 32, 2, 1, 1, 1, 1, 2, 2]],
        "d": [[16, 16, 4, 1, 1, 2, 2, 2, 2]],
    }
    if arch == "gfx942":
        types["F8"] = [[16, 16, 32, 1, 1, 4, 8, 2, 2], [32, 32, 16, 1, 1, 2, 2, 2, 2]]
    cases = [
        {
            "DataType": data_type,
            "TransposeA": ta,
            "TransposeB": tb,
            "MatrixInstruction": instruction,
            "DepthU": depth_u,
            "PrefetchGlobalRead": prefetch,
            "1LDSBuffer": one,
        }
        for data_type, instructions in types.items()
        for instruction in instructions
        for ta, tb in itertools.product((0, 1), repeat=2)
        for depth_u in (16, 32, 64, 128, 256)
        for prefetch in (0, 1, 2)
        for one in (0, 1)
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    found = _probe("solutions", TREE, arch, str(tmp_path / "cases.json"), *([str(max_lds)] if max_lds else []))
    limit = max_lds or lds_limit(arch, "2024")
    ours = [
        fork_refusal(
            c["DataType"],
            bool(c["TransposeA"]),
            bool(c["TransposeB"]),
            c["MatrixInstruction"],
            c["DepthU"],
            limit,
            bool(c["PrefetchGlobalRead"]),
            bool(c["1LDSBuffer"]),
        )
        for c in cases
    ]
    differ = [(c, theirs, mine) for c, theirs, mine in zip(cases, found, ours, strict=True) if theirs != mine]
    assert not differ, f"{len(differ)} of {len(cases)} differ, e.g. {differ[:3]}"
    assert 0 < sum(r is None for r in found) < len(cases)


HIPBLASLT = os.environ.get("GEMM_TUNE_HIPBLASLT")  # a hipBLASLt checkout, for its shipped logic


@pytest.mark.skipif(not HIPBLASLT, reason="GEMM_TUNE_HIPBLASLT names no hipBLASLt checkout (its MI300X logic)")
def test_the_full_preset_forks_every_tile_upstreams_mi300x_logic_ships():
    """``mi300x``'s groups are the tiles of upstream's MI300X TN logic, solution by solution: MatrixInstruction
    with its block, wave tile and wave group, DepthU, 1LDSBuffer and StaggerU (its stride where it staggers)."""
    import yaml

    logic = Path(HIPBLASLT) / "library/src/amd_detail/rocblaslt/src/Tensile/Logic/asm_full/aquavanjaram/gfx942/Equality"
    preset = load_presets(TEMPLATES)["mi300x"]
    for key, letters in (("b", "BBS"), ("h", "HHS"), ("f8", "F8BS")):
        data = yaml.load(
            (logic / f"aquavanjaram_Cijk_Alik_Bljk_{letters}_BH_UserArgs.yaml").read_text(), yaml.CSafeLoader
        )
        shipped = set()
        for s in data[5]:
            mi = [*s["MatrixInstruction"], s["MatrixInstBM"], *s["MIWaveTile"], *s["MIWaveGroup"]]
            stride = {"StaggerUStride": s["StaggerUStride"]} if s["StaggerU"] else {}
            group = {
                "MatrixInstruction": mi,
                "DepthU": s["DepthU"],
                "1LDSBuffer": s["1LDSBuffer"],
                "StaggerU": s["StaggerU"],
            }
            shipped.add(json.dumps({**group, **stride}, sort_keys=True))
        assert {json.dumps(g, sort_keys=True) for g in preset["groups"][key]} == shipped, key

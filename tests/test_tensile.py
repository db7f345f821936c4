"""The TensileLite driver against the Tensile double (tests/doubles/Tensile) and the hipblaslt-bench double."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.backends.hipblaslt import ToolMissing
from pipeline.cli import main
from pipeline.errors import BadInput
from pipeline.formats.tensile import benchmark_winners, config_problems
from pipeline.formats.tunableop import read_file
from pipeline.stages.bench.tensile import TensileTool, locate

from .helpers import DOUBLES, FIXTURES, ROOT, luigi_argv

GOLDEN = FIXTURES.parent / "golden" / "configs_gfx942_compact" / "tensile" / "Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml"
SCALED = FIXTURES / "tunableop" / "torch2.11_rocm_scaled_untuned0.csv"


# The 'char' entries of each generation's DataType table (docs/upstream.md, "TensileLite and FP8").
S24_CHARS = ("S", "D", "C", "Z", "H", "4xi8", "I", "B", "I8", "I64", "X", "F8", "B8", "F8B8", "B8F8")
RL_CHARS = (*S24_CHARS[:11], "F8N", "B8N", "F8B8N", "B8F8N", "F8", "B8", "F8B8", "B8F8", "F6", "B6", "F4")


def fake_tensilelite(root: Path, generation: str = "2025") -> Path:
    """A tensilelite directory: Tensile/bin/Tensile (the double), Tensile/__init__.py with a version and the
    generation's DataType table where that generation keeps it."""
    (root / "Tensile" / "bin").mkdir(parents=True)
    (root / "Tensile" / "bin" / "Tensile").symlink_to(DOUBLES / "Tensile")
    (root / "Tensile" / "__init__.py").write_text('__version__ = "4.33.0"\n')
    table = root / "Tensile" / ("TensileInstructions" if generation == "2024" else "Common") / "DataType.py"
    table.parent.mkdir()
    chars = S24_CHARS if generation == "2024" else RL_CHARS
    table.write_text(
        "class DataType:\n    properties = [\n"
        + "".join(f"        {{\n            'char': '{c}',\n            'reg': 1,\n        }},\n" for c in chars)
        + "    ]\n"
    )
    return root


def test_configs_tensilelite_would_refuse_are_named():
    good = yaml.safe_load(GOLDEN.read_text())
    assert config_problems(good) == []
    bad = yaml.safe_load(GOLDEN.read_text())
    group = bad["BenchmarkProblems"][0][1]
    group["JoinParameters"] = [{"MacroTile": [[64, 64]]}]
    group["BenchmarkFinalParameters"][0]["ProblemSizes"].append({"Exact": [64, 64, 1]})
    bad["Extra"] = 1
    problems = config_problems(bad)
    assert "unknown top-level key 'Extra'" in problems[0]
    assert any("JoinParameters is no longer supported" in p for p in problems)
    assert any("Exact [64, 64, 1] is not 4 or 8 positive integers" in p for p in problems)
    assert config_problems([]) and "BenchmarkFinalParameters[0]" in " ".join(
        config_problems({"BenchmarkProblems": [[{"DataType": "b"}, {"BenchmarkFinalParameters": []}]]})
    )


def test_a_refused_config_never_runs(tmp_path):
    tool = TensileTool(0, str(fake_tensilelite(tmp_path / "tl")), str(DOUBLES / "hipblaslt-bench"))
    config = tmp_path / "bad.yaml"
    data = yaml.safe_load(GOLDEN.read_text())
    data["BenchmarkProblems"][0][1]["InitialSolutionParameters"] = [{"x": 1}]
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(BadInput, match=r"TensileLite would refuse this config: .*InitialSolutionParameters"):
        tool.run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_locate_and_benchmark_winners(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSILE_ROOT", raising=False)
    with pytest.raises(ToolMissing, match=r"--tensile-root DIR or set \$TENSILE_ROOT"):
        locate()
    with pytest.raises(ToolMissing, match="no TensileLite under"):
        locate(str(tmp_path))
    assert locate(str(fake_tensilelite(tmp_path / "tl"))).version == "4.33.0"
    TensileTool(0, str(tmp_path / "tl"), str(DOUBLES / "hipblaslt-bench")).run(GOLDEN, tmp_path / "out")
    csv_path = next((tmp_path / "out" / "2_BenchmarkData").glob("*.csv"))
    winners = benchmark_winners(csv_path.read_text(), str(csv_path))
    win = winners[(6144, 128, 1, 4096, 6144, 6144, 4224, 4224)]  # the padded variant, beside its original
    assert win.time_us > 0 and win.name.startswith("Cijk_Alik_Bljk_BBS_BH_UserArgs_MT")
    assert len(winners) == 5
    with pytest.raises(ValueError, match="no WinnerTimeUS column"):
        benchmark_winners("GFlops, SizeI\n1, 2\n")


def test_tune_workload_with_tensilelite(tmp_path):
    tensilelite = fake_tensilelite(tmp_path / "tl")
    untuned = FIXTURES / "configs" / "untuned0.csv"
    proc = subprocess.run(
        luigi_argv(
            "TuneWorkload",
            workdir=str(tmp_path / "w"),
            run_name="night",
            untuned=str(untuned),
            backend="tensile",
            tensile_root=str(tensilelite),
            hipblaslt_bench=str(DOUBLES / "hipblaslt-bench"),
            validators_from=str(FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv"),
            validate_rounds=1,  # the subject is TensileLite, not the validation
            m_grid="1,16,64",  # a grid: TensileLite writes GridBased logic (the scaled test below keeps Equality)
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "night"
    summary = json.loads((run / "bench" / "summary.json").read_text())
    assert summary["runtime"]["tensile_version"] == "4.33.0" and summary["tensile"]
    assert all(t["tensile_us"] > 0 and t["heuristic_us"] > 0 for t in summary["tensile"])
    merged = sorted(p.name for p in (run / "merge" / "logic").glob("*.yaml"))
    assert any(name.startswith("aquavanjaram_Cijk_") for name in merged), "TensileLite's logic, merged"
    from pipeline.formats.logic import load_logic

    grid_logic = [load_logic(p) for p in (run / "merge" / "logic").glob("aquavanjaram_Cijk_*.yaml")]
    assert grid_logic and all(logic.library_type == "GridBased" for logic in grid_logic)
    assert any(row[0][1] == 16 for logic in grid_logic for row in logic.exact_logic)  # a grid point's row
    assert all(e.solution == "Default" for e in read_file(run / "merge" / "tunableop_results.csv").entries)
    notes = json.loads((run / "report" / "summary.json").read_text())["notes"]
    assert any("take effect once the merged logic is compiled" in note for note in notes)


@pytest.mark.parametrize(("generation", "fp8", "mixed"), [("2025", "F8N", "F8B8N"), ("2024", "F8", "F8B8")])
def test_scaled_fp8_gemms_are_benchmarked_with_their_scales(generation, fp8, mixed, tmp_path):
    """Tensorwise and rowwise FP8 GEMMs go to TensileLite as UseScaleAB Scalar and Vector ProblemTypes, in the
    tree's FP8 letters; TensileLite names every kernel of a scaled ProblemType _SAB/_SABV, so a config that
    forgot the scales would show in the logic. The library's pick they are judged against ran with its scales."""
    settings = tmp_path / "settings.log"
    proc = subprocess.run(
        luigi_argv(
            "TuneWorkload",
            workdir=str(tmp_path / "w"),
            run_name="fp8",
            untuned=str(SCALED),
            backend="tensile",
            tensile_root=str(fake_tensilelite(tmp_path / "tl", generation)),
            tensile_generation=generation,
            hipblaslt_bench=str(DOUBLES / "hipblaslt-bench"),
            validators_from=str(FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv"),
            validate_rounds=1,  # the subject is TensileLite, not the validation
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"),
            "HIPBLASLT_DOUBLE_GENERATION": generation,
            "HIPBLASLT_DOUBLE_SETTINGS_LOG": str(settings),
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "fp8"
    results = {
        (r["problem"]["rowwise"], r["problem"]["b_type"], r["problem"]["bias_type"]): r
        for r in json.loads((run / "bench" / "results.json").read_text())
        if r["problem"]["op"] == "scaled_gemm" and r["problem"]["scale_a_recipe"] is None
    }
    assert len(results) == 4 and all(not r["skipped"] and not r["errors"] for r in results.values())
    logic = {}
    for path in (run / "bench" / "logic").glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        logic[path.name] = data[4]
        assert all(
            s["SolutionNameMin"]
            .split("_MT")[0]
            .endswith({"Scalar": "_SAB", "Vector": "_SABV"}.get(data[4].get("UseScaleAB", ""), "") + "_UserArgs")
            for s in data[5]
        )
    scaled = {(pt["DataType"], pt["UseScaleAB"], pt.get("UseBias", 0)) for pt in logic.values() if "UseScaleAB" in pt}
    assert scaled == {(fp8, "Scalar", 0), (fp8, "Vector", 0), (fp8, "Scalar", 1), (mixed, "Vector", 0)}
    # the configs are named as this generation's TensileLite names their ProblemTypes: its tree has one per config
    configs = {p.stem for p in (run / "configs" / "tensile").glob("*.yaml")}
    named = {p.name.rsplit("_", 1)[0] for p in (run / "bench" / "tensile").glob("*/1_BenchmarkProblems/*")}
    assert configs and configs == named, (configs, named)
    assert any(f"_{fp8}BS_BH_" in name for name in configs), configs
    assert {pt["DataType"] for pt in logic.values() if "UseScaleAB" not in pt} == {"b"}, "the plain GEMM unscaled"
    runs = [json.loads(line) for line in settings.read_text().splitlines()]
    want = {"2024": ("s", "v"), "2025": (1, 2)}[generation]
    assert {(r["scaleA"], r["scaleB"]) for r in runs if "f8" in r["a_type"]} == {(w, w) for w in want}


def test_a_config_in_the_other_generations_letters_is_refused_before_it_runs(tmp_path):
    configs = tmp_path / "configs"
    assert main(["configs", str(_scaled_shapes(tmp_path)), "--out", str(configs)]) == 0  # 2025 letters: F8N
    config = next((configs / "tensile").glob("*_SAB_UserArgs.yaml"))
    tool = TensileTool(0, str(fake_tensilelite(tmp_path / "tl", "2024")), str(DOUBLES / "hipblaslt-bench"))
    with pytest.raises(BadInput, match=r"DataType F8N is not defined by this TensileLite .*--tensile-generation 2024"):
        tool.run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    upstream = subprocess.run(
        [sys.executable, str(tmp_path / "tl" / "Tensile" / "bin" / "Tensile"), str(config), str(tmp_path / "raw")],
        capture_output=True,
        text=True,
    )
    assert upstream.returncode != 0 and "KeyError: 'f8n'" in upstream.stderr, "the double fails as TensileLite does"
    old = tmp_path / "configs_2024"
    assert main(["configs", str(_scaled_shapes(tmp_path)), "--out", str(old), "--tensile-generation", "2024"]) == 0
    assert "DataType: F8\n" in next((old / "tensile").glob("*_SAB_UserArgs.yaml")).read_text()
    tool.run(next((old / "tensile").glob("*_SAB_UserArgs.yaml")), tmp_path / "out")
    assert next((tmp_path / "out" / "3_LibraryLogic").glob("*_SAB_UserArgs.yaml"))


def _scaled_shapes(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.json"
    if not path.exists():
        assert main(["shapes", str(SCALED), "--json", str(path)]) == 0
    return path


# -- an M grid: GridBased logic -----------------------------------------------------------------------------
def test_an_m_grid_asks_tensilelite_for_gridbased_logic(tmp_path):
    """Shapes over a serving grid (buckets wider than their point) render TensileLite configs whose
    LibraryLogic asks for GridBased logic (TensileLite's own default, Common.py defaultAnalysisParameters);
    exact shapes keep Equality."""
    from pipeline.stages.configs.render import library_type

    assert library_type([None, (3, 3)]) == "Equality" and library_type([None, (3, 3), (5, 8)]) == "GridBased"
    untuned = FIXTURES / "configs" / "untuned0.csv"
    for grid, expected in (("exact", "Equality"), ("serving", "GridBased")):
        shapes = tmp_path / f"{grid}.json"
        assert main(["shapes", str(untuned), "--m-grid", grid, "--json", str(shapes)]) == 0
        assert main(["configs", str(shapes), "--out", str(tmp_path / grid)]) == 0
        configs = sorted((tmp_path / grid / "tensile").glob("*.yaml"))
        assert configs and all(
            yaml.safe_load(p.read_text())["LibraryLogic"]["LibraryType"] == expected for p in configs
        )


def test_a_gridbased_row_whose_kernel_cannot_serve_its_bucket_is_named():
    """A GridBased row serves the N from the previous grid N of its (M, B, K) + 1 to its own: a kernel that
    asserts a size multiple, or that loads B along N wider than the bucket's lowest N, is named."""
    from pipeline.formats.logic import LogicFile, grid_refusals

    from .logic_factory import PROBLEM_TYPE, logic, solution

    loads_b_along_n = {**PROBLEM_TYPE, "TLUB": True}
    wide = {**solution(128, index=0, problem_type=loads_b_along_n), "GlobalReadVectorWidthB": 8}
    narrow = {**solution(64, index=1, problem_type=loads_b_along_n), "GlobalReadVectorWidthB": 1}
    asserted = {**solution(32, index=2, problem_type=loads_b_along_n), "AssertFree1ElementMultiple": 4}
    rows = [
        [[256, 4, 1, 512], [1, 10.0]],  # 1-4, narrow: fine
        [[256, 16, 1, 512], [0, 10.0]],  # 5-16 with a width of 8: refused below 8
        [[256, 32, 1, 512], [0, 10.0]],  # 17-32: fine
        [[256, 64, 1, 512], [2, 10.0]],  # 33-64 asserting multiples of 4
        [[256, 8, 1, 1024], [0, 10.0]],  # another K: 1-8 with a width of 8
        [[256, 9, 1, 1024], [2, 10.0]],  # 9-9: a point alone, whatever it asserts
    ]
    found = grid_refusals(LogicFile(logic(rows, [wide, narrow, asserted], library_type="GridBased")))
    needs_8 = "which needs N >= 8 (GlobalReadVectorWidthB along N)"
    assert found == [
        f"[256, 16, 1, 512] serves N 5-16 with {wide['SolutionNameMin']}, {needs_8}",
        f"[256, 64, 1, 512] serves N 33-64 with {asserted['SolutionNameMin']}, which asserts "
        "AssertFree1ElementMultiple 4",
        f"[256, 8, 1, 1024] serves N 1-8 with {wide['SolutionNameMin']}, {needs_8}",
    ]
    assert grid_refusals(LogicFile(logic(rows, [wide, narrow, asserted]))) == []  # Equality: exact sizes only


TREE = os.environ.get("GEMM_TUNE_TENSILELITE")
SHIPPED_GRID = "library/src/amd_detail/rocblaslt/src/Tensile/Logic/asm_full/aldebaran/104CU/GridBased/" + (
    "aldebaran_Cijk_Ailk_Bjlk_I8II_BH_UserArgs.yaml"
)


@pytest.mark.parametrize("policy", ["upstream", "faster"])
def test_a_grid_merged_into_shipped_gridbased_logic_reads_back_through_tensilelites_reader(policy, tmp_path):
    """A grid of sizes merged into a GridBased file hipBLASLt ships, by either policy, is what TensileLite's own
    reader (``LibraryIO.parseLibraryLogicFile``, building the library TensileCreateLibrary writes) takes: one
    GridBased table holding the shipped keys and the grid's, in order."""
    if not TREE:
        pytest.skip("GEMM_TUNE_TENSILELITE is not set: point it at a TensileLite tree (hipBLASLt's tensilelite)")
    shipped = Path(TREE).parent / SHIPPED_GRID
    if not shipped.exists():
        pytest.skip(f"{shipped}: not in this hipBLASLt tree")
    from pipeline.stages.merge.logic_merge import MergeOptions, merge_dirs

    base_dir, new_dir = tmp_path / "base", tmp_path / "new"
    base_dir.mkdir()
    (base_dir / shipped.name).write_bytes(shipped.read_bytes())
    data = yaml.safe_load(shipped.read_text())
    grid = [1, 2, 4, 8, 16, 24, 32, 64, 128]
    data[7] = [[[512, n, 1, 512, 512, 512, 512, n], [0, 1.0e6]] for n in grid]  # faster than any shipped row
    new_dir.mkdir()
    (new_dir / shipped.name).write_text(yaml.safe_dump(data, default_flow_style=None))
    merge_dirs(base_dir, new_dir, tmp_path / "out", MergeOptions(policy=policy))
    merged = tmp_path / "out" / shipped.name
    probe = Path(__file__).with_name("tensilelite_forks.py")
    done = subprocess.run(
        [sys.executable, str(probe), "read-logic", TREE, "gfx90a", str(merged)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (table,) = json.loads(done.stdout)[str(merged)]["tables"]
    shipped_keys = [row[0][:4] for row in yaml.safe_load(shipped.read_text())[7]]
    assert table["distance"] == "GridBased" and table["keys"] == sorted(table["keys"])
    assert {tuple(k) for k in table["keys"]} == {*map(tuple, shipped_keys), *((512, n, 1, 512) for n in grid)}

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
from pipeline.errors import BadInput
from pipeline.formats.tensile import benchmark_winners, config_problems
from pipeline.formats.tunableop import read_file
from pipeline.stages.tensile import TensileTool, locate

from .helpers import DOUBLES, FIXTURES, ROOT

GOLDEN = FIXTURES.parent / "golden" / "configs_gfx942" / "tensile" / "Cijk_Alik_Bljk_BBS_BH.yaml"


def fake_tensilelite(root: Path) -> Path:
    """A tensilelite directory: Tensile/bin/Tensile (the double) and Tensile/__init__.py with a version."""
    (root / "Tensile" / "bin").mkdir(parents=True)
    (root / "Tensile" / "bin" / "Tensile").symlink_to(DOUBLES / "Tensile")
    (root / "Tensile" / "__init__.py").write_text('__version__ = "4.33.0"\n')
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
        config_problems({"BenchmarkProblems": [[{"DataType": "b"}, {"BenchmarkFinalParameters": []}]]}))


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
    proc = subprocess.run([sys.executable, "-m", "luigi", "--module", "pipeline", "TuneWorkload", "--local-scheduler",
                           "--workdir", str(tmp_path / "w"), "--run-name", "night", "--untuned", str(untuned),
                           "--backend", "tensile", "--tensile-root", str(tensilelite),
                           "--hipblaslt-bench", str(DOUBLES / "hipblaslt-bench"),
                           "--validators-from", str(FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "night"
    summary = json.loads((run / "bench" / "summary.json").read_text())
    assert summary["runtime"]["tensile_version"] == "4.33.0" and summary["tensile"]
    assert all(t["tensile_us"] > 0 and t["heuristic_us"] > 0 for t in summary["tensile"])
    merged = sorted(p.name for p in (run / "merge" / "logic").glob("*.yaml"))
    assert any(name.startswith("aquavanjaram_Cijk_") for name in merged), "TensileLite's logic, merged"
    assert all(e.solution == "Default" for e in read_file(run / "merge" / "tunableop_results.csv").entries)
    notes = json.loads((run / "report" / "summary.json").read_text())["notes"]
    assert any("take effect once the merged logic is compiled" in note for note in notes)

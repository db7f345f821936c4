from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import luigi
import pytest

from pipeline import GatherShapes, GenerateConfigs, MergeLogic, MergeResults
from pipeline.formats.tunableop import read_file

from .helpers import FAKE_WORKLOAD as FAKE
from .helpers import FIXTURES, O_PROJ, QKV, fake_cublaslt, luigi_argv


def _build(task) -> bool:
    return _build_all([task])


def _build_all(tasks) -> bool:
    return luigi.build(tasks, local_scheduler=True, detailed_summary=False, log_level="WARNING")


def test_untuned_files_skip_collection(tmp_path):
    files = f"{FIXTURES / 'tunableop' / 'torch2.11_cuda_untuned0.csv'}, {FIXTURES / 'tunableop' / 'torch2.6_*.csv'}"
    task = GenerateConfigs(workdir=str(tmp_path), run_name="night", untuned=files)
    assert _build(task)
    shapes = json.loads((tmp_path / "night" / "shapes" / "shapes.json").read_text())
    assert sum(row["count"] for row in shapes) == 4 + 2 + 8
    assert "distinct GEMMs" in (tmp_path / "night" / "shapes" / "summary.txt").read_text()
    assert not (tmp_path / "night" / "collect").exists()


def test_collection_then_gather_and_resume(tmp_path):
    counter = tmp_path / "runs.txt"
    cmd = shlex.join([sys.executable, FAKE, "--gpus", "2", "--counter", str(counter), QKV, O_PROJ])
    task = GenerateConfigs(workdir=str(tmp_path), run_name="night", workload_cmd=cmd, call_times=False)
    assert _build(task)
    shapes = json.loads((tmp_path / "night" / "shapes" / "shapes.json").read_text())
    assert [(row["m"], row["n"], row["k"], row["count"]) for row in shapes] == [
        (4096, 128, 4096, 2),
        (6144, 128, 4096, 2),
    ]
    # as if the run had crashed in GatherShapes: its output and everything after it are missing
    (tmp_path / "night" / "shapes" / "shapes.json").unlink()
    shutil.rmtree(tmp_path / "night" / "configs")
    assert _build(GenerateConfigs(workdir=str(tmp_path), run_name="night", workload_cmd=cmd, call_times=False))
    assert counter.read_text().count("run") == 1, "collection is not repeated on a rerun"
    assert (tmp_path / "night" / "shapes" / "shapes.json").exists()
    configs = json.loads((tmp_path / "night" / "configs" / "configs.json").read_text())
    assert "tensile/Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml" in configs["files"]


def test_failing_workload_fails_the_task(tmp_path):
    cmd = shlex.join([sys.executable, FAKE, "--exit", "9", QKV])
    assert not _build(GatherShapes(workdir=str(tmp_path), run_name="night", workload_cmd=cmd, call_times=False))
    assert not (tmp_path / "night" / "collect").exists()
    assert not (tmp_path / "night" / "shapes").exists()


def test_luigi_command_line_exit_codes(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    base = luigi_argv(
        "GenerateConfigs",
        workdir=str(tmp_path),
    )
    ok = subprocess.run([*base, "--untuned", str(FIXTURES / "tunableop")], cwd=repo, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("GemmTunableOp_Half_TN,tn_8_8\n")
    failed = subprocess.run(
        [*base, "--run-name", "bad", "--untuned", str(bad)], cwd=repo, capture_output=True, text=True
    )
    assert failed.returncode == 2, "README: luigi exits 2 when a task failed"
    assert f"{bad}:1: params 'tn_8_8'" in failed.stderr


def test_dag_through_bench_and_merges(tmp_path, monkeypatch):
    """The DAG up to the merges on CPU, with the test double standing in for the GPU tuner."""
    fake_cublaslt(monkeypatch)
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    cmd = shlex.join([sys.executable, FAKE, QKV, O_PROJ])
    common = {"workdir": str(tmp_path), "run_name": "night", "workload_cmd": cmd, "gpus": 1, "call_times": False}
    (tmp_path / "no-base-logic").mkdir()
    assert _build_all([MergeResults(**common), MergeLogic(**common, base_logic=str(tmp_path / "no-base-logic"))])
    merged = read_file(tmp_path / "night" / "merge" / "tunableop_results.csv")
    assert merged.validators == {"PT_VERSION": "2.11.0"}
    assert sorted(e.solution for e in merged.entries) == [
        "Default",
        "Gemm_Cublaslt_id_66_tile_20_stages_8_splitk_1_red_0_swizzle_0_custom_0",
    ]
    assert (tmp_path / "night" / "merge" / "records" / "cublaslt_Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml").exists()
    summary = json.loads((tmp_path / "night" / "bench" / "summary.json").read_text())
    assert (summary["problems"], summary["tuned"], summary["improved"]) == (2, 2, 1)


def test_default_relative_workdir_from_any_cwd(tmp_path, monkeypatch):
    """The README's command as a newcomer runs it: default --workdir (relative), a cwd of their own, a
    workload that resolves the recording path against its own cwd like torch does."""
    cwd = tmp_path / "newcomer"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    cmd = shlex.join([sys.executable, FAKE, "--gpus", "2", f"{QKV}@3", O_PROJ])
    task = GatherShapes(workload_cmd=cmd, call_times=False)
    assert Path(task.workdir) == Path("workdir") and not Path(task.workdir).is_absolute()
    assert _build(task)
    run = cwd / "workdir" / task.run_name
    assert sorted(p.name for p in (run / "collect").glob("untuned*.csv")) == ["untuned0.csv", "untuned1.csv"]
    shapes = {row["m"]: row for row in json.loads((run / "shapes" / "shapes.json").read_text())}
    assert (shapes[6144]["calls"], shapes[4096]["calls"]) == (6, 2)
    assert shapes[6144]["time_share"] is None, "not timed: --call-times false"


def test_time_shares_reach_shapes_json(tmp_path, monkeypatch):
    """Collection counts the calls, times each GEMM once (here a double of the GPU worker), and
    GatherShapes turns both into every shape's share of the workload's GEMM time."""
    from pipeline import tasks
    from pipeline.stages.gather import collect as collect_module

    def fake_timing(directory, keys, gpus):
        assert gpus == [0, 1] and sorted(keys) == sorted([QKV, O_PROJ])
        (directory / "baseline.json").write_text(json.dumps({"per_call_us": {QKV: 30.0, O_PROJ: 20.0}}))

    monkeypatch.setattr(collect_module, "run_worker", fake_timing)
    monkeypatch.setattr(tasks, "gpu_count", lambda who: 2)
    cmd = shlex.join([sys.executable, FAKE, f"{QKV}@3", f"{O_PROJ}@9"])
    assert _build(GatherShapes(workdir=str(tmp_path), run_name="night", workload_cmd=cmd))
    shapes = {row["m"]: row for row in json.loads((tmp_path / "night" / "shapes" / "shapes.json").read_text())}
    assert (shapes[6144]["calls"], shapes[4096]["calls"]) == (3, 9)
    assert shapes[6144]["time_share"] == pytest.approx(90 / 270) and shapes[4096]["time_share"] == pytest.approx(
        180 / 270
    )

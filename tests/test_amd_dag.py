"""The whole DAG, collection aside, for the hipblaslt backend on a CPU machine, against the bench double."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline.formats.hipblaslt_override import read_override
from pipeline.formats.tunableop import read_file

from .helpers import DOUBLE, TARGET, UNTUNED


def _luigi(tmp_path: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "luigi", "--module", "pipeline", "TuneWorkload", "--local-scheduler",
               "--workdir", str(tmp_path / "w"), "--run-name", "night", "--untuned", str(UNTUNED),
               "--backend", "hipblaslt", *extra]
    env = {**os.environ, "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"), **(env or {})}
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)


def test_tune_workload_with_the_bench_double_ends_in_a_gated_bundle(tmp_path):
    proc = _luigi(tmp_path, "--hipblaslt-bench", DOUBLE, "--validators-from", str(TARGET),
                  env={"HIPBLASLT_DOUBLE_FORMAT": "rl"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "night"
    summary = json.loads((run / "bench" / "summary.json").read_text())
    assert summary["runtime"]["backend"] == "hipblaslt" and summary["tuned"] == summary["problems"] == 12
    assert summary["override_source"] == ["hipblaslt-bench (HIPBLASLT_TUNING_FILE)"]
    measured = json.loads((run / "validate" / "measurements.json").read_text())
    assert measured["meta"]["measured_with"] == "hipblaslt-bench"
    assert all(r["baseline"]["samples"] == 7 for r in measured["rows"]), "the default --validate-rounds"
    bundle = read_file(run / "bundle" / "tunableop_results.csv")
    gate = json.loads((run / "validate" / "gate.json").read_text())
    assert gate["passed"] and bundle.entries and len(bundle.entries) == len(gate["kept"])
    assert all(e.solution.startswith("Gemm_Hipblaslt_") for e in bundle.entries)
    assert bundle.validators == read_file(TARGET).validators
    override = read_override(run / "bundle" / "hipblaslt_override.txt")
    legacy_keys = {(e.problem.transa, e.problem.transb, e.problem.m, e.problem.n, e.problem.k, e.problem.batch,
                    e.problem.a_type) for e in bundle.entries}  # the override key has no ld's: one row each
    assert override.git_version == "de5c1aebb6-dirty" and len(override.entries) == len(legacy_keys) > 0
    kept_indices = {e.solution.rsplit("_", 1)[1] for e in bundle.entries}
    assert {dict(e.fields)["solution_index"] for e in override.entries} <= kept_indices
    assert (run / "merge" / "hipblaslt_override.txt").exists(), "MergeResults merged the override file too"
    logic = sorted(p.name for p in (run / "bundle" / "logic").glob("*.yaml"))
    assert logic and all(name.startswith("hipblaslt_Cijk_") for name in logic)
    report = (run / "report" / "report.md").read_text()
    assert "written by hipblaslt-bench itself through HIPBLASLT_TUNING_FILE" in report
    assert "Leading dimensions normalised" in report or not any(r["ld_notes"] for r in measured["rows"])
    assert proc.stdout.strip().splitlines()[-1].startswith("report: ")


def test_a_missing_bench_fails_before_any_work_and_says_where_it_looked(tmp_path):
    proc = _luigi(tmp_path, env={"PATH": "/usr/bin:/bin", "HIPBLASLT_BENCH": ""})
    assert proc.returncode != 0
    assert "pass --hipblaslt-bench PATH, set $HIPBLASLT_BENCH, or put hipblaslt-bench on PATH" in proc.stderr
    assert not (tmp_path / "w" / "night" / "shapes").exists(), "checked before any stage ran"
    assert "failed: ToolMissing (exit 11, tool failure)" in proc.stderr

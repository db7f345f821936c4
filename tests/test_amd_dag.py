"""The whole DAG, collection aside, for the hipblaslt backend on a CPU machine, against the bench double."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pipeline.formats.hipblaslt_override import read_override
from pipeline.formats.tunableop import read_file
from pipeline.stages.bench import own_kernels

from .helpers import DOUBLE, FIXTURES, TARGET, UNTUNED, amd_dag, first_gemms, run_amd_dag

GEMMS = 6


def _luigi(tmp_path: Path, *extra: str, env: dict | None = None, **options) -> subprocess.CompletedProcess:
    command, base = amd_dag(tmp_path, "night", "", "TuneWorkload", *extra, **options)
    base.pop("HIPBLASLT_DOUBLE_NOISE")  # the double's own noise: the gate must confirm what it keeps
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**base, **(env or {})}
    )


@pytest.mark.long
def test_tune_workload_with_the_bench_double_ends_in_a_gated_bundle(tmp_path):
    # the default --validate-rounds, so half of the HF Llama's GEMMs (the ld twins among them); --triton as a
    # nightly for both fleets passes it: ROCm keeps the vendor path, and the report says why
    proc = _luigi(tmp_path, "--triton", rounds=None, untuned=first_gemms(tmp_path, UNTUNED, GEMMS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "night"
    summary = json.loads((run / "bench" / "summary.json").read_text())
    assert summary["runtime"]["backend"] == "hipblaslt" and summary["tuned"] == summary["problems"] == GEMMS
    assert summary["override_source"] == ["hipblaslt-bench (HIPBLASLT_TUNING_FILE)"]
    assert summary["triton"] == {"offered": False, "why": own_kernels.ROCM}
    assert f"Triton kernels: {own_kernels.ROCM}" in proc.stdout
    measured = json.loads((run / "validate" / "measurements.json").read_text())
    assert measured["meta"]["measured_with"] == "hipblaslt-bench"
    assert all(r["baseline"]["samples"] == 7 for r in measured["rows"]), "the default --validate-rounds"
    bundle = read_file(run / "bundle" / "tunableop_results.csv")
    gate = json.loads((run / "validate" / "gate.json").read_text())
    assert gate["passed"] and bundle.entries and len(bundle.entries) == len(gate["kept"])
    assert all(e.solution.startswith("Gemm_Hipblaslt_") for e in bundle.entries)
    assert bundle.validators == read_file(TARGET).validators
    override = read_override(run / "bundle" / "hipblaslt_override.txt")
    legacy_keys = {
        (e.problem.transa, e.problem.transb, e.problem.m, e.problem.n, e.problem.k, e.problem.batch, e.problem.a_type)
        for e in bundle.entries
    }  # the override key has no ld's: one row each
    assert override.git_version == "de5c1aebb6-dirty" and len(override.entries) == len(legacy_keys) > 0
    kept_indices = {e.solution.rsplit("_", 1)[1] for e in bundle.entries}
    assert {dict(e.fields)["solution_index"] for e in override.entries} <= kept_indices
    assert (run / "merge" / "hipblaslt_override.txt").exists(), "MergeResults merged the override file too"
    records = sorted(p.name for p in (run / "bundle" / "records").glob("*.yaml"))
    assert records and all(name.startswith("hipblaslt_Cijk_") for name in records), "winner records, beside"
    assert not list((run / "bundle" / "logic").glob("*.yaml")), "no record inside the logic tree"
    report = (run / "report" / "report.md").read_text()
    assert "written by hipblaslt-bench itself through HIPBLASLT_TUNING_FILE" in report
    assert "ROCm keeps the vendor path" in report
    normalised = [r["key"] for r in measured["rows"] if r["ld_notes"]]  # the section is there exactly when needed
    assert ("## Leading dimensions normalised" in report) == bool(normalised)
    assert all(key in report.split("## Leading dimensions normalised")[-1] for key in normalised)
    assert proc.stdout.strip().splitlines()[-1].startswith("report: ")
    moved = json.loads((run / "report" / "summary.json").read_text())["retargeted"]  # the double is another build
    assert moved and moved[0].startswith("HIPBLASLT_VERSION tuned under") and "'1100-a4e0b8f5'" in moved[0]
    assert f"validators: {moved[0]}" in proc.stdout and "not those its rows were tuned under" in report
    agreed = json.loads((run / "report" / "summary.json").read_text())["bench_agreement"]
    winners = [r for r in json.loads((run / "bench" / "results.json").read_text()) if r["winner"] != "Default"]
    assert agreed["predicted_rows"] == len(winners) > 0, "every winner Bench named is compared with its validation"
    assert f"Bench's prediction: {len(winners)} winners" in proc.stdout and "| Bench predicted |" in report


def test_a_missing_bench_fails_before_any_work_and_says_where_it_looked(tmp_path):
    proc = _luigi(tmp_path, env={"PATH": "/usr/bin:/bin", "HIPBLASLT_BENCH": ""}, bench=None, target=None, rounds=None)
    assert proc.returncode == 5, "README: luigi exits 5 when a check before any work refused the run"
    assert "pass --hipblaslt-bench PATH, set $HIPBLASLT_BENCH, or put hipblaslt-bench on PATH" in proc.stderr
    assert not (tmp_path / "w" / "night" / "shapes").exists(), "checked before any stage ran"
    assert "failed: ToolMissing (exit 11, tool failure)" in proc.stderr


def test_a_2024_hipblaslt_for_torch_2_6_ships_the_names_that_torch_reads_and_no_override_file(tmp_path):
    """hipBLASLt 0.10 (no tuning file) and a torch 2.6 target, which names hipBLASLt solutions
    Gemm_Hipblaslt_<TA><TB>_<index>: the rows are named so, the package serves them, no override file ships."""
    untuned = FIXTURES / "tunableop" / "torch2.6_untuned.csv"
    target = FIXTURES / "tunableop" / "torch2.6_rocm_results.csv"
    command, env = amd_dag(
        tmp_path, "night", "", "Package", untuned=untuned, target=target, generation="2024", rounds=None
    )
    env.pop("HIPBLASLT_DOUBLE_NOISE")
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "w" / "night"
    assert json.loads((run / "bench" / "runtime.json").read_text())["generation"] == "2024"
    bundle = read_file(run / "bundle" / "tunableop_results.csv")
    assert bundle.entries and all(re.fullmatch(r"Gemm_Hipblaslt_(TN|NN)_\d+", e.solution) for e in bundle.entries)
    assert all(e.solution[len("Gemm_Hipblaslt_") :][:2] == e.problem.layout for e in bundle.entries)
    assert not (run / "bundle" / "hipblaslt_override.txt").exists(), "hipBLASLt 0.10 reads no override file"
    package = json.loads((run / "package" / "package.json").read_text())
    assert package["serves"]["tunableop_rows"] == len(bundle.entries), "torch 2.6 can dispatch every row"
    report = (run / "report" / "report.md").read_text()
    assert "no tuning override file" in report


def test_every_run_of_a_problem_takes_the_same_flush_setting(tmp_path, monkeypatch):
    """The 2025 bench turns --flush on by itself under HIPBLASLT_TUNING_FILE (the search run); the heuristic
    run it is compared with, and Validate's runs, must take the same setting."""
    from pipeline.backends.base import TuneSettings
    from pipeline.backends.hipblaslt import HipblasltBackend
    from pipeline.problem import GemmProblem

    problem = GemmProblem("gemm", "T", "N", 6144, 128, 4096, 4096, 4096, 6144)
    for generation in ("2024", "2025"):
        log = tmp_path / f"settings{generation}.log"
        monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", generation)
        monkeypatch.setenv("HIPBLASLT_DOUBLE_SETTINGS_LOG", str(log))
        backend = HipblasltBackend(0, DOUBLE)
        result = backend.tune_one(problem, TuneSettings())
        backend.measure_pair(problem, result.candidates[0].config["SolutionIndex"], rounds=1)
        runs = [json.loads(line) for line in log.read_text().splitlines() if json.loads(line)["m"] == 6144]
        assert {r["method"] for r in runs} == {"heuristic", "all", "index"}
        assert {r["flush"] for r in runs} == {True}, f"{generation}: {runs}"
        assert {r["tuning_file"] for r in runs if r["method"] != "all"} == {False}


def test_gfx950_with_the_2024_tensilelite_is_refused_before_any_stage(tmp_path):
    proc = _luigi(tmp_path, "--arch", "gfx950", "--tensile-generation", "2024")
    assert proc.returncode == 5, "README: luigi exits 5 when a check before any work refused the run"
    last = proc.stderr.strip().splitlines()[-1]
    assert "BadInput (exit 12, bad input)" in last and "gfx950 comes with --tensile-generation 2025" in last
    assert not [p.name for p in (tmp_path / "w" / "night").glob("*") if p.is_dir() and p.name != "made_from"]


def test_a_bench_that_prints_garbage_is_named_by_its_cause_in_one_line(tmp_path):
    """The stack probe asks the bench for its version; a bench that prints no result line fails it, and the
    run's last line says so (#65: it gave a traceback fragment, the cause only in an earlier warning)."""
    garbage = tmp_path / "garbage-bench"
    garbage.write_text("#!/bin/sh\necho 'garbage output here'\n")
    garbage.chmod(0o755)
    proc = run_amd_dag(tmp_path, "g", "", "TuneWorkload", check=False, bench=str(garbage))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 5 and "ProbeFailed (exit 11, tool failure)" in last
    assert "hipblaslt-bench: no result line" in last and "^^^" not in last and "Traceback" not in last

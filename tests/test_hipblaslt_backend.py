"""The hipblaslt backend against the hipblaslt-bench double (tests/doubles/hipblaslt-bench)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from pipeline.backends.base import DEFAULT, TuneSettings, tune
from pipeline.backends.hipblaslt import HipblasltBackend, ToolMissing, find_bench
from pipeline.formats.hipblaslt_override import parse_override
from pipeline.problem import GemmProblem

from .helpers import DOUBLE

QKV = GemmProblem("gemm", "T", "N", 6144, 128, 4096, 4096, 4096, 6144)
O_PROJ = GemmProblem("gemm", "T", "N", 4096, 128, 4096, 4096, 4096, 4096)


def test_the_double_refuses_options_the_real_bench_lacks():
    proc = subprocess.run([DOUBLE, "-m", "8", "--bogus"], capture_output=True, text=True)
    assert proc.returncode != 0 and "unrecognized arguments: --bogus" in proc.stderr


def test_bench_is_found_by_option_then_environment_then_path(tmp_path, monkeypatch):
    monkeypatch.delenv("HIPBLASLT_BENCH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissing) as err:
        find_bench()
    assert all(hint in str(err.value) for hint in ("--hipblaslt-bench PATH", "$HIPBLASLT_BENCH", "on PATH"))
    on_path = tmp_path / "hipblaslt-bench"
    on_path.symlink_to(DOUBLE)
    assert find_bench() == str(on_path)
    monkeypatch.setenv("HIPBLASLT_BENCH", DOUBLE)
    assert find_bench() == DOUBLE
    assert find_bench(os.path.relpath(DOUBLE)) == DOUBLE, "a relative path is handed on absolute"
    with pytest.raises(ToolMissing, match="is not an executable file"):
        find_bench(str(tmp_path / "nothing"))


def test_a_2024_bench_has_no_override_file_to_write(monkeypatch, tmp_path):
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", "2024")  # hipBLASLt 0.10: no HIPBLASLT_TUNING_FILE
    backend = HipblasltBackend(0, DOUBLE)
    result = backend.tune_one(QKV, TuneSettings())
    fastest = min(result.candidates, key=lambda c: c.screen_us)
    assert len(result.candidates) == 6 and result.default_us > 0
    assert result.winner == fastest.name == f"Gemm_Hipblaslt_{fastest.config['SolutionIndex']}"
    assert result.speedup >= 1.02 and result.record.solution["HeuristicSolutionIndex"] == 100
    assert not result.record.override_rows and not result.record.override_source
    runtime = backend.runtime()
    assert runtime["hipblaslt_version"] == "1000" and runtime["generation"] == "2024" and runtime["arch"] == "gfx942"
    assert runtime["validators"] == {"HIPBLASLT_VERSION": "1000-9ca3d958b6"}


def test_a_2025_bench_that_writes_no_tuning_file_gets_the_legacy_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", "2025")
    backend = HipblasltBackend(0, DOUBLE)
    monkeypatch.setattr(backend, "run", _without_tuning_file(backend.run))
    result = backend.tune_one(QKV, TuneSettings())
    assert result.record.override_source == "legacy layout"
    rows = parse_override("Git Version: x\n" + result.record.override_rows)
    fields = dict(rows.entries[0].fields)
    assert (fields["transA"], fields["m"], fields["n"], fields["k"], fields["a_type"]) == (
        "T",
        "6144",
        "128",
        "4096",
        "bf16_r",
    )
    assert fields["solution_index"] == result.winner.rsplit("_", 1)[1]


def _without_tuning_file(run):
    def wrapped(args, env=None):
        return run(args, env={k: v for k, v in (env or {}).items() if k != "HIPBLASLT_TUNING_FILE"})

    return wrapped


def test_a_bench_that_writes_the_tuning_file_writes_the_override_rows(monkeypatch):
    monkeypatch.setenv("HIPBLASLT_DOUBLE_GENERATION", "2025")
    result = HipblasltBackend(0, DOUBLE).tune_one(QKV, TuneSettings())
    assert result.record.override_source == "hipblaslt-bench (HIPBLASLT_TUNING_FILE)"
    fields = dict(parse_override("Git Version: x\n" + result.record.override_rows).entries[0].fields)
    assert fields["gcnArchName"] == "gfx942" and fields["solution_index"] == result.winner.rsplit("_", 1)[1]


def test_a_single_solution_leaves_the_default(monkeypatch):
    monkeypatch.setenv("HIPBLASLT_DOUBLE_SINGLE", "1")
    result = HipblasltBackend(0, DOUBLE).tune_one(QKV, TuneSettings())
    assert result.winner == DEFAULT and len(result.candidates) == 1 and not result.errors


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ("HIPBLASLT_DOUBLE_FAIL", "exit code 1: hipBLASLt error: HIPBLAS_STATUS_EXECUTION_FAILED"),
        ("HIPBLASLT_DOUBLE_HANG", "no answer in 2 s; then no answer in 2 s"),
        ("HIPBLASLT_DOUBLE_GARBAGE", "values for"),
    ],
)
def test_a_broken_problem_is_retried_recorded_and_the_others_finish(knob, message, monkeypatch):
    monkeypatch.setenv(knob, "6144")
    backend = HipblasltBackend(0, DOUBLE, timeout_s=2.0)  # a normal run of the double takes ~0.07 s
    results = {r.problem.m: r for r in tune(backend, [QKV, O_PROJ], TuneSettings())}
    assert results[6144].errors and message in results[6144].errors[0]
    assert not results[4096].errors and results[4096].default_us > 0


def test_validation_runs_alternate_heuristic_and_the_winner(monkeypatch, tmp_path):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("HIPBLASLT_DOUBLE_LOG", str(log))
    times = HipblasltBackend(0, DOUBLE).measure_pair(QKV, 2061, rounds=3)
    assert len(times["baseline"]) == len(times["tuned"]) == 3
    methods = [argv[argv.index("--algo_method") + 1] for argv in map(json.loads, log.read_text().splitlines())]
    assert methods[0] == "heuristic", "the probe that reads the bench's version (its generation)"
    assert methods[1:] == ["heuristic", "index", "index", "heuristic", "heuristic", "index"]
    assert HipblasltBackend(0, DOUBLE).measure_pair(QKV, None, rounds=2)["tuned"] == []


def test_a_lost_supervisor_is_one_failed_attempt_and_the_retry_starts_another():
    backend = HipblasltBackend(0, DOUBLE)
    try:
        assert backend.heuristic(QKV).us > 0
        server = backend._spawner._server
        server.kill()  # the OOM killer, say
        server.wait()
        assert backend.heuristic(QKV).us > 0, "retried under a new supervisor"
        assert backend._spawner._server is not server
    finally:
        backend.close()

"""bench/grid_cost.py on a run written here, its refusals, and the committed record against the estimate it
prices (docs/serving.md cites it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline.formats.tunableop import format_key
from pipeline.problem import GemmProblem
from pipeline.stages.bench.tune import result_path
from pipeline.stages.gather import grid_budget
from pipeline.stages.gather.shapes import GatherResult, ShapeRecord, write_shapes_json

from .helpers import ROOT

SCRIPT = ROOT / "bench" / "grid_cost.py"
RECORD = ROOT / "bench" / "results" / "grid_cost_h200_2026-11-29.json"
QKV = GemmProblem("gemm", "T", "N", 6144, 7, 4096, 4096, 4096, 6144)
ROTARY = GemmProblem("gemm", "N", "N", 94, 64, 1, 94, 1, 94, a_type="float32", b_type="float32", c_type="float32")


def write_run(run, tuned: dict, origins: dict | None = None) -> None:
    """A run directory: ``shapes.json`` of QKV at 3 (alone), 8 (a power of two serving 5-8), 12 (serving 9-12),
    20 and 24 (seeded), 32 (not tuned yet) and the rotary outer product; Bench's results of ``tuned`` (GEMM ->
    tuning_s), with their ``origins`` (GEMM -> origin) where given."""
    rows = [(3, (3, 3), False), (8, (5, 8), False), (12, (9, 12), False), (20, (13, 20), True)]
    rows += [(24, (21, 24), True), (32, (25, 32), False)]
    records = []
    for n, bucket, seeded in rows:
        record = ShapeRecord(QKV.with_tokens(n), *format_key(QKV.with_tokens(n)), count=1)
        record.bucket, record.seeded = bucket, seeded
        records.append(record)
    records.append(ShapeRecord(ROTARY, *format_key(ROTARY), count=1))
    write_shapes_json(run / "shapes" / "shapes.json", GatherResult(records, [], 6, []))
    for index, (problem, seconds) in enumerate(tuned.items()):
        path = result_path(run / "bench", problem)
        path.parent.mkdir(parents=True, exist_ok=True)
        result = {"tuning_s": seconds, "timeline": {"start": 1.8e9 + index, "end": 1.8e9 + 9}}
        path.write_text(json.dumps({**result, "origin": (origins or {}).get(problem, "")}))
    (run / "bench" / "stack.json").write_text(json.dumps({"stack": {"gpu": "NVIDIA H200"}}))


def grid_cost(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd)


def test_a_run_is_priced_per_class_and_set_against_what_bench_took(tmp_path):
    tuned = {QKV.with_tokens(3): 3.0, QKV.with_tokens(8): 9.0, QKV.with_tokens(12): 5.0, QKV.with_tokens(24): 2.0}
    write_run(tmp_path / "night", tuned | {ROTARY: 1.0})
    out = tmp_path / "cost.json"
    done = grid_cost(f"budgeted={tmp_path / 'night'}", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(out.read_text())["runs"]
    assert run["run"] == "budgeted" and run["gpu"] == "NVIDIA H200" and (run["gemms"], run["tuned"]) == (7, 5)
    classes = {name: (c["tuned"], c["estimated_s_each"], c["measured_s"]) for name, c in run["classes"].items()}
    searched, wide = grid_budget.SECONDS_PER_PROBLEM, grid_budget.SECONDS_PER_WIDE_ANCHOR
    assert classes == {
        "alone": (1, searched, 3.0),
        "wide power of two": (1, wide, 9.0),
        "wide other": (1, searched, 5.0),
        "seeded": (1, grid_budget.SECONDS_PER_SEEDED, 2.0),
        "outside any family": (1, searched, 1.0),
    }
    estimated = 3 * searched + wide + grid_budget.SECONDS_PER_SEEDED
    assert run["estimated_s"] == pytest.approx(estimated) and run["measured_s"] == 20.0
    assert run["ratio"] == pytest.approx(20.0 / estimated, abs=1e-3)
    assert run["estimated_all_s"] == pytest.approx(estimated + wide + grid_budget.SECONDS_PER_SEEDED)  # untuned
    assert run["seeds"] == {"searched": {"count": 1, "measured_s_mean": 2.0}}  # 24 had no seed: no origin


def test_the_seeded_gemms_say_whether_their_neighbours_winner_held_and_from_which_side(tmp_path):
    above = "retimed: the grid point M = 32 winner still wins (x1.050)"
    below = "retuned: the grid point M = 12 winner Gemm_x no longer wins (x0.930 under this stack)"
    origins = {QKV.with_tokens(24): above, QKV.with_tokens(20): below}
    write_run(tmp_path / "night", {QKV.with_tokens(24): 2.5, QKV.with_tokens(20): 4.0}, origins)
    done = grid_cost(str(tmp_path / "night"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    assert run["seeds"] == {
        "held from above": {"count": 1, "measured_s_mean": 2.5},
        "lost from below": {"count": 1, "measured_s_mean": 4.0},
    }


def test_what_is_not_a_run_or_not_a_bench_result_is_refused_naming_it(tmp_path):
    done = grid_cost(str(tmp_path), cwd=tmp_path)
    assert done.returncode == 12 and f"{tmp_path}: no shapes/shapes.json" in done.stderr
    write_run(tmp_path / "night", {QKV.with_tokens(3): 3.0})
    broken = result_path(tmp_path / "night" / "bench", QKV.with_tokens(3))
    broken.write_text(json.dumps({"winner": "Default"}))
    done = grid_cost(str(tmp_path / "night"), cwd=tmp_path)
    assert done.returncode == 12 and f"{broken}: no tuning_s" in done.stderr


def test_an_out_that_is_a_directory_an_input_or_a_file_it_did_not_write_is_refused_and_left_alone(tmp_path):
    run = tmp_path / "night"
    write_run(run, {QKV.with_tokens(3): 3.0})
    inputs = [
        run / "shapes" / "shapes.json",
        result_path(run / "bench", QKV.with_tokens(3)),
        run / "bench" / "stack.json",
    ]
    before = {path: path.read_bytes() for path in inputs}
    foreign = tmp_path / "notes.json"
    foreign.write_text("mine")
    for out, said in [
        (".", "is a directory"),
        (str(run), "is a directory"),
        *((str(path), "is one of the inputs") for path in inputs),
        (str(foreign), "gemm-tune did not write it"),
    ]:
        force = () if out == str(foreign) else ("--force",)  # --force never overrides a directory or an input
        done = grid_cost(str(run), "--out", out, *force, cwd=tmp_path)
        assert done.returncode == 12 and said in done.stderr, (out, done.stderr)
    assert {path: path.read_bytes() for path in inputs} == before and foreign.read_text() == "mine"
    assert grid_cost(str(run), "--out", str(foreign), "--force", cwd=tmp_path).returncode == 0, "--force replaces it"


def test_the_committed_record_prices_as_the_estimate_does_and_lands_within_its_target():
    """A changed constant of the estimate must be re-recorded (the script reads what the runs wrote: no GPU)."""
    record = json.loads(RECORD.read_text())
    low, high = record["target_ratio"]
    price = {"wide power of two": grid_budget.gemm_seconds((5, 8)), "seeded": grid_budget.gemm_seconds((5, 8), True)}
    for run in record["runs"]:
        assert low <= run["ratio"] <= high, run["run"]
        for name, c in run["classes"].items():
            assert c["estimated_s_each"] == price.get(name, grid_budget.SECONDS_PER_PROBLEM), (run["run"], name)
    budgeted = record["runs"][1]["classes"]
    assert budgeted["wide power of two"]["measured_s_mean"] > 2 * budgeted["alone"]["measured_s_mean"], (
        "what the estimate's wide class stands on: a power of two that serves a bucket costs twice a count alone"
    )

"""bench/scaling.py end to end on CPU, against the hipblaslt-bench double: fresh runs per GPU count, the
per-GPU timeline, agreement of winners, and counts the machine does not have reported as not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .helpers import DOUBLE, ROOT, UNTUNED


def test_scaling_reports_each_gpu_count_with_its_timeline(tmp_path):
    out = tmp_path / "scaling.json"
    env = {**os.environ, "HIPBLASLT_BENCH": DOUBLE, "HIPBLASLT_DOUBLE_NOISE": "0"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "scaling.py"),
            "--backend",
            "hipblaslt",
            "--gpus",
            "1",
            "2",
            "4",
            "--device-count",
            "2",
            "--problems",
            str(UNTUNED),
            "--workdir",
            str(tmp_path / "w"),
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [r["gpus"] for r in data["runs"]] == [1, 2] and data["not_run"] == [
        {"gpus": 4, "why": "2 GPUs visible on this machine"}
    ]
    one, two = data["runs"]
    assert one["problems"] == two["problems"] == 12 and one["scaling_vs_1"] == 1.0
    assert [g["gpu"] for g in two["per_gpu"]] == [0, 1] and sum(g["problems"] for g in two["per_gpu"]) == 12
    assert all(g["problems"] > 0 and 0 < g["busy_share"] <= 1 for g in two["per_gpu"]), "a GPU idled"
    assert two["winners_vs_1"]["same_winner"] == 12, "the double's times are exact: the winners must agree"
    assert len(two["problem_gpu_and_s"]) == 12 and {v[0] for v in two["problem_gpu_and_s"].values()} == {0, 1}
    for run in (one, two):
        assert run["before_stage_s"] > 0 and run["after_stage_s"] > 0
        assert run["before_stage_s"] + run["bench_stage_s"] + run["after_stage_s"] == pytest.approx(run["wall_s"])
        for gpu in run["per_gpu"]:  # where each worker's start-up went, phase by phase, from the stage's spawn
            phases = gpu["startup_phases_s"]
            assert list(phases) == ["python_s", "slot_wait_s", "import_s", "init_s", "prepare_s"]
            assert all(v >= 0 for v in phases.values()) and phases["python_s"] > 0
            assert sum(phases.values()) == pytest.approx(gpu["startup_s"])

"""bench/serving.py: the commands it runs, and its record's rows and targets from a finished job's files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import ROOT, bench_module

serving = bench_module("serving")


def _args(*argv: str):
    return serving.parse_args(["--out", "x.json", "--layers", "2", "--requests", "16", *argv])


def test_the_job_collects_on_one_seed_and_serves_another_in_its_ab():
    args = _args("--m-grid", "1,2,4,8", "--gpus", "2", "--e2e-reps", "2", "--validate-rounds", "5", "--passes", "7")
    command = serving.job_command("qwen2-7b", "fp8", ROOT / "w", args)
    assert command[command.index("--e2e-reps") + 1] == "2" and command[command.index("--validate-rounds") + 1] == "5"
    collect = command[command.index("--workload-cmd") + 1]
    ab = command[command.index("--e2e-cmd") + 1]
    assert "--seed 1" in collect and "--seed 2" in ab and "--repeat 7" in ab and "--repeat" not in collect
    assert all("--fp8" in c and "--arch qwen2-7b --layers 2" in c and "--requests 16" in c for c in (collect, ab))
    assert command[command.index("--m-grid") + 1] == "1,2,4,8" and command[command.index("--gpus") + 1] == "2"
    assert "--allow-e2e-regression" in command and "--fp8" not in serving.serve_command("llama", "bf16", 1, args)
    assert "--e2e-graphs-only" not in command and "--grid-budget" not in command and "--e2e-max-reps" not in command
    capped = serving.job_command("qwen2-7b", "bf16", ROOT / "w", _args("--e2e-reps", "4", "--e2e-max-reps", "6"))
    assert capped[capped.index("--e2e-max-reps") + 1] == "6"
    budgeted = serving.job_command("qwen2-7b", "bf16", ROOT / "w", _args("--grid-budget", "6"))
    assert budgeted[budgeted.index("--grid-budget") + 1] == "6.0"
    assert "--e2e-graphs-only" in serving.job_command("qwen2-7b", "bf16", ROOT / "w", _args("--graphs-only"))
    assert "--e2e-parallel" not in command
    assert "--e2e-parallel" in serving.job_command("qwen2-7b", "bf16", ROOT / "w", _args("--e2e-parallel"))
    assert "--layers 0" in serving.serve_command("qwen2-7b", "bf16", 1, serving.parse_args(["--out", "x.json"]))
    assert "--compile" not in collect + ab
    assert all("--max-capture 72" in c for c in (collect, ab)), "every step captured: 64 prompt and 8 decode tokens"
    large = serving.serve_command("llama", "bf16", 1, _args("--max-batched-tokens", "512", "--max-seqs", "32"))
    assert "--max-capture 512" in large, "512 + 32 tokens: vLLM's largest capture size"
    vllm_rule = serving.job_command("llama", "bf16", ROOT / "w", _args("--max-capture", "0"))
    assert "--max-capture" not in " ".join(vllm_rule), "0: the workload's own default"
    compiled = serving.job_command("llama3-8b", "bf16", ROOT / "w", _args("--compile"))
    assert all("--compile" in compiled[compiled.index(o) + 1] for o in ("--workload-cmd", "--e2e-cmd"))


E2E = {
    "reps": 5,
    "baseline": {"median_tokens_per_s": 1000.0, "median_p99_ms": 20.0},
    "tuned": {"median_tokens_per_s": 1070.0, "median_p99_ms": 20.1},
    "tokens_speedup": 1.07,
    "interval": [1.06, 1.08],
    "resolved": True,
    "coverage": {"tuned_share_of_time": 0.97, "tuned_share_of_calls": 0.9, "unseen_calls": 400},
    "decode_speedup": 1.09,
    "decode_interval": [1.07, 1.11],
}


def _finished_job(workdir):
    """The files a finished, refused job of qwen2-7b bf16 leaves under ``workdir``: its run directory."""
    run = workdir / "qwen2-7b-bf16"
    (run / "validate").mkdir(parents=True)
    (run / "report").mkdir()
    (run / "bundle.refused").mkdir()
    (run / "validate" / "e2e.json").write_text(json.dumps(E2E))
    held_out = {"worst": {"speedup": 0.9}, "worst_shipped": {"speedup": 0.985}}
    (run / "validate" / "held_out.json").write_text(json.dumps(held_out))
    (run / "report" / "summary.json").write_text(json.dumps({"verdict": "refused", "stage_seconds": {"Bench": 90}}))
    return run


def test_a_row_and_its_targets_come_from_the_jobs_records(tmp_path):
    run = _finished_job(tmp_path)
    got, held, summary, bundle = serving.run_dir_figures(run)
    assert bundle == run / "bundle.refused" and summary["stage_seconds"]["Bench"] == 90
    row = serving.arm_row("qwen2-7b", "bf16", "graphs", got, held)
    assert row["coverage"] == 0.97 and row["held_out_worst"] == 0.985 and row["speedup"] == 1.07
    assert row["held_out_worst_before_splits"] == 0.9 and row["coverage_counted"] == "every call"
    assert row["decode_speedup"] == 1.09 and row["decode_interval"] == [1.07, 1.11]
    assert row["tokens_per_s"] == {"baseline": 1000.0, "tuned": 1070.0} and row["p99_ms"]["tuned"] == 20.1
    met = serving.targets(row)
    assert met == {
        "coverage": True,
        "held_out_worst": False,
        "tokens_per_s": True,
        "decode_tokens_per_s": True,
        "p99": True,
    }
    assert serving.targets({**row, "decode_speedup": 1.03})["decode_tokens_per_s"] is False
    assert serving.targets({**row, "decode_speedup": None})["decode_tokens_per_s"] is None
    eager = serving.targets({**row, "arm": "eager", "speedup": 0.995, "p99_ms": {"baseline": 20.0, "tuned": 21.0}})
    assert eager["tokens_per_s"] is False and eager["p99"] is False  # 5% slower beyond a 2% interval
    assert serving.targets({**row, "coverage": None, "p99_ms": {"baseline": None, "tuned": 1.0}})["coverage"] is None
    assert "parallel_gpus" not in row and "by_gpu" not in row, "one GPU: nothing about lanes"
    assert "runs" not in row, "an A/B record without its runs gives none"
    assert "host_budget" not in row and "host_bound" not in row, "no budget measured, none said"
    budget = {"host_us_per_run": 5e5, "gpu_saved_us_per_run": 5e4, "host_bound_risk": True, "graphs_only": False}
    flat = {**got, "tokens_speedup": 0.99, "interval": [0.9, 1.08], "host_budget": budget}
    eager = serving.arm_row("qwen2-7b", "bf16", "eager", flat, held)
    assert eager["host_budget"] == budget and "500.00 ms of host time a run against 50.00 ms" in eager["host_bound"]
    paying = {**budget, "host_bound_risk": False}
    assert serving.arm_row("qwen2-7b", "bf16", "eager", {**flat, "host_budget": paying}, held)["host_bound"] is None
    runs = {"baseline": [{"tokens_per_s": 1000.0}], "tuned": [{"tokens_per_s": 1070.0}]}
    assert serving.arm_row("qwen2-7b", "bf16", "eager", {**got, "runs": runs}, held)["runs"] == runs, "kept"
    lanes = {
        "parallel_gpus": [0, 1],
        "by_gpu": {"0": {"pairs": 3, "speedup": 1.06}, "1": {"pairs": 2, "speedup": 1.08}},
    }
    side = serving.arm_row("qwen2-7b", "bf16", "graphs", {**got, **lanes}, held)
    assert side["parallel_gpus"] == [0, 1] and side["by_gpu"]["1"] == {"pairs": 2, "speedup": 1.08}


def test_a_dtype_or_arm_it_does_not_serve_is_refused_before_anything_runs(tmp_path):
    script = str(ROOT / "bench" / "serving.py")
    for option, value, said in (
        ("--dtypes", "bf16,int4", "int4 not one of bf16, fp8"),
        ("--arms", "graphs,cpu", "cpu not one of graphs, eager"),
    ):
        argv = [sys.executable, script, option, value, "--out", str(tmp_path / "r.json")]
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 12 and said in done.stderr and not list(tmp_path.iterdir())


def test_the_record_keeps_each_row_as_it_is_measured_and_an_arm_left_out_is_not_run(tmp_path, monkeypatch):
    run = _finished_job(tmp_path / "w")
    ran = []
    monkeypatch.setattr(serving, "run_process", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    monkeypatch.setattr(
        serving, "ab_test", lambda *a, **k: ran.append(a) or json.loads((run / "validate" / "e2e.json").read_text())
    )
    only = list(serving.measure("qwen2-7b", "bf16", tmp_path / "w", _args("--arms", "graphs")))
    assert [r["arm"] for r in only] == ["graphs"] and not ran, "no eager A/B where the arm is left out"
    assert [r["arm"] for r in serving.measure("qwen2-7b", "bf16", tmp_path / "w", _args())] == ["graphs", "eager"]
    capped = _args("--arms", "eager", "--eager-reps", "2", "--eager-max-reps", "5")
    monkeypatch.setattr(serving, "ab_test", lambda *a, **k: ran.append((a, k)) or {})
    assert [r["arm"] for r in serving.measure("qwen2-7b", "bf16", tmp_path / "w", capped)] == ["eager"]
    (reps, *_), asked = ran[-1][0][3:], ran[-1][1]
    assert reps == 2 and asked["max_reps"] == 5 and asked["via"] == "runtime"
    assert ran[-1][0][2].name == "eager-ab" and not asked["runtime_flags"]
    list(serving.measure("qwen2-7b", "bf16", tmp_path / "w", _args("--arms", "eager", "--graphs-only")))
    assert ran[-1][0][2].name == "eager-ab-graphs-only", "a graphs-only A/B keeps the full runtime's records"
    assert "--graphs-only" in ran[-1][1]["runtime_flags"]
    advised = _args("--arms", "eager", "--eager-graphs-only")
    list(serving.measure("qwen2-7b", "bf16", tmp_path / "w", advised))
    assert ran[-1][0][2].name == "eager-ab-graphs-only" and "--graphs-only" in ran[-1][1]["runtime_flags"]
    job = serving.job_command("qwen2-7b", "bf16", tmp_path / "w", advised)
    assert "--e2e-graphs-only" not in job, "the job's own A/B (and its Validate) stay as they were"

    def stopped():
        yield only[0]
        raise KeyboardInterrupt  # the device's limit, mid-way through the next arm

    out = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt):
        serving.recorded(out, {"rows": [], "complete": False}, stopped())
    kept = json.loads(out.read_text())
    assert kept == {"rows": only, "complete": False}, "the finished row was kept"
    assert serving.recorded(out, {"rows": []}, iter(only))["complete"] and json.loads(out.read_text())["complete"]


def test_a_job_stopped_in_its_ab_leaves_a_row_of_the_alternations_it_finished(tmp_path, monkeypatch):
    run = _finished_job(tmp_path / "w")
    (run / "report" / "summary.json").unlink()  # the job never reached its report
    runs = {
        "baseline": [{"wall_s": 20.0, "tokens_per_s": 400.0 + i, "p99_ms": 50.0, "decode_tokens_per_s": 1000.0}
                     for i in range(3)],
        "tuned": [{"wall_s": 21.0, "tokens_per_s": 410.0 + i, "p99_ms": 52.0, "decode_tokens_per_s": 1100.0 + i}
                  for i in range(3)],
    }  # fmt: skip
    (run / "validate" / "e2e-runtime").mkdir()
    (run / "validate" / "e2e-runtime" / "alternations.json").write_text(json.dumps({"identity": {}, "runs": runs}))
    (run / "validate" / "gate.json").write_text(json.dumps({"message": "bundle accepted", "kept": ["a", "b"]}))

    def timed_out(argv, timeout_s, log):
        log.write_text("INFO: running Validate\n")
        raise subprocess.TimeoutExpired(argv, timeout_s)

    monkeypatch.setattr(serving, "run_process", timed_out)
    out = tmp_path / "r.json"
    args = _args("--graphs-only", "--timeout", "60")
    with pytest.raises(RuntimeError, match="ran past --timeout 60 s"):
        serving.recorded(out, {"rows": []}, serving.measure("qwen2-7b", "bf16", tmp_path / "w", args))
    (row,) = json.loads(out.read_text())["rows"]
    assert row["unfinished"].endswith("after 3 alternations") and row["runs"] == runs and row["reps"] == 3
    assert row["decode_speedup"] == pytest.approx(1.101, abs=1e-3) and row["tokens_per_s"]["tuned"] == 411.0
    assert row["held_out_worst"] == 0.985 and row["job"]["kept"] == 2 and row["coverage"] is None
    assert "bench_problems" not in row["job"] and "bench_origin" not in row["job"], "no record of Bench yet"
    assert row["targets"]["decode_tokens_per_s"] is True and row["coverage_counted"] == "graph captures only"
    coverage = {"unseen_calls": 12, "unseen_tuned_calls": 9, "unseen_us": 100.0, "unseen_tuned_us": 96.0}
    for pid, calls in (("", 12), (".7", 0)):  # the tuned runs' status records, one with no call at unseen M
        status = {"graphs_only": True, "coverage": {**coverage, "unseen_calls": calls}}
        (run / "validate" / "e2e-runtime" / f"runtime{pid}.json").write_text(json.dumps(status))
    with pytest.raises(RuntimeError):
        serving.recorded(out, {"rows": []}, serving.measure("qwen2-7b", "bf16", tmp_path / "w", args))
    origin = {"tuned": 70, "cache": 0, "retimed": 25, "retuned": 5}
    (run / "bench").mkdir()
    (run / "bench" / "summary.json").write_text(json.dumps({"problems": 100, "tuning_s": 250.0, "origin": origin}))
    with pytest.raises(RuntimeError):
        serving.recorded(out, {"rows": []}, serving.measure("qwen2-7b", "bf16", tmp_path / "w", args))
    (row,) = json.loads(out.read_text())["rows"]
    assert row["coverage"] == pytest.approx(192 / 200) and row["unseen_calls"] == 12, "summed over the records"
    assert row["job"]["bench_problems"] == 100 and row["job"]["bench_tuning_s"] == 250.0
    assert row["job"]["bench_origin"] == origin
    assert row["coverage_counted"] == "graph captures only" and row["targets"]["coverage"] is True
    (run / "validate" / "e2e-runtime" / "alternations.json").unlink()
    with pytest.raises(RuntimeError):
        assert not list(serving.measure("qwen2-7b", "bf16", tmp_path / "w", args)), "no alternation, no row"


PAIRS_MEDIAN = "the pairs' median (runs not kept)"


def test_a_committed_serving_record_meets_the_targets_its_rows_say():
    from pipeline.api import ab_outcome, ab_pairs_needed

    records = sorted((ROOT / "bench" / "results").glob("serving_*.json"))
    assert records, "bench/README.md cites a serving record"
    for path in records:
        record = json.loads(path.read_text())
        assert record["device"] and record["date"] in path.name and record["targets"] == serving.TARGETS
        for row in record["rows"]:
            assert row["arm"] in ("graphs", "eager"), path
            if row["coverage"] is None:  # no unseen call counted: every step padded to a grid point, nothing
                assert not row.get("unseen_calls"), path  # eager routed (--graphs-only), or stopped before a call
            else:
                assert 0 <= row["coverage"] <= 1, path
            if row.get("runs"):  # its figures are those of its alternations
                ab = ab_outcome(row["runs"])
                assert row["tokens_per_s"]["tuned"] == ab["tuned"]["median_tokens_per_s"]
                assert row["decode_speedup"] == ab["decode_speedup"], path
                assert row["speedup"] == ab["tokens_speedup"], f"{path}: the pairs' median"
                assert row["interval"][0] <= row["speedup"] <= row["interval"][1], path
                assert row.get("pairs_to_resolve") == ab_pairs_needed(row), f"{path}: its own spread's need"
            elif row.get("speedup_of") == PAIRS_MEDIAN:  # the pairs' median of runs the record did not keep yet
                assert row["interval"][0] <= row["speedup"] <= row["interval"][1], path
            else:  # an older row without its runs: the ratio of the arms' medians
                ratio = row["tokens_per_s"]["tuned"] / row["tokens_per_s"]["baseline"]
                assert abs(ratio / row["speedup"] - 1) < 0.005, f"{path}: tokens/s and speedup disagree"
            assert row["targets"] == serving.targets(row), f"{path}: {row['model']} {row['arm']}"

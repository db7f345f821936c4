"""A bundle that makes the workload slower end to end is refused (#34), the runtime's fixed start-up is told
apart from the steady state, and the report names GEMMs by a readable label."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from pipeline.formats.tunableop import parse_key
from pipeline.problem import distinct_labels
from pipeline.stages.validate import e2e, e2e_report, e2e_runtime

from .helpers import UNTUNED, first_gemms, run_amd_dag


def _ab(base_walls: list[float], tuned_walls: list[float], tokens: tuple[list, list] | None = None) -> dict:
    runs = {
        "baseline": [
            {"wall_s": w, "tokens_per_s": t} for w, t in zip(base_walls, (tokens or ([None] * 9,))[0], strict=False)
        ],
        "tuned": [
            {"wall_s": w, "tokens_per_s": t} for w, t in zip(tuned_walls, (tokens or (0, [None] * 9))[1], strict=False)
        ],
    }
    out: dict = {"reps": len(base_walls), "via": "runtime", "runs": runs}
    for name, walls in (("baseline", base_walls), ("tuned", tuned_walls)):
        out[name] = {"median_wall_s": sorted(walls)[len(walls) // 2], "wall_spread": e2e._spread(walls)}
    out["wall_speedup"] = out["baseline"]["median_wall_s"] / out["tuned"]["median_wall_s"]
    return out


def test_a_wall_time_regression_beyond_the_spread_is_named_with_its_figure():
    slower = _ab([4.0, 4.05, 4.02], [4.5, 4.55, 4.52])
    why = e2e.regression(slower)
    assert why and "end to end wall x0.889" in why and "run-to-run spread of 1.2%" in why
    assert e2e.regression(_ab([4.0, 4.4, 4.2], [4.3, 4.35, 4.32])) is None, "within the spread"
    assert e2e.regression(_ab([4.0, 4.05], [3.9, 3.95])) is None, "faster"
    assert e2e.regression({"skipped": "no workload"}) is None and e2e.regression({}) is None
    tokens = {**slower, "tokens_speedup": 1.03, "noise": 0.01}
    assert e2e.regression(tokens) is None, "tokens/s is the figure where the workload prints it"


def test_a_tight_paired_interval_below_one_is_a_regression_and_one_holding_it_is_within_noise():
    noisy = {"reps": 6, "tokens_speedup": 0.96, "noise": 0.2, "interval": [0.95, 0.97], "resolved": True}
    why = e2e.regression(noisy)
    assert why and "x0.960, slower with its paired ratio x0.950-x0.970 (95% interval) below x1.00" in why
    assert e2e.regression({**noisy, "interval": [0.93, 1.01]}) is None, "the interval holds x1.00"
    assert not e2e.within_noise({**noisy, "tokens_speedup": 1.026, "interval": [1.02, 1.031]}), "a 26% spread"
    assert e2e.within_noise({**noisy, "tokens_speedup": 1.026, "interval": [0.96, 1.09]})
    assert e2e.within_noise({"reps": 3, "tokens_speedup": 1.02, "noise": 0.05}), "no interval: the spread"


def test_decode_steps_resolved_slower_are_a_regression_the_whole_runs_spread_hides():
    serving = {"reps": 8, "tokens_speedup": 1.079, "noise": 0.27, "interval": [0.945, 1.137], "resolved": False}
    assert e2e.regression(serving) is None, "no decode figure: the whole run's interval holds x1.00"
    slower = {**serving, "decode_speedup": 0.962, "decode_interval": [0.951, 0.973]}
    why = e2e.regression(slower)
    assert why and "decode steps alone x0.962" in why and "x0.951-x0.973 (95% interval) below x1.00" in why
    assert "spread of 27.0%" in why
    assert e2e.regression({**slower, "decode_interval": [0.94, 1.002]}) is None, "the interval holds x1.00"
    assert e2e.regression({**slower, "decode_speedup": 1.045, "decode_interval": [1.038, 1.053]}) is None


def test_the_runtimes_start_up_is_told_apart(tmp_path):
    for pid, (install, plans) in enumerate([(0.40, 0.05), (0.50, 0.06), (0.42, 0.04)]):
        name = "runtime.json" if pid == 0 else f"runtime.{pid}.json"
        (tmp_path / name).write_text(json.dumps({"startup": {"install_s": install, "plan_build_s": plans}}))
    figures = e2e_runtime.startup_figures(e2e_runtime.status_records(tmp_path), tuned_wall_s=4.5, baseline_wall_s=4.0)
    assert figures["runtime_startup_s"] == pytest.approx(0.46)
    assert figures["steady_wall_speedup"] == pytest.approx(4.0 / (4.5 - 0.46))
    ab = {**_ab([4.0, 4.05, 4.02], [4.5, 4.55, 4.52]), **figures}
    assert "start-up costs 0.46 s per run (without it: wall x0.990)" in e2e.regression(ab)
    said = e2e_report.summary_line(ab)
    assert "fixed start-up (install, plans) 0.46 s per run of 4.5 s, steady state wall x0.990" in said
    assert e2e_runtime.startup_figures(e2e_runtime.status_records(tmp_path / "none"), 4.5, 4.0) == {}


def test_readable_labels_tell_ld_twins_apart():
    keys = {
        k: parse_key(*k.split(",", 1))
        for k in (
            "GemmTunableOp_BFloat16_TN,tn_4096_8_4096_ld_4096_4096_4096",
            "GemmTunableOp_BFloat16_TN,tn_4096_8_4096_ld_4224_4224_4096",
            "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,"
            "tn_28672_512_4096_ld_4096_4096_28672_rw_0_bias_None",
        )
    }
    labels = list(distinct_labels(keys).values())
    assert labels == [
        "gemm 4096x8x4096 bf16 ld 4096/4096/4096",
        "gemm 4096x8x4096 bf16 ld 4224/4224/4096",
        "scaled_gemm 28672x512x4096 e4m3 -> bf16",
    ]


@pytest.mark.long
def test_a_bundle_that_slows_the_workload_is_refused_unless_allowed(tmp_path):
    # a workload that runs slower whenever torch is pointed at the bundle (the e2e A/B's tuned arm)
    slow = "import os, time; time.sleep(0.3 if os.environ.get('PYTORCH_TUNABLEOP_ENABLED') == '1' else 0.1)"
    workload = shlex.join([sys.executable, "-c", slow])
    extra = ("--validate-rounds", "1", "--e2e-reps", "2", "--gpus", "1", "--workload-cmd", workload)
    few = first_gemms(tmp_path, UNTUNED, 3)  # the workload's wall time is the subject, not its GEMMs
    refused = run_amd_dag(tmp_path, "e", "", "TuneWorkload", *extra, untuned=few, check=False)
    assert refused.returncode == 2, refused.stderr[-2000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert "EndToEndRefused (exit 10, bundle refused)" in last and "end to end wall x0." in last
    run = tmp_path / "w" / "e"
    assert not (run / "bundle").exists() and (run / "bundle.refused" / "manifest.json").exists()
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert not summary["passed"] and summary["verdict"].startswith("bundle refused end to end")
    report = (run / "report" / "report.md").read_text()
    assert "bundle refused end to end" in report
    row = next(line for line in report.splitlines() if line.startswith("| gemm ") and "x" in line)
    assert row.rstrip().endswith("` |"), "the label leads, the TunableOp key has its own column"
    assert json.loads((run / "bundle.refused" / "manifest.json").read_text())["runtime_flags"] == []
    allowed = run_amd_dag(
        tmp_path, "e", "", "TuneWorkload", *extra, "--allow-e2e-regression", "--e2e-graphs-only", untuned=few
    )
    assert "end to end: wall x0." in allowed.stdout and (run / "bundle" / "manifest.json").exists()
    manifest = json.loads((run / "bundle" / "manifest.json").read_text())
    assert manifest["runtime_flags"] == ["--graphs-only"]  # what the package then prints with the runtime


def test_the_job_runs_its_ab_side_by_side_on_its_gpus_when_asked(tmp_path, monkeypatch):
    """``--e2e-parallel``: the job's A/B runs an alternation on each of its ``--gpus`` at once, each run shown its
    GPU alone (ROCm's list narrowed to one entry), and its line says so."""
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0,1")
    seen = tmp_path / "seen.txt"
    script = (
        "import os; open({!r}, 'a').write(os.environ['HIP_VISIBLE_DEVICES'] + '\\n'); print('throughput: 5.0 tokens/s')"
    )
    workload = shlex.join([sys.executable, "-c", script.format(str(seen))])
    extra = ("--validate-rounds", "1", "--e2e-reps", "2", "--gpus", "2", "--e2e-parallel", "--workload-cmd", workload)
    proc = run_amd_dag(tmp_path, "p", "", "TuneWorkload", *extra, untuned=first_gemms(tmp_path, UNTUNED, 2))
    assert sorted(set(seen.read_text().split())) == ["0", "1"], "each run saw one of the two GPUs"
    ab = json.loads((tmp_path / "w" / "p" / "validate" / "e2e.json").read_text())
    assert ab["parallel_gpus"] == [0, 1] and ab["reps"] == 2 and len(seen.read_text().split()) == 4
    assert "side by side on 2 GPUs" in proc.stdout


def test_the_ab_stops_at_its_cap_and_a_cap_below_its_reps_is_refused_before_any_work(tmp_path):
    """``--e2e-max-reps``: a workload too noisy to resolve a 3% effect is alternated up to the cap and no more,
    and the line says it could not resolve; a cap below ``--e2e-reps`` is refused before any stage runs."""
    counter = tmp_path / "runs.txt"
    script = (
        "n = len(open({path!r}).read()) if __import__('os').path.exists({path!r}) else 0\n"
        "open({path!r}, 'a').write('x')\n"
        "print(f'throughput: {{[100, 130, 80, 125, 90, 140][n % 6]}} tokens/s')\n"
    ).format(path=str(counter))
    workload = shlex.join([sys.executable, "-c", script])
    few = first_gemms(tmp_path, UNTUNED, 2)
    extra = ("--validate-rounds", "1", "--e2e-reps", "2", "--gpus", "1", "--workload-cmd", workload)
    low = run_amd_dag(tmp_path, "low", "", "TuneWorkload", *extra, "--e2e-max-reps", "1", untuned=few, check=False)
    assert low.returncode == 5, low.stderr[-2000:]
    last = low.stderr.strip().splitlines()[-1]
    assert "(exit 12, bad input)" in last and "--e2e-max-reps 1: below --e2e-reps 2" in last
    assert not counter.exists() and not (tmp_path / "w" / "low" / "bench").exists(), "refused before any work"
    capped = run_amd_dag(
        tmp_path, "cap", "", "TuneWorkload", *extra, "--e2e-max-reps", "3", "--allow-e2e-regression", untuned=few
    )
    ab = json.loads((tmp_path / "w" / "cap" / "validate" / "e2e.json").read_text())
    assert ab["reps"] == 3 and not ab["resolved"] and len(counter.read_text()) == 6, "three alternations, no more"
    assert "cannot resolve a 3% effect after 3 alternations" in capped.stdout

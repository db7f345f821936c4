"""Gate, bundle, end-to-end A/B and report on CPU, from recorded measurement JSON."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import luigi
import pytest
import yaml

from pipeline import TuneWorkload, Validate
from pipeline.cli import main
from pipeline.errors import ToolError
from pipeline.formats.logic import cublaslt_equality, dump_logic
from pipeline.formats.tunableop import TunableOpEntry, parse_key, read_file, write_file
from pipeline.stages.run.fingerprint import STAMP
from pipeline.stages.validate.e2e import (
    TUNABLEOP_AND_RUNTIME,
    ab_test,
    consumer,
    runtime_command,
    runtime_consumer,
    skip_reason,
)
from pipeline.stages.validate.e2e_report import summary_line
from pipeline.stages.validate.gate import GateSettings, gate
from pipeline.stages.validate.measured import MeasuredRow, Pair
from pipeline.stages.validate.validate import run_worker

from .helpers import FIXTURES

RECORDED = json.loads((FIXTURES / "validate" / "measurements.json").read_text())


def typed(rows: list[dict]) -> list[MeasuredRow]:
    """Rows of a measurements.json as the gate takes them."""
    return [MeasuredRow.from_json(r) for r in rows]


def test_gate_keeps_rows_that_beat_the_margin_and_weights_by_calls():
    result = gate(typed(RECORDED["rows"]), GateSettings())
    assert [r.m for r in result.kept] == [6144, 4096]
    assert [why for _, why in result.dropped] == [
        "the default already is the best: nothing to ship",
        "x1.008 does not beat the baseline by 2%",
    ]
    assert not result.regressions and result.passed
    base = 2 * 21.3 + 2 * 21.5 + 2 * 60.0 + 120.0
    tuned = 2 * 21.3 + 2 * 20.2 * 1.003 + 2 * 50.0 * 1.003 + 120.0  # kept rows at their confirmed times
    assert result.weighted_speedup == pytest.approx(base / tuned)
    assert result.message.startswith("bundle accepted: 2 rows kept")


def test_a_pair_speeds_up_by_its_median_per_round_ratio_and_keeps_it_in_its_json():
    """Rounds at 100, 120 and 80 us (three windows' operand copies), the tuned arm x1.04, x1.05 and x1.06 faster
    in them: the pair's speedup is the median round's x1.05, where the medians' ratio reads x1.04; a file
    written before pairs kept it reads the medians' ratio; a row that keeps the default is x1."""
    baseline = [100.0, 120.0, 80.0]
    tuned = [100.0 / 1.04, 120.0 / 1.05, 80.0 / 1.06]
    pair = Pair.of_samples({"baseline": baseline, "tuned": tuned})
    assert pair.speedup == pytest.approx(1.05)
    assert pair.baseline.median / pair.tuned.median == pytest.approx(1.04)
    again = Pair.from_json(json.loads(json.dumps(pair.to_json())))
    assert again == pair and again.speedup == pytest.approx(1.05)
    older = {key: value for key, value in pair.to_json().items() if key != "paired_speedup"}
    assert Pair.from_json(older).speedup == pair.baseline.median / pair.tuned.median
    assert Pair.of_samples({"baseline": baseline}).speedup == 1.0
    windowed = Pair.of_samples({"baseline": baseline, "tuned": tuned}, windows=3)
    assert windowed.windows == tuple((b, t) for b, t in zip(baseline, tuned, strict=True)), "one round a window"
    assert Pair.from_json(json.loads(json.dumps(windowed.to_json()))) == windowed


def test_gate_refuses_regressions_and_low_speedup():
    rows = copy.deepcopy(RECORDED["rows"])
    rows[3]["tuned"] = {**rows[3]["tuned"], "median_us": 130.0, "p25_us": 129.5, "p75_us": 130.5}
    dropped_only = gate(typed(rows), GateSettings())
    assert dropped_only.passed, "a dropped row ships nothing, even when it regressed"
    assert dropped_only.dropped[-1][1].endswith("(regressed beyond noise)")
    rows[2]["confirm"]["tuned"].update(median_us=60.6, p25_us=60.5, p75_us=60.7)  # within the drift: dropped
    unconfirmed = gate(typed(rows), GateSettings())
    assert unconfirmed.passed and [r.m for r in unconfirmed.kept] == [6144]
    assert (
        "x1.200 not confirmed: confirmation 60.6 us vs baseline 60.0 us"
        in dict((r.key, why) for r, why in unconfirmed.dropped)[rows[2]["key"]]
    )
    rows[2]["confirm"]["baseline"].update(median_us=62.0)  # the unchanged baseline moved 3.2% between the two
    rows[2]["confirm"]["tuned"].update(median_us=63.0, p25_us=62.9, p75_us=63.1)  # 1.6% slower: within that
    assert gate(typed(rows), GateSettings()).passed, "a regression inside the measured drift is noise"
    rows[2]["confirm"]["tuned"].update(median_us=66.0, p25_us=65.9, p75_us=66.1)
    result = gate(typed(rows), GateSettings())
    assert not result.passed and len(result.regressions) == 1
    assert "1 kept rows regress beyond noise when measured again" in result.message
    assert "confirmation 66.0 us vs baseline 62.0 us, beyond the 3.2% measured noise" in result.message
    strict = gate(typed(RECORDED["rows"]), GateSettings(min_speedup=1.5))
    assert (
        not strict.passed
        and "weighted GEMM speedup x1.0" in strict.message
        and "under the required x1.500" in strict.message
    )


def _row(first: float, confirmed: float | None) -> MeasuredRow:
    """A non-default row whose pairs measured these speedups (baseline 100 us, tight rounds)."""
    from pipeline.stages.validate.measured import Pair
    from pipeline.stats import Stats

    def pair(speedup: float) -> Pair:
        return Pair(
            Stats(100.0, 99.9, 100.1, 99.8, 21), Stats(100.0 / speedup, 99.9 / speedup, 100.1 / speedup, 99.0, 21)
        )

    problem = parse_key("GemmTunableOp_BFloat16_TN", "tn_14336_128_4096_ld_4096_4096_14336")
    key = "GemmTunableOp_BFloat16_TN,tn_14336_128_4096_ld_4096_4096_14336"
    return MeasuredRow.of(
        problem, key, "Gemm_Cublaslt_x", 1, 1.0, 1.0, pair(first), pair(confirmed) if confirmed else None
    )


def test_a_first_pair_near_the_baseline_gets_a_second_and_the_gate_decides_on_both():
    from pipeline.stages.validate.validate import measure_rows, second_look

    assert second_look(1.019, 0.02) and second_look(0.985, 0.02) and not second_look(0.975, 0.02)
    kept = gate([_row(1.015, 1.04)], GateSettings())  # pooled x1.027: the first pair alone had dropped it
    assert [r.key for r in kept.kept] == [_row(1.0, None).key] and kept.weighted_speedup == pytest.approx(1.04)
    for first, confirmed in ((1.015, 1.02), (0.995, 1.06)):  # pooled under the margin; one pair slower
        dropped = gate([_row(first, confirmed)], GateSettings())
        assert not dropped.kept and "over both pairs does not beat the baseline by 2%" in dropped.dropped[0][1]

    class Timer:
        device_name = "NVIDIA H100 80GB HBM3"

        def __init__(self, speedups):
            self.speedups, self.fresh = list(speedups), []

        def pair(self, row, fresh):
            self.fresh.append(fresh)
            return _row(self.speedups.pop(0), None).measured, None

    from pipeline.stages.validate.validate import MergedRow

    merged = MergedRow(_row(1, None).key, parse_key(*_row(1, None).key.split(",", 1)), "Gemm_Cublaslt_x", 1, 1.0)
    for speedups, fresh in (([0.99, 1.05], [False, True]), ([0.97], [False]), ([1.03, 1.02], [False, True])):
        timer = Timer(speedups)
        (measured,) = measure_rows([merged], timer, 0.02)
        assert timer.fresh == fresh and (measured.confirm is not None) == (len(fresh) == 2)


def test_runtime_consumer_and_skip_reasons():
    assert skip_reason({"platform": "rocm", "pt_version": "2.11.0"}, passed=True, has_workload=True) is None
    assert skip_reason({"platform": "rocm", "pt_version": "2.11.0"}, passed=False, has_workload=True) == (
        "the bundle was refused"
    )
    assert "pass --workload-cmd" in skip_reason({"platform": "rocm"}, passed=True, has_workload=False)
    assert "no runtime consumer" in runtime_consumer({"platform": "cuda", "pt_version": "2.11.0"}, has_runtime=False)
    assert runtime_consumer({"platform": "cuda", "pt_version": "2.14.1"}) is None
    assert runtime_consumer({"platform": "rocm", "pt_version": "2.11.0"}) is None
    # CUDA torch < 2.14: pipeline.runtime applies the bundle where nvmath-python is there
    assert consumer({"platform": "cuda", "pt_version": "2.11.0"}) == "runtime"
    assert consumer({"platform": "cuda", "pt_version": "2.14.0"}) == consumer({"platform": "rocm"}) == "tunableop"
    assert runtime_consumer({"platform": "cuda", "pt_version": "2.11.0"}, has_runtime=True) is None
    assert "nvmath-python" in runtime_consumer({"platform": "cuda", "pt_version": "2.11.0"}, has_runtime=False)


def test_triton_rows_on_a_torch_with_cublaslt_solutions_take_tunableop_and_the_runtime():
    """TunableOp (2.14+) runs torch's default for a Triton row: the tuned arm also runs under pipeline.runtime,
    which then installs for the Triton rows alone, as the package deploys them."""
    cuda14 = {"platform": "cuda", "pt_version": "2.14.0"}
    assert consumer(cuda14, triton_rows=True) == TUNABLEOP_AND_RUNTIME
    assert consumer({"platform": "cuda", "pt_version": "2.11.0"}, triton_rows=True) == "runtime"
    assert consumer({"platform": "rocm", "pt_version": "2.14.0"}, triton_rows=True) == "tunableop"
    why = runtime_consumer(cuda14, has_runtime=False, triton_rows=True)
    assert "Triton kernels" in why and "nvmath-python" in why
    assert skip_reason(cuda14, passed=True, has_workload=True, has_runtime=True, triton_rows=True) is None
    assert runtime_consumer(cuda14, has_runtime=False) is None  # no Triton row: TunableOp alone


def test_the_tuned_arm_of_both_consumers_has_tunableops_file_and_the_runtime(tmp_path, monkeypatch):
    import pipeline.stages.validate.e2e as e2e

    wrapper = tmp_path / "runtime.py"  # stands for python -m pipeline.runtime --bundle DIR -- CMD
    wrapper.write_text(
        "import os, sys\nos.environ['UNDER_RUNTIME'] = sys.argv[1]\nos.execv(sys.argv[2], sys.argv[2:])\n"
    )
    flags_seen = []

    def under_runtime(cmd, bundle, status, flags=()):
        flags_seen.append(tuple(flags))
        return [sys.executable, str(wrapper), str(bundle), *cmd]

    monkeypatch.setattr(e2e, "runtime_command", under_runtime)
    script = tmp_path / "workload.py"
    script.write_text(
        "import os\nfile, runtime = os.environ.get('PYTORCH_TUNABLEOP_FILENAME'), os.environ.get('UNDER_RUNTIME')\n"
        "assert (file is None) == (runtime is None) == ('GEMM_TUNE_CACHE' not in os.environ), (file, runtime)\n"
        "if runtime: os.makedirs(os.environ['GEMM_TUNE_CACHE'], exist_ok=True)  # as the runtime compiles there\n"
        "print('throughput: ' + ('1100.0' if runtime else '1000.0') + ' tokens/s')\n"
    )
    csv = tmp_path / "bundle" / "tunableop_results.csv"
    csv.parent.mkdir()
    csv.write_text("Validator,PT_VERSION,2.14.0\n")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "runtime.1234.json").write_text("{}")  # an earlier attempt's status: not these runs'
    out = ab_test(
        [sys.executable, str(script)],
        csv,
        tmp_path / "s",
        reps=2,
        timeout_s=60,
        via=TUNABLEOP_AND_RUNTIME,
        runtime_flags=e2e.runtime_flags(graphs_only=True),
    )
    assert flags_seen == [("--graphs-only",)]
    assert not list((tmp_path / "s").glob("runtime*.json"))
    assert out["tokens_speedup"] == pytest.approx(1.1) and out["via"] == TUNABLEOP_AND_RUNTIME
    assert out["kernels"] == str((tmp_path / "s" / "kernels").absolute())  # what a package ships
    assert "TunableOp and, for the Triton rows, pipeline.runtime" in summary_line(out)


def test_runtime_arm_runs_the_command_under_pipeline_runtime(tmp_path):
    command = runtime_command(["bash", "-c", "python3 w.py"], tmp_path / "bundle", tmp_path / "s.json")
    assert command[:3] == [sys.executable, "-m", "pipeline.runtime"]
    assert command[command.index("--bundle") + 1] == str((tmp_path / "bundle").absolute())
    assert command[command.index("--") + 1 :] == ["bash", "-c", "python3 w.py"]
    flagged = runtime_command(["w"], tmp_path / "bundle", tmp_path / "s.json", ("--graphs-only",))
    assert flagged[flagged.index("--") - 1 :] == ["--graphs-only", "--", "w"]


def test_e2e_summary_line_gives_tokens_per_s_with_the_noise():
    e2e = {
        "reps": 3,
        "via": "runtime",
        "tokens_speedup": 1.031,
        "noise": 0.008,
        "baseline": {"median_tokens_per_s": 1000.0},
        "tuned": {"median_tokens_per_s": 1031.0},
    }
    line = summary_line(e2e)
    assert line.startswith("tokens/s 1000.0 -> 1031.0, x1.031, run-to-run spread 0.8%")
    assert "through pipeline.runtime" in line
    assert "(within noise)" in summary_line({**e2e, "noise": 0.05})
    assert summary_line({"skipped": "why"}) == "not measured: why"
    assert "decode steps" not in line
    decode = summary_line({**e2e, "decode_speedup": 1.0812, "decode_interval": [1.052, 1.11]})
    assert decode.endswith("; decode steps alone x1.081 (paired, 95% x1.052-x1.110)")


def test_the_decode_steps_are_paired_apart_where_the_workload_prints_them():
    from pipeline.stages.validate import alternations, e2e

    served = "pass 1: 400.0 tokens/s\ndecode throughput: 600.0 tokens/s (decode steps)\nthroughput: 450.0 tokens/s\n"
    run = alternations.run_figures(2.0, served)
    assert run["tokens_per_s"] == 450.0 and run["decode_tokens_per_s"] == 600.0, "the A/B's figure is the last"
    llama = "throughput: 300.0 tokens/s\ndecode throughput: 280.0 tokens/s\n"  # its decode figure is the A/B's own
    assert alternations.run_figures(2.0, llama)["decode_tokens_per_s"] is None
    runs = {
        "baseline": [
            alternations.run_figures(2.0, served.replace("600.0", rate)) for rate in ("600.0", "610.0", "590.0")
        ],
        "tuned": [alternations.run_figures(2.0, served.replace("600.0", rate)) for rate in ("660.0", "665.0", "652.0")],
    }
    figures = e2e.decode_figures(runs)
    assert figures["decode_speedup"] == pytest.approx(1.1) and figures["decode_interval"][0] > 1.05
    assert figures["decode_interval"][1] < 1.15
    runs["tuned"][1] = alternations.run_figures(2.0, llama)  # one run without the figure: none is claimed
    assert e2e.decode_figures(runs) == {}


def test_the_speedup_is_the_pairs_median_and_lies_inside_its_interval_on_a_drifting_machine():
    """A machine that speeds up during the A/B (as the Llama-3-8B FP8 serving A/B's did, 2026-11-29: its baseline
    runs from 1416 to 1506 tokens/s) moves both runs of a pair; the ratio of the two arms' medians mixes early
    baselines with late tuned runs and can fall outside the paired interval. The headline is the pairs' median."""
    from pipeline.stages.validate import e2e, e2e_report

    base = [1000.0, 1100.0, 1200.0, 1300.0, 1400.0]  # the machine speeds up run after run
    ratios = [1.10, 1.08, 1.12, 1.09, 1.11]
    runs = {
        "baseline": [{"wall_s": 1.0, "tokens_per_s": b} for b in base],
        "tuned": [{"wall_s": 1.0, "tokens_per_s": b * r} for b, r in zip(base, ratios, strict=True)],
    }
    out = e2e.outcome(runs)
    medians = out["tuned"]["median_tokens_per_s"] / out["baseline"]["median_tokens_per_s"]
    assert medians == pytest.approx(1.12) and medians > out["interval"][1], "the medians' ratio: outside"
    assert out["tokens_speedup"] == pytest.approx(1.1)
    assert out["interval"][0] <= out["tokens_speedup"] <= out["interval"][1]
    assert "x1.100 the pairs' median" in e2e_report.summary_line({**out, "reps": 5, "runs": runs})
    runs["tuned"][2] = {"wall_s": 1.0, "tokens_per_s": None}  # a run without the figure: the medians' ratio
    out = e2e.outcome(runs)
    assert out["tokens_speedup"] == pytest.approx(
        out["tuned"]["median_tokens_per_s"] / out["baseline"]["median_tokens_per_s"]
    )


def test_an_unresolved_ab_says_whether_its_noise_is_between_runs_or_within_them():
    """The serving workload prints each timed pass; the A/B keeps them and, where it cannot resolve a 3% effect,
    says whether more passes a run or more alternations would narrow its interval."""
    from pipeline.stages.validate import alternations, e2e, e2e_report

    def served(*passes: float) -> str:
        lines = [f"pass {i}: 20 steps, 600 tokens, step p50 5.90 ms p99 7.10 ms, {t:.1f} tokens/s" for i, t in
                 enumerate(passes, 1)]  # fmt: skip
        return "\n".join([*lines, "decode throughput: 1.0 tokens/s", f"throughput: {sorted(passes)[1]} tokens/s"])

    run = alternations.run_figures(2.0, served(1000.0, 1100.0, 1050.0))
    assert run["passes_tokens_per_s"] == [1000.0, 1100.0, 1050.0] and run["tokens_per_s"] == 1050.0
    assert "passes_tokens_per_s" not in alternations.run_figures(2.0, "throughput: 5.0 tokens/s"), "no passes printed"
    noisy_passes = {
        "baseline": [alternations.run_figures(1.0, served(b - 50, b + 50, b)) for b in (1000.0, 1010.0, 990.0)],
        "tuned": [alternations.run_figures(1.0, served(t - 50, t + 50, t)) for t in (1030.0, 1060.0, 1000.0)],
    }
    out = e2e.outcome(noisy_passes)
    assert out["baseline"]["pass_spread"] == pytest.approx(0.1, rel=0.02) and not out["resolved"]
    line = e2e_report.resolution_line({**out, "reps": 3})
    assert "passes spread 10.0% within a run, runs 5.8%: more passes a run" in line
    steady_passes = {arm: [{**r, "passes_tokens_per_s": [r["tokens_per_s"]] * 3} for r in runs]
                     for arm, runs in noisy_passes.items()}  # fmt: skip
    out = e2e.outcome(steady_passes)
    said = e2e_report.resolution_line({**out, "reps": 3})
    assert out["tuned"]["pass_spread"] == 0 and "more alternations narrow it, not more passes" in said
    assert e2e_report.noise_hint(e2e.outcome({arm: [dict(r, passes_tokens_per_s=None) for r in runs]
                                       for arm, runs in noisy_passes.items()})) == ""  # fmt: skip


def test_end_to_end_ab_alternates_and_points_torch_at_the_bundle(tmp_path):
    script = tmp_path / "workload.py"
    script.write_text(
        "import os\nname = os.environ.get('PYTORCH_TUNABLEOP_FILENAME', 'none')\n"
        "assert name == 'none' or os.path.exists(name.replace('%d', '0')), name\n"
        "arm = 'baseline' if name == 'none' else 'tuned'\n"
        "cache = os.environ['TORCHINDUCTOR_CACHE_DIR']\n"
        "assert os.path.isabs(cache) and cache.endswith('inductor-' + arm), cache\n"
        "print('throughput: ' + ('2000.0' if name != 'none' else '1000.0') + ' tokens/s')\n"
    )
    csv = tmp_path / "bundle.csv"
    csv.write_text("Validator,PT_VERSION,2.11.0\n")
    out = ab_test([sys.executable, str(script)], csv, tmp_path / "scratch", reps=3, timeout_s=60, gpus=2)
    assert out["tokens_speedup"] == pytest.approx(2.0) and out["noise"] == 0.0 and out["via"] == "tunableop"
    assert len(out["runs"]["baseline"]) == len(out["runs"]["tuned"]) == 3
    assert (tmp_path / "scratch" / "tunableop_results1.csv").read_text() == csv.read_text()
    with pytest.raises(RuntimeError, match="exited with code 1"):
        ab_test([sys.executable, "-c", "raise SystemExit(1)"], csv, tmp_path / "s2", reps=1, timeout_s=60)


def test_alternations_side_by_side_run_one_arm_on_each_gpu_at_once_and_pair_within_a_gpu(tmp_path):
    """``parallel_gpus``: a round runs an alternation on each GPU at once, each run shown its GPU alone, every GPU
    on the same arm at the same moment; a pair is one GPU's two runs, so a slower board cancels out of its ratio,
    and a round of two GPUs makes two alternations."""
    log = tmp_path / "runs.jsonl"
    script = tmp_path / "workload.py"
    script.write_text(
        "import json, os, time\n"
        "arm = 'tuned' if 'PYTORCH_TUNABLEOP_FILENAME' in os.environ else 'baseline'\n"
        "gpu = os.environ['CUDA_VISIBLE_DEVICES']\n"
        "start = time.time(); time.sleep(0.3)\n"
        f"with open({str(log)!r}, 'a') as f: f.write(json.dumps([arm, gpu, start, time.time()]) + '\\n')\n"
        "rate = (1000.0 if gpu == '3' else 500.0) * (1.5 if arm == 'tuned' else 1.0)\n"
        "print(f'throughput: {rate} tokens/s')\n"
    )
    csv = tmp_path / "bundle.csv"
    csv.write_text("Validator,PT_VERSION,2.11.0\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3,5"}
    scratch = tmp_path / "scratch"
    out = ab_test([sys.executable, str(script)], csv, scratch, reps=3, timeout_s=60, env=env, parallel_gpus=[0, 1])
    assert out["reps"] == 4 and out["parallel_gpus"] == [0, 1], "two rounds of two alternations"
    assert "(medians of 4 alternating runs, side by side on 2 GPUs (x1.500 on GPU 0, x1.500 on GPU 1))" in (
        summary_line(out)
    )
    assert [r["gpu"] for r in out["runs"]["tuned"]] == [0, 1, 0, 1], "each run names the GPU it ran on"
    assert [r["tokens_per_s"] for r in out["runs"]["baseline"]] == [1000.0, 500.0] * 2, "the boards differ"
    assert out["by_gpu"] == {"0": {"pairs": 2, "speedup": 1.5}, "1": {"pairs": 2, "speedup": 1.5}}
    assert out["tokens_speedup"] == pytest.approx(1.5) and out["interval"] == pytest.approx([1.5, 1.5])
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(gpu for _, gpu, _, _ in runs) == ["3"] * 4 + ["5"] * 4, "each run saw one GPU"
    for arm, gpu, start, end in runs:  # a run overlaps its other GPU's run of the same arm, never another arm's
        overlapping = [r for r in runs if r[2] < end and start < r[3] and r[1] != gpu]
        assert overlapping and all(r[0] == arm for r in overlapping)
    assert (scratch / "gpu0" / "tunableop_results0.csv").exists() and (
        scratch / "gpu1" / "tunableop_results0.csv"
    ).exists()


def test_the_ab_alternates_more_until_it_resolves_a_3_percent_effect_or_says_it_cannot(tmp_path):
    """A workload whose rate wanders run to run: the A/B goes on past the alternations asked while the interval
    of the paired ratio is wider than 3%, stops at four times as many, and its line says it could not resolve;
    a steady one stops at the alternations asked, resolved."""
    from pipeline.stages.validate.e2e import MORE_REPS, paired_ratios
    from pipeline.stages.validate.e2e_report import resolution_line
    from pipeline.stats import pairs_to_resolve

    counter = tmp_path / "runs"
    script = tmp_path / "workload.py"
    script.write_text(  # each run counts itself under a lock: side by side, two run at once
        "import fcntl, os\n"
        f"f = open({str(counter)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX); f.seek(0); n = len(f.read())\n"
        "f.write('x'); f.close()\n"
        "wobble = float(os.environ.get('WOBBLE', '0'))\n"
        "tuned = 'PYTORCH_TUNABLEOP_FILENAME' in os.environ\n"
        "print(f'step p50 1.00 ms, p99 {2.5 if tuned else 3.0:.2f} ms')\n"
        "print(f'throughput: {1000.0 * (1 + wobble * ((n * 7) % 5 - 2)):.1f} tokens/s')\n"
    )
    csv = tmp_path / "bundle.csv"
    csv.write_text("Validator,PT_VERSION,2.11.0\n")
    env = {**os.environ, "WOBBLE": "0.05"}
    out = ab_test([sys.executable, str(script)], csv, tmp_path / "s", reps=2, timeout_s=60, env=env)
    assert out["reps"] == 2 * MORE_REPS and len(out["runs"]["tuned"]) == 2 * MORE_REPS and not out["resolved"]
    assert out["interval"][1] - out["interval"][0] > 0.03
    line = resolution_line(out)
    assert "cannot resolve a 3% effect after 8 alternations" in line
    needed = int(line.split("at this spread about ")[1].split()[0])  # the pairs' own spread, extrapolated
    assert needed > 8 and pairs_to_resolve(paired_ratios(out["runs"]), 0.03) == needed
    two = {**env, "CUDA_VISIBLE_DEVICES": "3,5"}  # side by side: a round makes two alternations
    capped = ab_test(
        [sys.executable, str(script)], csv, tmp_path / "u", 2, 60, env=two, max_reps=5, parallel_gpus=[0, 1]
    )
    assert capped["reps"] == 4 and not capped["resolved"], "whole rounds of two, never past the five at most"
    env["WOBBLE"] = "0"
    steady = ab_test([sys.executable, str(script)], csv, tmp_path / "t", reps=2, timeout_s=60, env=env)
    assert steady["reps"] == 2 and steady["resolved"] and steady["interval"] == [1.0, 1.0]
    assert "cannot resolve" not in resolution_line(steady)
    assert steady["baseline"]["median_p99_ms"] == 3.0 and steady["tuned"]["median_p99_ms"] == 2.5
    assert "p99 step latency 3.00 -> 2.50 ms" in summary_line(steady)


def _run_dir(root: Path, measurements: dict) -> Path:
    """A run whose stages up to the merges are done and whose GEMMs were measured (recorded data)."""
    run = root / "night"
    (run / "configs").mkdir(parents=True)
    (run / "configs" / "configs.json").write_text(json.dumps({"padded": []}))
    entries = [
        TunableOpEntry.from_problem(parse_key(*r["key"].split(",", 1)), r["solution"], r["tuned"]["median_us"] / 1000)
        for r in measurements["rows"]
    ]
    write_file(run / "merge" / "tunableop_results.csv", {"PT_VERSION": "2.11.0"}, entries)
    (run / "merge" / "logic-merge.log").write_text("merged\n")
    winners = [
        ((e.problem.m, e.problem.n, 1, e.problem.k), {"SolutionNameMin": e.solution, "AlgoId": 66}, 1.0)
        for e in entries
        if e.solution != "Default"
    ]
    logic = cublaslt_equality({"DataType": "bfloat16"}, "sm_90", ["NVIDIA H100 80GB HBM3"], winners)
    (run / "merge" / "logic").mkdir()
    (run / "merge" / "logic" / "cublaslt_Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml").write_text(dump_logic(logic))
    (run / "shapes").mkdir()
    (run / "shapes" / "shapes.json").write_text(
        json.dumps(
            [
                {
                    "op_signature": r["key"].split(",")[0],
                    "params_signature": r["key"].split(",")[1],
                    "count": r["count"],
                }
                for r in measurements["rows"]
            ]
        )
    )
    (run / "bench").mkdir()
    (run / "bench" / "runtime.json").write_text(json.dumps({"pt_version": "2.11.0", "name": "NVIDIA H100 80GB HBM3"}))
    (run / "validate").mkdir()
    (run / "validate" / "measurements.json").write_text(json.dumps(measurements))
    stack = TuneWorkload(workdir=str(root), run_name="night", untuned="x.csv").stack()
    for stage in ("bench", "merge", "validate"):  # done under this machine's stack
        (run / stage / STAMP).write_text(json.dumps({"fingerprint": stack.fingerprint}))
    return run


def _build(task) -> bool:
    return luigi.build([task], local_scheduler=True, detailed_summary=False, log_level="CRITICAL")


@pytest.fixture
def no_nvmath(monkeypatch):
    """Validate as on a machine without nvmath-python, whatever this one has (the skip reason is fixed)."""
    from pipeline.stages.validate import e2e

    monkeypatch.setattr(e2e, "has_nvmath", lambda: False)


def test_validate_bundles_kept_rows_and_reports(tmp_path, capsys, no_nvmath):
    run = _run_dir(tmp_path, RECORDED)
    assert _build(TuneWorkload(workdir=str(tmp_path), run_name="night", untuned="x.csv"))
    bundle = read_file(run / "bundle" / "tunableop_results.csv")
    assert [e.problem.m for e in bundle.entries] == [6144, 4096] and bundle.validators == {"PT_VERSION": "2.11.0"}
    logic = yaml.safe_load((run / "bundle" / "records" / "cublaslt_Cijk_Alik_Bljk_BBS_BH_UserArgs.yaml").read_text())
    assert [row[0] for row in logic[7]] == [[6144, 32, 1, 4096], [4096, 128, 1, 14336]]
    manifest = json.loads((run / "bundle" / "manifest.json").read_text())
    assert manifest["rows"] == 2 and len(manifest["dropped"]) == 2
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["passed"] and summary["kept"] == 2 and summary["gemms"] == 4
    assert summary["kept_geomean_speedup"] == pytest.approx((21.5 / 20.2 * 60 / 50) ** 0.5)
    assert "no runtime consumer" in summary["e2e"]
    for name in ("report.md", "report.html", "speedup.svg", "roofline.svg", "time_share.svg"):
        assert (run / "report" / name).stat().st_size > 0
    md = (run / "report" / "report.md").read_text()
    lines = (run / "tune-workload.txt").read_text().splitlines()
    assert "| weighted GEMM speedup (by calls x baseline time) | x1.0" in md and "no: x1.008 does not beat" in md
    assert "## Top GEMMs by share of the workload's GEMM time" in md
    top = summary["top_gemms"]
    assert [t["time_share"] for t in top] == sorted((t["time_share"] for t in top), reverse=True)
    assert sum(t["time_share"] for t in top) == pytest.approx(1.0) and len(top) == 4
    assert any(line.startswith("top GEMM: ") and "% of GEMM time" in line for line in lines)
    calls = {t["label"]: t["calls"] for t in top}
    for line in (ln for ln in lines if ln.startswith("top GEMM: ")):
        count = calls[line.removeprefix("top GEMM: ").split(",")[0]]
        assert f", {count} call{'' if count == 1 else 's'}, " in line, line
    assert (
        lines[0].startswith("bundle accepted")
        and lines[-1].startswith("report: ")
        and lines[-1].endswith("report.html")
    )
    assert "Validate" in summary["stage_seconds"] or "TuneWorkload" not in summary["stage_seconds"]
    assert any(line.startswith("stage times: ") and "Validate" in line for line in lines)
    shutil.rmtree(run / "report")
    assert main(["report", str(run)]) == 0
    assert (run / "report" / "report.html").exists() and "bundle accepted" in capsys.readouterr().out


def test_validate_without_bench_records_uses_the_measured_runtime(tmp_path, no_nvmath):
    run = _run_dir(tmp_path, RECORDED)
    (run / "bench" / "runtime.json").unlink()  # merged results given with --results: no Bench stage ran
    assert _build(Validate(workdir=str(tmp_path), run_name="night", untuned="x.csv", results="given.csv"))
    assert "torch 2.11.0 on CUDA" in json.loads((run / "validate" / "e2e.json").read_text())["skipped"]
    assert json.loads((run / "bundle" / "manifest.json").read_text())["runtime"]["pt_version"] == "2.11.0"


def test_validate_refuses_a_regressing_bundle_but_still_reports(tmp_path):
    measurements = copy.deepcopy(RECORDED)
    measurements["rows"][2]["confirm"]["tuned"].update(median_us=90.0, p25_us=89.8, p75_us=90.2)
    run = _run_dir(tmp_path, measurements)
    assert not _build(Validate(workdir=str(tmp_path), run_name="night", untuned="x.csv"))
    assert not (run / "bundle").exists()
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert not summary["passed"] and summary["verdict"].startswith("bundle refused: 1 kept rows regress")
    assert summary["bundle"] == "refused (see verdict)"


def test_gate_on_recorded_h100_measurements():
    """Measurements the Validate stage recorded for the embedded workload on an H100 (2026-11-22)."""
    recorded = json.loads((FIXTURES / "validate" / "h100_embedded_2026-11-22.json").read_text())
    rows = recorded["rows"]
    assert recorded["meta"]["device"]["name"] == "NVIDIA H100 80GB HBM3" and len(rows) == 26
    result = gate(typed(rows), GateSettings())
    assert result.passed and result.kept
    assert all(r.baseline.median / r.tuned.median >= 1.02 for r in result.kept)
    assert len(result.kept) + len(result.dropped) == len(rows)
    kept = {r.key for r in result.kept}
    cost = {r["key"]: r["count"] * r["baseline"]["median_us"] for r in rows}  # no time shares recorded then
    ratio = {
        r["key"]: r["confirm"]["tuned"]["median_us"] / r["confirm"]["baseline"]["median_us"]
        if r["key"] in kept
        else 1.0
        for r in rows
    }
    after = sum(cost[k] * ratio[k] for k in cost) / sum(cost.values())
    assert result.weight_basis == "calls x baseline time"
    assert result.weighted_speedup == pytest.approx(1 / after) and result.weighted_speedup > 1.0


def test_gate_weighs_by_time_share_and_counts_untuned_time_at_baseline():
    """Rows weigh their share of the workload's GEMM time; GEMMs that no row covers stay at x1."""
    rows = copy.deepcopy(RECORDED["rows"])
    for row, share in zip(rows, (0.05, 0.05, 0.5, 0.2), strict=True):  # 0.8 in rows: 0.2 was never tuned
        row["time_share"] = share
    result = gate(typed(rows), GateSettings())
    kept = {r.key for r in result.kept}
    assert kept == {rows[1]["key"], rows[2]["key"]} and result.weight_basis == "time share"
    confirmed = [r["confirm"]["tuned"]["median_us"] / r["confirm"]["baseline"]["median_us"] for r in rows[1:3]]
    after = 0.2 + 0.05 + 0.05 * confirmed[0] + 0.5 * confirmed[1] + 0.2
    assert result.weighted_speedup == pytest.approx(1 / after)
    rows[3]["time_share"] = None  # one row without a share: every row falls back to calls x baseline time
    assert gate(typed(rows), GateSettings()).weight_basis == "calls x baseline time"


def test_validation_worker_failure_names_the_exit_code_and_log(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    run = tmp_path / "night"
    run.mkdir()  # no merged results: the worker fails at once, on any machine
    with pytest.raises(ToolError, match=r"validation worker exited with code 1 \(.*validate.log\):\n(.|\n)*merge"):
        run_worker(run, [0], rounds=1, margin=0.02)
    assert (run / "validate" / "validate.log").exists()


def test_report_lists_leading_dimensions_normalised_for_blas(tmp_path):
    measurements = copy.deepcopy(RECORDED)
    rotary = "GemmStridedBatchedTunableOp_float_TN,tn_32_1_1_B_2_ld_1_1_1"  # recorded by HF Llama on the H100
    measurements["rows"][0].update(key=rotary, op="gemm_strided_batched", m=32, n=1, k=1, batch=2)
    run = _run_dir(tmp_path, measurements)
    assert _build(Validate(workdir=str(tmp_path), run_name="night", untuned="x.csv"))
    md = (run / "report" / "report.md").read_text()
    assert "## Leading dimensions normalised for the BLAS libraries" in md
    assert f"| `{rotary}` | ldc=1 < 32 rows: raised to 32 for BLAS |" in md
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["ld_normalised"] == {rotary: ["ldc=1 < 32 rows: raised to 32 for BLAS"]}


def test_nothing_kept_is_exactly_x1_whatever_the_shares_add_up_to():
    rows = copy.deepcopy(RECORDED["rows"])
    for row, share in zip(rows, (0.3, 0.3, 0.3, 0.1), strict=True):  # these add up to 1 - 2e-16 in floats
        row.update(time_share=share, solution="Default")
    result = gate(typed(rows), GateSettings(min_speedup=1.0))
    assert result.weighted_speedup == 1.0 and result.passed and not result.kept


def test_report_lists_gemms_the_compiled_workload_kept_from_the_library(tmp_path, no_nvmath):
    run = _run_dir(tmp_path, RECORDED)
    (run / "collect").mkdir()
    log = Path(__file__).parent / "fixtures" / "inductor" / "autotune_written.log"
    (run / "collect" / "workload.stderr.log").write_text(log.read_text())
    assert _build(TuneWorkload(workdir=str(tmp_path), run_name="night", untuned="x.csv"))
    md = (run / "report" / "report.md").read_text()
    assert "## Compiled workload: GEMMs not sent to the library" in md
    assert "- mm(8x4096, 4096x6144) torch.bfloat16, torch.bfloat16: not sent to the library" in md
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert [t["kernel"] for t in summary["not_sent"]["inductor_kernels"]] == ["triton_mm_4", "triton_mm_31"]
    assert (
        "not through the library: 2 GEMMs compiled to Inductor's own kernels, 0 kept rows"
        in (run / "tune-workload.txt").read_text()
    )


def test_the_runtimes_dispatch_is_reported_per_run_and_a_failed_measurement_is_said(tmp_path):
    from pipeline.stages.validate import e2e_runtime

    (tmp_path / "runtime.json").write_text(json.dumps({"tuned_calls": {"a k": 30}, "fallbacks": {"no tuned row": 12}}))
    (tmp_path / "runtime.77.json").write_text(json.dumps({"tuned_calls": {"a k": 30}, "fallbacks": {}}))
    (tmp_path / "runtime.78.json").write_text(json.dumps({"tuned_calls": {}, "fallbacks": {"no tuned row": 12}}))
    records = e2e_runtime.status_records(tmp_path)
    assert e2e_runtime.calls_per_run(records, reps=3) == pytest.approx(28.0)  # 84 calls, three runs
    ab = {
        "reps": 3,
        "via": "runtime",
        "wall_speedup": 1.0,
        "calls_per_run": 28.0,
        "host_cost": {"over_us": 9.5, "torch_us": 20.0},
    }
    line = summary_line(ab)
    assert "+9.5 us a call over torch's 20.0 us on this host" in line and "28 calls a run, 0.3 ms" in line
    failed = e2e_runtime.host_cost(tmp_path / "no-bundle", tmp_path, dict(os.environ), timeout_s=120)
    assert failed.keys() == {"error"} and "pipeline.runtime.hostcost" in failed["error"]
    assert "code 11: gemm-tune runtime host cost: cannot measure " in failed["error"]
    assert "host cost per call not measured: " in summary_line({**ab, "host_cost": failed})


def test_the_host_budget_says_when_the_runtime_costs_a_run_more_host_time_than_it_saves_gpu_time():
    from pipeline.stages.validate.e2e_report import budget_line
    from pipeline.stages.validate.e2e_runtime import host_budget, tuned_calls_per_run

    records = [{"tuned_calls": {"Gemm_x k1": 30, "triton_y k2": 6}}, {"tuned_calls": {"Gemm_x k1": 30}}]
    calls = tuned_calls_per_run(records, reps=3)
    assert calls == {"k1": 20.0, "k2": 2.0}
    e2e = {"tuned_calls_per_run": calls, "calls_per_run": 100.0, "host_cost": {"over_us": 5.0, "torch_us": 20.0}}
    measured = {"k1": (30.0, 20.0), "k2": (10.0, 9.0), "k3": (50.0, 1.0)}  # k3 never ran tuned: saves nothing
    budget = host_budget(e2e, measured)
    assert budget == {
        "host_us_per_run": 500.0,
        "gpu_saved_us_per_run": 202.0,
        "host_bound_risk": True,
        "graphs_only": False,
    }
    flat = {"tokens_speedup": 1.004, "noise": 0.01, "reps": 3}  # no gain beyond noise: the host may be why
    line = budget_line({**e2e, **flat, "host_budget": budget})
    assert "0.50 ms of host time a run against 0.20 ms of GPU time" in line and "CUDA graphs" in line
    assert "the runtime with --graphs-only" in line
    gained = {"tokens_speedup": 1.08, "noise": 0.005, "reps": 3}  # graph replays saved what no status counts
    assert budget_line({**e2e, **gained, "host_budget": budget}) == ""
    paying = host_budget({**e2e, "calls_per_run": 10.0}, measured)
    assert not paying["host_bound_risk"] and budget_line({**e2e, "host_budget": paying}) == ""
    assert host_budget({**e2e, "host_cost": {"skipped": "no GPU"}}, measured) is None
    captured = host_budget({**e2e, "runtime": {"graphs_only": {"captures": 4}}}, measured)  # paid once a capture
    assert captured["graphs_only"] and not captured["host_bound_risk"]
    assert budget_line({**e2e, **flat, "host_budget": captured}) == "", "no advice to run what already runs"


def test_an_ab_beside_the_job_is_budgeted_against_the_runs_own_validated_rows(tmp_path):
    """``host_budget_of`` a run directory reads Validate's medians from its measurements, as the gate does from
    its rows (``bench/serving.py``'s eager arm runs its A/B after the job); a run that never validated has no
    row to save GPU time: every host microsecond is a loss."""
    from pipeline.stages.validate.acceptance import host_budget_of

    rows = typed(RECORDED["rows"])
    tuned = {row.key: 100.0 for row in rows}
    e2e = {"tuned_calls_per_run": tuned, "calls_per_run": 1000.0, "host_cost": {"over_us": 5.0, "torch_us": 20.0}}
    run = tmp_path / "run"
    (run / "validate").mkdir(parents=True)
    (run / "validate" / "measurements.json").write_text(json.dumps(RECORDED))
    from_rows, from_run = host_budget_of(e2e, rows), host_budget_of(e2e, run)
    saved = sum(100.0 * (row.baseline.median - row.tuned.median) for row in rows)
    assert from_run == from_rows and from_rows["gpu_saved_us_per_run"] == pytest.approx(saved) and saved != 0
    assert host_budget_of(e2e, tmp_path / "never-validated")["gpu_saved_us_per_run"] == 0


def test_the_html_report_escapes_what_it_shows(tmp_path, capsys, no_nvmath):
    """A run name and a key with markup characters show as text in report.html (its template is
    ``report.html.j2``, which autoescaping by the extension "html" alone missed); the Markdown stays as is."""
    run = _run_dir(tmp_path, RECORDED)
    assert _build(TuneWorkload(workdir=str(tmp_path), run_name="night", untuned="x.csv"))
    odd = run.rename(tmp_path / "<i>x&y")
    assert main(["report", str(odd)]) == 0
    html = (odd / "report" / "report.html").read_text()
    assert "&lt;i&gt;x&amp;y" in html and "<i>x&y" not in html
    md = (odd / "report" / "report.md").read_text()
    assert "<i>x&y" in md
    assert md.split("![speedup per problem]")[0].endswith("|\n\n"), "the charts after the table, not in it"


def test_an_interrupted_ab_resumes_at_its_first_unfinished_alternation(tmp_path):
    """The A/B of a job killed mid-way (a 10-minute limit, a reboot) goes on where it stopped when the job is run
    again: the alternations it finished are kept, not run again; another bundle starts afresh."""
    from pipeline.stages.validate.e2e import CHECKPOINT

    counter, script = tmp_path / "runs", tmp_path / "workload.py"
    script.write_text(
        "import os, pathlib\n"
        f"p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) if p.exists() else 0; p.write_text(str(n + 1))\n"
        "if n == int(os.environ.get('DIE_AT', '-1')): raise SystemExit(3)\n"
        "tuned = 'PYTORCH_TUNABLEOP_FILENAME' in os.environ\n"
        "print(f'throughput: {1500.0 if tuned else 1000.0} tokens/s')\n"
    )
    csv = tmp_path / "bundle.csv"
    csv.write_text("Validator,PT_VERSION,2.11.0\n")
    scratch = tmp_path / "s"
    with pytest.raises(RuntimeError, match="exited with code 3"):
        ab_test([sys.executable, str(script)], csv, scratch, reps=3, timeout_s=60, env={**os.environ, "DIE_AT": "4"})
    assert len(json.loads((scratch / CHECKPOINT).read_text())["runs"]["tuned"]) == 2  # two whole alternations
    out = ab_test([sys.executable, str(script)], csv, scratch, reps=3, timeout_s=60)
    assert int(counter.read_text()) == 5 + 2 and out["reps"] == 3 and out["tokens_speedup"] == pytest.approx(1.5)
    assert not (scratch / CHECKPOINT).exists()  # finished: nothing to resume
    with pytest.raises(RuntimeError):
        ab_test([sys.executable, str(script)], csv, scratch, reps=3, timeout_s=60, env={**os.environ, "DIE_AT": "8"})
    csv.write_text("Validator,PT_VERSION,2.12.0\n")  # another bundle: its A/B is its own
    counter.write_text("0")
    ab_test([sys.executable, str(script)], csv, scratch, reps=3, timeout_s=60)
    assert int(counter.read_text()) == 6


def test_several_gpus_split_the_rows_and_measure_what_one_gpu_measures(tmp_path, monkeypatch):
    """Given two GPUs, one validation worker per GPU times every other row (each row on one board alone), and
    the last worker reads them back: the same measurements as one GPU's, both GPUs used, progress summed."""
    from .helpers import DOUBLE, UNTUNED, first_gemms, run_amd_dag

    untuned = first_gemms(tmp_path, UNTUNED, 3)
    run_amd_dag(tmp_path, "v", "", "MergeResults", untuned=untuned, rounds=None)  # what Validate reads
    settings = tmp_path / "settings.jsonl"
    for name, value in {
        "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"),
        "HIPBLASLT_DOUBLE_GENERATION": "2025",
        "HIPBLASLT_DOUBLE_NOISE": "0",
        "HIPBLASLT_DOUBLE_SETTINGS_LOG": str(settings),
    }.items():
        monkeypatch.setenv(name, value)
    runs = {}
    for gpus in ([0], [0, 1]):
        run = tmp_path / f"on{len(gpus)}"
        shutil.copytree(tmp_path / "w" / "v", run)
        settings.write_text("")
        seen: list[tuple[int, int]] = []
        run_worker(run, gpus, rounds=1, margin=0.02, progress=lambda done, total, seen=seen: seen.append((done, total)))
        runs[len(gpus)] = json.loads((run / "validate" / "measurements.json").read_text())
        used = {json.loads(line)["device"] for line in settings.read_text().splitlines()}
        assert used == set(gpus), f"{gpus}: the double ran on {used}"
        rows = len(runs[len(gpus)]["rows"]) + len(runs[len(gpus)]["held_out"])
        assert seen and seen[-1] == (rows, rows)
    assert (tmp_path / "on2" / "validate" / "validate-shard1.log").exists()
    assert runs[2]["rows"] == runs[1]["rows"] and runs[2]["held_out"] == runs[1]["held_out"]
    assert len(runs[1]["rows"]) == 3 and DOUBLE in runs[1]["meta"]["device"]["tool"]

    from pipeline.stages.validate.validate import rows_to_measure

    failing = tmp_path / "failing"  # the second shard's row fails on the board: the stage fails naming its log
    shutil.copytree(tmp_path / "w" / "v", failing)
    monkeypatch.setenv("HIPBLASLT_DOUBLE_FAIL", str(rows_to_measure(failing)[1].problem.m))
    failed = r"validation worker exited with code [1-9] \(.*validate-shard1.log\):\n(.|\n)*HIPBLAS_STATUS"
    with pytest.raises(ToolError, match=failed):
        run_worker(failing, [0, 1], rounds=1, margin=0.02)
    assert not (failing / "validate" / "measurements.json").exists()


@pytest.mark.parametrize("shard", ["2/2", "1", "a/2", "-1/2"])
def test_a_shard_that_is_not_i_of_n_is_refused(tmp_path, shard, capsys):
    from pipeline.stages.validate.validate import main as validate_main

    with pytest.raises(SystemExit) as exit_:
        validate_main([str(tmp_path), f"--shard={shard}"])
    assert exit_.value.code == 2 and "0 <= I < N" in capsys.readouterr().err

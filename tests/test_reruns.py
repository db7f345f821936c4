"""A rerun must not ignore what changed, two runs of one run name never share its directory, and a plain
``luigi`` run that the pipeline refuses says so in one line, last (#34), against the hipblaslt-bench double."""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.formats.tunableop import read_file
from pipeline.problem import GemmProblem

from .helpers import FIXTURES, amd_dag, first_gemms, luigi_argv, run_amd_dag

LLAMA = FIXTURES / "tunableop" / "torch2.11_hf_llama_untuned0.csv"
MISTRAL = FIXTURES / "tunableop" / "torch2.11_hf_mistral_untuned0.csv"
GEMMS = 4  # of each file's 12: two sets of shapes that differ is what these tests need


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    """Two recorded untuned files with different shapes (the first GEMMs of an HF Llama's and a Mistral's)."""
    (tmp_path / "in").mkdir(exist_ok=True)
    return first_gemms(tmp_path / "in", LLAMA, GEMMS), first_gemms(tmp_path / "in", MISTRAL, GEMMS)


FAST = ("--validate-rounds", "1", "--e2e-reps", "1")


def _gathered(tmp_path: Path, run: str) -> set[str]:
    rows = json.loads((tmp_path / "w" / run / "shapes" / "shapes.json").read_text())
    return {f"{r['op_signature']},{r['params_signature']}" for r in rows}


def _keys(path: Path) -> set[str]:
    return {f"{e.op_signature},{e.params_signature}" for e in read_file(path).entries}


def _last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.long
def test_a_rerun_with_other_inputs_redoes_what_changed_and_a_true_no_op_does_nothing(tmp_path):
    A, B = _inputs(tmp_path)
    assert _keys(A) != _keys(B)
    inputs = {path: path.read_bytes() for path in (A, B)}
    csv = tmp_path / "mine.csv"
    csv.write_bytes(A.read_bytes())
    first = run_amd_dag(tmp_path, "r", "", "TuneWorkload", *FAST, untuned=csv)
    assert _gathered(tmp_path, "r") == _keys(A)
    same = run_amd_dag(tmp_path, "r", "", "TuneWorkload", *FAST, untuned=csv)
    assert "ran successfully" not in same.stderr and "redoing" not in same.stderr, "nothing changed: nothing done"
    said = (tmp_path / "w" / "r" / "tune-workload.txt").read_text().splitlines()
    assert said[0].startswith("bundle accepted") and said[-1].startswith("report: ") and said[0] in first.stdout
    assert f"{tmp_path / 'w' / 'r'} is done already; its result:" in same.stdout
    assert all(line in same.stdout for line in said), "the verdict and the report's path, as the first run said"

    other = run_amd_dag(tmp_path, "r", "", "TuneWorkload", *FAST, untuned=B)
    said = [line for line in other.stderr.splitlines() if "redoing" in line]
    assert len(said) == 1 and f"--untuned '{csv}' -> '{B}'" in said[0] and "GatherShapes" in said[0]
    assert _gathered(tmp_path, "r") == _keys(B)
    bench = json.loads((tmp_path / "w" / "r" / "bench" / "summary.json").read_text())
    assert bench["problems"] == len(_keys(B)), "Bench tuned B's shapes, not A's"
    assert (tmp_path / "w" / "r" / "shapes.before-redo" / "shapes.json").exists(), "the old stage is kept aside"

    csv.write_bytes(B.read_bytes())  # the same path, other content
    run_amd_dag(tmp_path, "c", "", "TuneWorkload", *FAST, untuned=csv)
    csv.write_bytes(A.read_bytes())
    refused = run_amd_dag(tmp_path, "c", "", "TuneWorkload", *FAST, "--no-redo", untuned=csv, check=False)
    assert refused.returncode == 5
    assert "Traceback" not in refused.stderr
    last = _last_line(refused)
    assert "(exit 12, bad input)" in last and f"{csv} changed (content)" in last and "--no-redo" in last
    assert _gathered(tmp_path, "c") == _keys(B), "refused: nothing was redone"
    redone = run_amd_dag(tmp_path, "c", "", "TuneWorkload", *FAST, untuned=csv)
    assert f"{csv} changed (content)" in redone.stderr and _gathered(tmp_path, "c") == _keys(A)
    assert {path: path.read_bytes() for path in (A, B)} == inputs, "the runs left their inputs byte-identical"
    assert csv.read_bytes() == A.read_bytes()


def test_a_changed_tuning_parameter_redoes_bench_with_the_new_shapes(tmp_path):
    A, B = _inputs(tmp_path)
    run_amd_dag(tmp_path, "m", "", "TuneWorkload", *FAST, untuned=A)
    run = run_amd_dag(tmp_path, "m", "", "TuneWorkload", *FAST, "--margin", "0.05", untuned=B)
    (said,) = [line for line in run.stderr.splitlines() if "redoing" in line]  # one line for every change
    assert "Bench: --margin unset -> 0.05" in said and "Validate: --margin unset -> 0.05" in said
    assert f"GatherShapes: --untuned '{A}' -> '{B}'" in said and "redoing GatherShapes and what" in said
    stamped = [p.name for p in (tmp_path / "w" / "m").iterdir() if p.name.startswith("bench.")]
    assert len(stamped) == 1, "the stage of the other tuning settings is kept as bench.<its fingerprint>"
    tuned = {
        GemmProblem.from_dict(json.loads(p.read_text())["problem"])
        for p in (tmp_path / "w" / "m" / "bench" / "problems").glob("*.json")
    }
    assert tuned == {e.problem for e in read_file(B).entries}


@pytest.mark.long
def test_two_runs_of_one_run_name_at_once(tmp_path):
    command, env = amd_dag(tmp_path, "same", "", "TuneWorkload", *FAST, untuned=_inputs(tmp_path)[0])
    slow = {**env, "HIPBLASLT_DOUBLE_DELAY": "0.3"}  # ~25 launches: the first run holds its name ~10 s
    first = subprocess.Popen(command, cwd=tmp_path, env=slow, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = tmp_path / "w" / "same" / ".gemm-tune-run.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        identical = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert identical.returncode == 13 and "already running" in identical.stdout + identical.stderr
        other = subprocess.run(
            [*command, "--margin", "0.04"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert other.returncode == 5, other.stderr[-2000:]
        last = _last_line(other)
        assert "Locked (exit 13, busy)" in last and f'"pid": {first.pid}' in last and "(luigi exit 5)" in last
        assert "Traceback" not in other.stderr
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err[-2000:]
    finally:
        first.kill()
    assert not list((tmp_path / "w" / "same").glob("*.before-redo")), "the refused run changed nothing"


@pytest.mark.parametrize(
    "extra,luigi_code,says",
    [
        (("--gpus", "-1"), 4, "--gpus '-1'"),
        (("--margin", "abc"), 4, "--margin 'abc'"),
        (("--backend", "nosuch"), 4, "--backend 'nosuch'"),
        (("--run-name", "../escape"), 4, "'../escape' is not a run name"),
        (("--run-name", ""), 4, "'' is not a run name"),  # not today's date, as Luigi reads an empty value
        (("--call-times", "maybe"), 4, "--call-times 'maybe'"),
        (("--hipblaslt-bench", "/no/such/bench"), 5, "ToolMissing (exit 11, tool failure)"),
    ],
)
def test_plain_luigi_says_an_expected_error_in_one_line_last(tmp_path, extra, luigi_code, says):
    command, env = amd_dag(tmp_path, "p", "", "TuneWorkload", *FAST)
    proc = subprocess.run([*command, *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == luigi_code, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = _last_line(proc)
    assert last.startswith("ERROR: gemm-tune: ") and says in last and f"(luigi exit {luigi_code})" in last
    assert not (tmp_path / "escape").exists()
    assert not (tmp_path / "w" / datetime.date.today().isoformat()).exists()


def test_a_workdir_that_cannot_be_written_is_bad_input_in_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    command, env = amd_dag(tmp_path, "p", "", "TuneWorkload", *FAST)
    command[command.index("--workdir") + 1] = str(tmp_path / "afile" / "w")
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 5 and "Traceback" not in proc.stderr
    assert "(exit 12, bad input)" in _last_line(proc) and "cannot be created or written" in _last_line(proc)


def test_a_failing_task_ends_with_its_line_after_luigis_summary(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("GemmTunableOp_Half_TN,tn_8_8\n")
    command, env = amd_dag(tmp_path, "f", "", "TuneWorkload", *FAST)
    command[command.index("--untuned") + 1] = str(bad)
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "Luigi Execution Summary" in proc.stderr
    last = _last_line(proc)
    assert f"{bad}:1: params 'tn_8_8'" in last and "(exit 12, bad input)" in last and "(luigi exit 2)" in last


def test_an_nvidia_run_renders_no_amd_configs():
    from pipeline.tasks import GenerateConfigs, Validate

    def requires(backend: str) -> set[str]:
        return {type(t).__name__ for t in Validate(backend=backend, untuned="x.csv").requires()}

    assert "GenerateConfigs" not in requires("cublaslt")
    assert GenerateConfigs.__name__ in requires("hipblaslt")


def test_gemm_tune_report_never_writes_beside_a_run_that_holds_the_directory(tmp_path, capsys):
    import sys

    from pipeline.cli import main

    run = tmp_path / "w" / "held"
    run.mkdir(parents=True)
    hold = (
        "import time; from pipeline.stages.ship.nightly import RunLocks; locks = RunLocks(); "
        f"locks.hold({str(run)!r}); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["report", str(run)]) == 13
        assert "is in use by another run" in capsys.readouterr().err
    finally:
        holder.kill()
    assert main(["report", str(tmp_path / "w" / "typo")]) == 12
    assert not (tmp_path / "w" / "typo").exists()


def test_a_redone_stage_drops_the_times_of_later_stages_made_before_it(tmp_path):
    """A rerun that redid Bench and stopped at Validate keeps no Package time of the earlier run: a stage's
    record drops those of later stages that ended before it started; an earlier stage's stays."""
    from pipeline.stages.run import timings

    timings.record(tmp_path, "GatherShapes", 1.0, end=100.0)
    timings.record(tmp_path, "Bench", 10.0, end=120.0)
    timings.record(tmp_path, "Validate", 5.0, end=130.0)
    timings.record(tmp_path, "Package", 0.1, end=131.0)
    timings.record(tmp_path, "Bench", 12.0, end=200.0)  # the rerun redoes Bench ...
    assert list(timings.seconds(tmp_path)) == ["GatherShapes", "Bench"]
    timings.record(tmp_path, "validate-gemms", 3.0, end=205.0)  # ... and Validate, its parts first
    timings.record(tmp_path, "Validate", 6.0, end=207.0)
    assert timings.seconds(tmp_path) == {"GatherShapes": 1.0, "Bench": 12.0, "validate-gemms": 3.0, "Validate": 6.0}
    assert "Package" not in timings.line(timings.seconds(tmp_path))


def test_luigis_help_lists_each_parameter_once_with_its_choices_in_order_and_its_default(tmp_path):
    """``luigi --module pipeline TuneWorkload --help``: the short form of each parameter alone, its choices sorted
    and its default said (Luigi's own help lists both forms, with neither); the long form still parses."""
    help_run = subprocess.run(luigi_argv("TuneWorkload", "--help", local=False), capture_output=True, text=True)
    text = " ".join(help_run.stdout.split())  # argparse wraps lines
    assert help_run.returncode == 0 and "--TuneWorkload-" not in help_run.stdout
    flags = [line.split()[0] for line in help_run.stdout.splitlines() if line.startswith("  --")]
    assert len(flags) == len(set(flags)) > 30
    assert "(one of cublaslt, find_exact, hipblaslt, tensile, tunableop; default: cublaslt)" in text
    assert "by this fraction (in the stack fingerprint: a change tunes again) (float in [0, 10); default: 0.02)" in text
    assert "sets --tune-margin and --gate-margin both" in text
    assert "Choices: {" not in text and "permitted values" not in text
    long_form = run_amd_dag(tmp_path, "h", "", "TuneWorkload", "--TuneWorkload-m-grid", "2,1", check=False)
    assert long_form.returncode != 0 and "1 comes after 2" in long_form.stderr


def test_the_gate_margin_rejudges_without_tuning_again_and_margin_sets_both(tmp_path):
    """--gate-margin is Validate's alone: a change redoes Validate under the same fingerprint (Bench's results
    stand, nothing moves aside); --tune-margin is in the fingerprint; --margin sets both and says so."""
    from pipeline.stages.bench.registry import entry

    A, _ = _inputs(tmp_path)
    run_amd_dag(tmp_path, "g", "", "TuneWorkload", *FAST, untuned=A)
    bench_summary = tmp_path / "w" / "g" / "bench" / "summary.json"
    made = bench_summary.stat().st_mtime_ns
    gate = run_amd_dag(tmp_path, "g", "", "TuneWorkload", *FAST, "--gate-margin", "0.05", untuned=A)
    (said,) = [line for line in gate.stderr.splitlines() if "redoing" in line]
    assert "Validate: --gate-margin 0.02 -> 0.05" in said and "redoing Validate and what" in said
    assert bench_summary.stat().st_mtime_ns == made and "Bench" not in said
    aside = sorted(p.name for p in (tmp_path / "w" / "g").iterdir() if "." in p.name and not p.name.startswith("."))
    assert aside == ["bundle.before-redo", "report.before-redo", "tune-workload.txt", "validate.before-redo"], aside
    both = run_amd_dag(tmp_path, "g", "", "TuneWorkload", *FAST, "--margin", "0.03", untuned=A)
    assert "--margin 0.03 sets --tune-margin 0.03 and --gate-margin 0.03" in both.stderr
    settings = {"margin": None, "tune_margin": 0.02, "time_budget": 20.0}
    assert entry("hipblaslt").fingerprint_settings(settings)["margin"] == 0.02  # the fingerprints of old runs
    assert entry("hipblaslt").fingerprint_settings({**settings, "margin": 0.03})["margin"] == 0.03


def test_going_back_to_an_earlier_tune_margin_puts_its_stages_back_instead_of_tuning_again(tmp_path):
    """--tune-margin is in the fingerprint: a change sets the stack's stages aside as ``<stage>.<fingerprint>``
    and tunes again; going back to the earlier value puts those stages back, with their records, and runs no
    search or validation; a stage whose inputs changed meanwhile is made again."""
    A, _ = _inputs(tmp_path)
    run = tmp_path / "w" / "m"
    log = tmp_path / "bench.log"

    def invocations() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    first = run_amd_dag(tmp_path, "m", "", "TuneWorkload", *FAST, untuned=A)
    report = (run / "report" / "report.md").read_text()
    fp_first = json.loads((run / "bench" / "stack.json").read_text())["fingerprint"]
    other = run_amd_dag(tmp_path, "m", "", "TuneWorkload", *FAST, "--tune-margin", "0.05", untuned=A)
    assert "redoing" in other.stderr and (run / f"bench.{fp_first}").is_dir()
    fp_other = json.loads((run / "bench" / "stack.json").read_text())["fingerprint"]
    assert fp_other != fp_first
    before = invocations()
    back = run_amd_dag(tmp_path, "m", "", "TuneWorkload", *FAST, untuned=A)
    (said,) = [line for line in back.stderr.splitlines() if "put back" in line]
    assert "bench, bundle, merge, report, validate" in said and fp_first in said, said
    assert "redoing" not in back.stderr and invocations() == before, "no search, no validation"
    assert json.loads((run / "bench" / "stack.json").read_text())["fingerprint"] == fp_first

    def figures(text: str) -> list[str]:  # the report but its stage-time line (the run's timings, not the stack's)
        return [line for line in text.splitlines() if "total" not in line or " s," not in line]

    assert figures((run / "report" / "report.md").read_text()) == figures(report), "rebuilt from the stages put back"
    from pipeline.stages.validate import history

    (row,) = history.load(tmp_path / "w").runs
    assert row["fingerprint"] == fp_first, "the workdir's history holds the run as it stands again"
    assert first.stdout.splitlines()[0] in back.stdout, "the verdict, as the first run said it"
    assert (run / f"bench.{fp_other}").is_dir(), "the other stack's stages set aside in turn"
    forward = run_amd_dag(tmp_path, "m", "", "TuneWorkload", *FAST, "--tune-margin", "0.05", untuned=A)
    assert "put back" in forward.stderr and invocations() == before
    gate = run_amd_dag(tmp_path, "m", "", "TuneWorkload", *FAST, "--gate-margin", "0.05", untuned=A)
    assert "put back" in gate.stderr and "redoing Validate" in gate.stderr, "Validate's own input changed"
    assert invocations() > before

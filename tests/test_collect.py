from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.runtime.__main__ import AUTOLOAD
from pipeline.stages.gather.collect import (
    CollectionError,
    check_gpu_torch,
    collect,
    parse_decode_tokens_per_s,
    parse_tokens_per_s,
    recording_env,
)

from .helpers import FAKE_WORKLOAD as FAKE
from .helpers import O_PROJ, QKV

ROOT = str(Path(__file__).parents[1])


def test_recording_env(tmp_path):
    env = recording_env(tmp_path, {"PATH": "/bin", "PYTORCH_TUNABLEOP_TUNING": "1"})
    assert env == {
        "PATH": "/bin",
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_TUNING": "0",
        "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "1",
        "PYTORCH_TUNABLEOP_UNTUNED_FILENAME": str(tmp_path / "untuned.csv"),
        "PYTORCH_TUNABLEOP_VERBOSE": "3",
        "PYTORCH_TUNABLEOP_VERBOSE_FILENAME": "err",
        "GEMM_TUNE_RECORD_SCALED": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(AUTOLOAD), ROOT]),
    }


def test_recording_env_is_absolute_whatever_it_is_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = recording_env(Path("workdir/night/collect.partial"), {})
    assert env["PYTORCH_TUNABLEOP_UNTUNED_FILENAME"] == str(tmp_path / "workdir/night/collect.partial/untuned.csv")


def test_the_double_records_nothing_silently_where_torch_would(tmp_path):
    """The fake behaves like torch: a relative name resolves against its own cwd, and a missing directory
    means no file and no error; this is how a relative workdir once lost every GEMM."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {
        **os.environ,
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_TUNING": "0",
        "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "1",
        "PYTORCH_TUNABLEOP_UNTUNED_FILENAME": "workdir/x/untuned.csv",
    }
    proc = subprocess.run([sys.executable, FAKE, QKV], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and not list(tmp_path.rglob("untuned*.csv"))
    (cwd / "workdir" / "x").mkdir(parents=True)
    subprocess.run([sys.executable, FAKE, QKV], cwd=cwd, env=env, check=True, capture_output=True)
    assert (cwd / "workdir" / "x" / "untuned0.csv").read_text() == f"{QKV}\n"


def test_calls_are_counted_from_the_lookup_log_and_stripped_from_stderr(tmp_path):
    out = tmp_path / "collect"
    collect(out, [sys.executable, FAKE, "--gpus", "2", f"{QKV}@5", f"{O_PROJ}@2"])
    calls = json.loads((out / "calls.json").read_text())
    assert calls["calls"] == {QKV: 10, O_PROJ: 4} and calls["total"] == 14
    assert json.loads((out / "manifest.json").read_text())["calls"] == 14
    stderr = (out / "workload.stderr.log").read_text()
    assert stderr == "warning: some library message\n", "TunableOp's per-call chatter is stripped"
    assert not (out / "baseline.json").exists(), "timing only runs when asked (time_on)"


def test_no_lookup_lines_leaves_a_note_and_times_nothing(tmp_path):
    """A workload that swallows its stderr leaves no counts: nothing to time, and the note says why."""
    silent = tmp_path / "silent"
    collect(silent, f"{sys.executable} {FAKE} {QKV} 2>/dev/null", time_on=lambda: pytest.fail("not timed"))
    calls = json.loads((silent / "calls.json").read_text())
    assert calls["calls"] == {} and "each recorded GEMM counts as one call" in calls["note"]


def test_the_workload_runs_in_the_callers_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_model.py").write_text(
        f"import runpy, sys\nsys.argv = ['fake', {QKV!r}]\nrunpy.run_path({FAKE!r}, run_name='__main__')\n"
    )
    collect(Path("collect"), f"{sys.executable} my_model.py")
    assert (tmp_path / "collect" / "untuned0.csv").read_text() == f"{QKV}\n"
    assert json.loads((tmp_path / "collect" / "manifest.json").read_text())["cwd"] == str(tmp_path)


def test_collect_per_gpu_files_and_manifest(tmp_path):
    out = tmp_path / "collect"
    result = collect(out, [sys.executable, FAKE, "--gpus", "2", QKV, O_PROJ])
    assert result.files == [out / "untuned0.csv", out / "untuned1.csv"]
    assert (out / "untuned1.csv").read_text() == f"{QKV}\n{O_PROJ}\n"
    assert result.tokens_per_s == 1234.5
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == ["untuned0.csv", "untuned1.csv"] and manifest["returncode"] == 0
    assert "throughput" in (out / "workload.stdout.log").read_text()
    assert not (tmp_path / "collect.partial").exists()


def test_stale_files_are_removed_before_recording(tmp_path):
    out = tmp_path / "collect"
    stale = tmp_path / "collect.partial"
    stale.mkdir()
    (stale / "untuned0.csv").write_text(f"{O_PROJ}\n")  # left by a crashed run; record mode would append
    collect(out, f"{sys.executable} {FAKE} {QKV}")  # a shell command line
    assert (out / "untuned0.csv").read_text() == f"{QKV}\n"


def test_failing_workload_reports_exit_code_and_stderr_tail(tmp_path):
    out = tmp_path / "collect"
    collect(out, [sys.executable, FAKE, QKV])
    with pytest.raises(CollectionError) as err:
        collect(out, [sys.executable, FAKE, "--exit", "7", O_PROJ])
    message = str(err.value)
    assert "exited with code 7" in message and "CUDA error: out of memory" in message
    assert (out / "untuned0.csv").read_text() == f"{QKV}\n", "a failed run leaves the last good one alone"


def test_workload_that_records_nothing(tmp_path):
    with pytest.raises(CollectionError, match="recorded no GEMM"):
        collect(tmp_path / "collect", [sys.executable, FAKE])


def test_timeout_and_missing_command(tmp_path):
    with pytest.raises(CollectionError, match="ran past 0 s"):
        collect(tmp_path / "collect", "sleep 5", timeout_s=0.2)
    with pytest.raises(CollectionError, match="cannot start workload"):
        collect(tmp_path / "collect", [str(tmp_path / "no-such-program")])


def _fake_python(tmp_path, body):
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_no_torch_message_says_what_to_install(tmp_path):
    python = _fake_python(tmp_path, "echo \"ModuleNotFoundError: No module named 'torch'\" >&2; exit 1")
    with pytest.raises(CollectionError) as err:
        check_gpu_torch(python)
    message = str(err.value)
    assert "No module named 'torch'" in message and "'cuda' extra" in message and "--untuned" in message


def test_no_gpu_message(tmp_path):
    with pytest.raises(CollectionError, match=r"No GPU: .*torch.cuda.is_available\(\) is False.*--untuned"):
        check_gpu_torch(_fake_python(tmp_path, "exit 3"))


def test_parse_tokens_per_s():
    assert parse_tokens_per_s("a 12.5 tokens/s\nthroughput: 300 tokens/s\n") == 300.0
    assert parse_tokens_per_s("no figures") is None
    served = "decode throughput: 520.5 tokens/s (the steps without a prefill chunk)\nthroughput: 480.0 tokens/s\n"
    assert parse_tokens_per_s(served) == 480.0 and parse_decode_tokens_per_s(served) == 520.5
    assert parse_decode_tokens_per_s("throughput: 480.0 tokens/s") is None

"""The nightly entry point: exit codes a scheduler can act on, the workdir lock, the units it prints (run
as printed, from another directory in a bare environment), and what a killed run leaves behind."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline import errors
from pipeline.backends.base import ToolMissing
from pipeline.backends.slots import NoFreeGpu
from pipeline.cli import main
from pipeline.formats.tunableop import TunableOpFormatError
from pipeline.stages.run.fingerprint import ProbeFailed
from pipeline.stages.ship import nightly
from pipeline.stages.validate.gate import GateRefused

from .helpers import DOUBLE, FIXTURES, TARGET, UNTUNED, amd_dag

CUDA_TARGET = FIXTURES / "tunableop" / "torch2.11_cuda_results0.csv"


def test_every_error_carries_its_exit_code():
    assert errors.exit_code(GateRefused("x")) == 10
    assert errors.exit_code(ToolMissing("x")) == errors.exit_code(ProbeFailed("the probe")) == 11
    assert errors.exit_code(TunableOpFormatError("f:1: x")) == 12
    assert errors.exit_code(FileNotFoundError(2, "no such file", "x.csv")) == 12, "a path given that is not there"
    assert errors.exit_code(nightly.Locked("held")) == errors.exit_code(NoFreeGpu("taken")) == 13
    assert errors.exit_code(KeyError("x")) == 1
    assert errors.run_exit_code([]) == 0
    assert errors.run_exit_code([11, 10]) == 10, "a refusal outranks the rest"
    assert errors.run_exit_code([12, 11]) == 11
    said = "ToolMissing (exit 11, tool failure): no bench; second line"  # the whole cause on one line (#65)
    assert errors.one_line(ToolMissing("no bench\n  second line\n")) == said
    assert errors.one_line(ToolMissing("differ:\n  a\n  b")).endswith("differ: a; b")
    assert "(2000 characters)" in errors.one_line(ToolMissing("x" * 2000)) and "\n" not in errors.one_line(
        ToolMissing("a\n" * 500)
    )


def test_every_pipeline_error_class_has_a_known_code():
    import importlib
    import pkgutil

    import pipeline

    for info in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if info.name.startswith("pipeline.workloads") or info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # a GPU module without its extra: its errors are checked where it is installed
            continue
    seen, todo = [], [errors.PipelineError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    assert len(seen) > 15
    assert all(cls.exit_code in errors.KINDS for cls in seen)


def test_the_lock_names_its_holder_and_a_waiter_gets_it_when_released(tmp_path):
    with (
        nightly.workdir_lock(tmp_path, argv=["first"]),
        pytest.raises(nightly.Locked, match=r'"pid": \d+.*"argv": \["first"\]'),
        nightly.workdir_lock(tmp_path),
    ):
        pass
    held = threading.Event()

    def hold() -> None:
        with nightly.workdir_lock(tmp_path):
            held.set()
            time.sleep(1.0)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    start = time.monotonic()
    with nightly.workdir_lock(tmp_path, wait_s=10):
        assert time.monotonic() - start >= 0.5, "it waited for the holder"
    thread.join()


def test_plain_luigi_tasks_share_the_lock_and_never_run_beside_a_nightly(tmp_path):
    with (
        nightly.workdir_lock(tmp_path, shared=True),
        nightly.workdir_lock(tmp_path, shared=True),
        pytest.raises(nightly.Locked),
        nightly.workdir_lock(tmp_path),
    ):
        pass
    command, env = amd_dag(tmp_path, "r", "", "TuneWorkload", workdir=tmp_path, rounds=None)
    with nightly.workdir_lock(tmp_path, argv=["nightly"]):
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, "README: luigi exits 2 when a task failed"
    assert "failed: Locked (exit 13, busy)" in proc.stderr and '"argv": ["nightly"]' in proc.stderr
    assert not (tmp_path / "r" / "shapes").exists(), "nothing was written beside the nightly"


def test_units_refuse_a_time_that_is_not_one(capsys):
    for bad in ("25:99", "24:00", "7:60", "noon"):
        with pytest.raises(SystemExit) as stop:
            main(["nightly", "--print-units", "--at", bad])
        assert stop.value.code == 2
        assert f"argument --at: '{bad}' is not a time of day HH:MM" in capsys.readouterr().err
    assert nightly.parse_at("3:05") == (3, 5) and nightly.parse_at("23:59") == (23, 59)


def test_units_escape_what_cron_and_systemd_would_expand(tmp_path):
    workdir = tmp_path / "50% off $HOME"
    texts = nightly.units(
        workdir,
        ["--untuned", "a b.csv,/abs/c.csv"],
        "04:07",
        cwd=tmp_path / "here",
        env={"PATH": "/opt/x%y:/usr/bin", "HIPBLASLT_BENCH": "/b", "SECRET_TOKEN": "s"},
    )
    cron = texts["gemm-tune-nightly.cron"].splitlines()[-1]
    assert cron.startswith("7 4 * * * ") and "50\\% off" in cron and "%" not in cron.replace("\\%", "")
    assert f"--untuned '{tmp_path / 'here' / 'a b.csv'},/abs/c.csv'" in cron
    service = texts["gemm-tune-nightly.service"]
    assert "50%% off $$HOME" in service and 'Environment="PATH=/opt/x%%y:/usr/bin"' in service
    assert "SECRET_TOKEN" not in service and "SECRET_TOKEN" not in texts[nightly.ENV_FILE]
    assert "export HIPBLASLT_BENCH=/b" in texts[nightly.ENV_FILE]


def _small_untuned(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "small.csv").write_text("".join(UNTUNED.read_text().splitlines(keepends=True)[:3]))
    return where / "small.csv"


def _print_units(tmp_path: Path, capsys, workdir: str) -> dict[str, str]:
    """Units printed from directory A for a workdir under B, with a relative --untuned."""
    here = tmp_path / "A"
    _small_untuned(here)
    os.chdir(here)
    assert (
        main(
            [
                "nightly",
                "--workdir",
                workdir,
                "--print-units",
                "--at",
                "03:30",
                "--untuned",
                "small.csv",
                "--backend",
                "hipblaslt",
                "--hipblaslt-bench",
                DOUBLE,
                "--validators-from",
                str(TARGET),
                "--validate-rounds",
                "2",
                "--run-name",
                "night",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    return {name: text for name, text in re.findall(r"==> (\S+) <==\n(.*?)(?=\n==> |\Z)", out, re.S)}


def test_the_printed_cron_line_runs_as_printed_from_a_bare_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.chdir(tmp_path)
    units = _print_units(tmp_path, capsys, "../B with space/wd")
    workdir = tmp_path / "B with space" / "wd"
    assert (workdir / nightly.ENV_FILE).exists(), "the environment the line reads is written beside the runs"
    line = units["gemm-tune-nightly.cron"].strip().splitlines()[-1]
    assert line.startswith("30 3 * * * ")
    command = line.split(" ", 5)[5].replace("\\%", "%")  # what cron hands to /bin/sh
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(
        ["sh", "-c", command],
        cwd=home,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "SHELL": "/bin/sh"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    log = (workdir / nightly.LOG).read_text()
    assert "gemm-tune nightly: exit 0" in log and "bundle accepted" in log
    assert (workdir / "night" / "bundle" / "manifest.json").exists()


def test_the_printed_service_runs_as_printed_from_a_bare_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.chdir(tmp_path)
    service = _print_units(tmp_path, capsys, "B/wd")["gemm-tune-nightly.service"]
    fields: dict[str, list[str]] = {}
    for raw in service.splitlines():
        key, eq, value = raw.partition("=")
        if eq and not raw.startswith("#"):
            fields.setdefault(key, []).append(value.replace("%%", "%"))
    assert fields["User"] == [os.environ.get("USER") or __import__("getpass").getuser()]
    env = dict(shlex.split(v)[0].split("=", 1) for v in fields["Environment"])
    argv = shlex.split(fields["ExecStart"][0].replace("$$", "$"))
    assert Path(argv[0]).is_absolute() and Path(fields["WorkingDirectory"][0]) == tmp_path / "A"
    assert fields["Wants"] == fields["After"] == ["network-online.target"]
    log = tmp_path / "A" / "B" / "wd" / "nightly.log"
    assert fields["StandardOutput"] == fields["StandardError"] == [f"append:{log}"]
    with open(fields["StandardOutput"][0].removeprefix("append:"), "a") as journal:  # as systemd opens it
        proc = subprocess.run(
            argv, cwd=fields["WorkingDirectory"][0], env=env, stdout=journal, stderr=journal, timeout=300
        )
    said = log.read_text()
    assert proc.returncode == 0, said[-3000:]
    assert (tmp_path / "A" / "B" / "wd" / "night" / "bundle" / "manifest.json").exists(), "relative to A"
    assert not said.startswith("Loaded") and said.rstrip().splitlines()[-1].startswith("gemm-tune nightly: exit 0")


def _holders_of_gpu_slots(lock_dir: Path) -> dict[str, str]:
    """GPU slot lock file -> the command line of the process holding it (from /proc/locks)."""
    inodes = {p.stat().st_ino: p.name for p in lock_dir.glob("gpu*.lock")}
    held = {}
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "FLOCK" not in fields or fields[1] == "->":  # "N: -> FLOCK ...": a process waiting, not holding
            continue
        pid, inode = fields[4], int(fields[5].rsplit(":", 1)[1])
        if inode in inodes:
            try:
                held[inodes[inode]] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return held


def _marked(mark: str) -> list[str]:
    """Command lines of the processes whose environment carries ``mark``."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark.encode() in environ.read_bytes():
                found.append((environ.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc")
def test_kill_9_of_the_nightly_leaves_no_worker_and_the_rerun_resumes(tmp_path):
    mark = f"GEMM_TUNE_TEST_MARK=kill{os.getpid()}"
    locks = tmp_path / "locks"
    untuned = _small_untuned(tmp_path)
    command = [
        sys.executable,
        "-m",
        "pipeline",
        "nightly",
        "--workdir",
        str(tmp_path / "w"),
        "--untuned",
        str(untuned),
        "--backend",
        "hipblaslt",
        "--hipblaslt-bench",
        DOUBLE,
        "--validators-from",
        str(TARGET),
        "--gpus",
        "2",
        "--validate-rounds",
        "2",
        "--run-name",
        "night",
    ]
    env = {
        **os.environ,
        "GEMM_TUNE_LOCK_DIR": str(locks),
        "HIPBLASLT_DOUBLE_DELAY": "0.4",
        mark.split("=")[0]: mark.split("=")[1],
    }
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, holders = time.monotonic() + 120, {}
    while time.monotonic() < deadline and not holders:
        time.sleep(0.1)
        holders = _holders_of_gpu_slots(locks) if locks.is_dir() else {}
    assert holders, "no worker took a GPU slot"
    assert all(
        "pipeline.stages bench-worker" in cmd or "pipeline.stages validate" in cmd for cmd in holders.values()
    ), f"a slot is held by a process that does not use the GPU: {holders}"
    assert len(_marked(mark)) >= 4, "the run, its Luigi process, workers and tools were running"
    first.send_signal(signal.SIGKILL)
    first.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _marked(mark):
        time.sleep(0.1)
    assert _marked(mark) == [], "processes of the killed run are still there"
    assert _holders_of_gpu_slots(locks) == {}, "a GPU slot outlived the run"
    again = subprocess.run(
        command, env={**env, "HIPBLASLT_DOUBLE_DELAY": "0"}, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "gemm-tune nightly: exit 0" in again.stderr


@pytest.mark.parametrize(
    ("extra", "code", "said"),
    [
        ([], 0, "exit 0 (success)"),
        (["--min-speedup", "5"], 10, "GateRefused"),
        (["--hipblaslt-bench", "/nonexistent/hipblaslt-bench"], 11, "is not an executable file"),
        (["--untuned", str(FIXTURES / "tunableop" / "does-not-exist.csv")], 12, "does-not-exist.csv"),
        (["--no-such-parameter", "1"], 12, "unrecognized arguments: --no-such-parameter"),
        (["--gpus", "-1"], 12, "--gpus '-1'"),
        (["--margin", "abc"], 12, "--margin 'abc'"),
        (["--backend", "nosuch"], 12, "--backend 'nosuch'"),
        (["--validators-from", str(CUDA_TARGET)], 12, "cuda torch's validator block, but the backend tunes for rocm"),
    ],
)
def test_nightly_exit_codes_against_the_bench_double(extra, code, said, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    params = [
        "--untuned",
        str(_small_untuned(tmp_path)),
        "--backend",
        "hipblaslt",
        "--hipblaslt-bench",
        DOUBLE,
        "--validators-from",
        str(TARGET),
        "--run-name",
        "night",
        "--validate-rounds",
        "2",
    ]
    assert main(["nightly", "--workdir", str(tmp_path / "w"), *params, *extra]) == code
    out = capsys.readouterr()
    assert said in out.out + out.err
    if code == 12 and "--untuned" not in extra:
        assert not (tmp_path / "w" / "night").exists(), "refused before any work"


def test_an_amd_run_without_a_target_runtime_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from pipeline.formats.torch_build import torch_build

    if (torch_build() or {}).get("hip"):
        pytest.skip("this machine has a ROCm torch, which gives the validator block")
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    params = [
        "--untuned",
        str(_small_untuned(tmp_path)),
        "--backend",
        "hipblaslt",
        "--hipblaslt-bench",
        DOUBLE,
        "--run-name",
        "night",
    ]
    assert main(["nightly", "--workdir", str(tmp_path / "w"), *params]) == 12
    out = capsys.readouterr().err
    assert "ValidatorMismatch" in out and "--validators-from FILE" in out
    assert not (tmp_path / "w" / "night" / "shapes").exists(), "refused before gathering, tuning or merging"


def test_an_empty_untuned_file_is_no_gemms_not_a_crash(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "empty.csv").write_text("")
    params = [
        "--untuned",
        str(tmp_path / "empty.csv"),
        "--backend",
        "hipblaslt",
        "--hipblaslt-bench",
        DOUBLE,
        "--validators-from",
        str(TARGET),
        "--run-name",
        "night",
    ]
    assert main(["nightly", "--workdir", str(tmp_path / "w"), *params]) == 12
    assert "no GEMMs in" in capsys.readouterr().err


def test_a_workdir_that_cannot_be_created_is_bad_input(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(["nightly", "--workdir", str(tmp_path / "file" / "w"), "--untuned", str(UNTUNED)]) == 12
    assert "cannot be created or written" in capsys.readouterr().err


def test_nightly_package_ships_the_run_into_the_workdir(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.chdir(tmp_path)
    params = [
        "--untuned",
        str(_small_untuned(tmp_path)),
        "--backend",
        "hipblaslt",
        "--hipblaslt-bench",
        DOUBLE,
        "--validators-from",
        str(TARGET),
        "--run-name",
        "night",
        "--validate-rounds",
        "2",
    ]
    assert main(["nightly", "--package", "--workdir", "w", *params]) == 0
    (package,) = (tmp_path / "w" / "dist").iterdir()
    assert (package / "manifest.json").exists() and (package / "env.sh").exists()
    assert not (tmp_path / "dist").exists(), "the package lands under the workdir, wherever the run started"
    assert "# Serves torch 2.11.0 (rocm)" in (package / "Dockerfile").read_text()
    summary = json.loads((tmp_path / "w" / "night" / "report" / "summary.json").read_text())
    assert {"GatherShapes", "Bench", "MergeResults", "Validate", "validate-gemms"} <= set(summary["stage_seconds"])
    said = capfd.readouterr()  # Luigi runs in a child process that shares this one's stdout and stderr
    assert re.search(r"stage times: .*Bench \d+\.\d s.*; total \d+\.\d s", said.out)
    assert re.search(r"gemm-tune nightly: exit 0 \(success\) after \d+\.\d s", said.err.splitlines()[-1])


def test_a_second_run_on_a_held_workdir_exits_13(tmp_path, capsys):
    with nightly.workdir_lock(tmp_path / "w"):
        assert main(["nightly", "--workdir", str(tmp_path / "w"), "--untuned", str(UNTUNED)]) == 13
    assert "is in use by another run" in capsys.readouterr().err


def test_the_help_is_plain_and_lists_what_nightly_passes_on(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["nightly", "--help"])
    out = capsys.readouterr().out
    assert "--backend" in out and "--validators-from" in out and "--dist" in out
    assert max(len(line) for line in out.splitlines()) <= 100 and "(no description)" not in out
    assert "choices: cublaslt, find_exact, hipblaslt, tensile, tunableop; default: cublaslt" in " ".join(out.split())
    assert "upstream merge.py's rule" in " ".join(out.split()) and "Choices: {" not in out
    with pytest.raises(SystemExit):
        main(["merge-logic", "--help"])
    assert "BASE_DIR NEW_DIR OUT_DIR" in capsys.readouterr().out


def test_a_secret_goes_into_files_only_its_owner_reads_and_is_never_printed(tmp_path, capsys, monkeypatch):
    """HF_TOKEN (and any *KEY*, *SECRET*, *PASSWORD*, *CREDENTIAL* variable the run carries) is written to the
    cron line's env file and to systemd's EnvironmentFile, both 0600; the printed units name it, never its value."""
    from pipeline.stages.ship import nightly

    monkeypatch.setenv("HF_TOKEN", "hf_not_for_the_logs")
    monkeypatch.setenv("CUDA_MODULE_LOADING", "LAZY")  # carried, not a secret
    units = _print_units(tmp_path, capsys, "B/wd")
    printed = "".join(units.values())
    assert "hf_not_for_the_logs" not in printed
    service = units["gemm-tune-nightly.service"]
    workdir = tmp_path / "A" / "B" / "wd"
    assert f"EnvironmentFile={workdir / nightly.SECRETS_FILE}" in service and "# HF_TOKEN: secrets" in service
    assert 'Environment="CUDA_MODULE_LOADING=LAZY"' in service and "HF_TOKEN=" not in service
    for name in (nightly.ENV_FILE, nightly.SECRETS_FILE):
        assert (workdir / name).stat().st_mode & 0o777 == 0o600, name
    assert "export HF_TOKEN=hf_not_for_the_logs" in (workdir / nightly.ENV_FILE).read_text()
    assert (workdir / nightly.SECRETS_FILE).read_text() == 'HF_TOKEN="hf_not_for_the_logs"\n'
    assert nightly.secret("WANDB_API_KEY") and nightly.secret("hf_token") and not nightly.secret("CUDA_HOME")


def test_a_nightly_beside_a_plain_luigi_run_names_that_run(tmp_path):
    """A plain ``luigi`` run holds the workdir's lock shared (it writes no holder there) and its run's lock; the
    nightly refused beside it names that run and its process, not an unknown holder (#65)."""
    import subprocess
    import sys

    from pipeline.stages.ship import nightly

    workdir = tmp_path / "w"
    hold = (
        "import time; from pathlib import Path; from pipeline.stages.ship import nightly\n"
        f"locks = nightly.RunLocks(); locks.hold(Path({str(workdir / 'night')!r}), ['luigi', 'TuneWorkload'])\n"
        f"with nightly.workdir_lock(Path({str(workdir)!r}), shared=True):\n"
        "    print('held', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(nightly.Locked) as refused, nightly.workdir_lock(workdir):
            pass
    finally:
        holder.kill()
        holder.wait()  # its locks go with it
    said = str(refused.value)
    assert "unknown holder" not in said and "run night:" in said and f'"pid": {holder.pid}' in said
    with nightly.workdir_lock(workdir):  # once it is gone, the workdir is free
        assert nightly.held_runs(workdir) == []

"""The nightly entry point: exit codes a scheduler can act on, the workdir lock, the units it prints."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.backends.base import ToolMissing
from pipeline.cli import main
from pipeline.formats.tunableop import TunableOpFormatError
from pipeline.stages import nightly
from pipeline.stages.fingerprint import ProbeFailed
from pipeline.stages.gate import GateRefused

from .conftest import FIXTURES
from .test_amd_dag import DOUBLE, TARGET, UNTUNED


def test_exit_codes_by_what_failed():
    assert nightly.exit_code([]) == 0
    assert nightly.exit_code([GateRefused("x")]) == 10
    assert nightly.exit_code([ToolMissing("x"), GateRefused("y")]) == 10, "a refusal outranks the rest"
    assert nightly.exit_code([ToolMissing("x")]) == 11
    assert nightly.exit_code([ProbeFailed("the stack probe failed")]) == 11, "the probe is a tool"
    assert nightly.exit_code([TunableOpFormatError("f:1: x")]) == 12
    assert nightly.exit_code([KeyError("x")]) == 1


def test_the_lock_names_its_holder_and_a_waiter_gets_it_when_released(tmp_path):
    with (nightly.workdir_lock(tmp_path, argv=["first"]),
          pytest.raises(nightly.Locked, match=r'"pid": \d+.*"argv": \["first"\]'),
          nightly.workdir_lock(tmp_path)):
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


def test_print_units(tmp_path, capsys):
    assert main(["nightly", "--print-units", "--workdir", str(tmp_path / "w"), "--at", "03:30",
                 "--backend", "hipblaslt"]) == 0
    out = capsys.readouterr().out
    assert f"30 3 * * * cd {tmp_path} && " in out and f"--workdir {tmp_path / 'w'} --backend hipblaslt" in out
    assert "OnCalendar=*-*-* 03:30:00" in out and "ExecStart=" in out and "[Install]" in out


@pytest.mark.parametrize(("extra", "code"), [
    ([], 0),
    (["--min-speedup", "5"], 10),
    (["--hipblaslt-bench", "/nonexistent/hipblaslt-bench"], 11),
    (["--untuned", str(FIXTURES / "tunableop" / "does-not-exist.csv")], 12),
    (["--no-such-parameter", "1"], 12),
])
def test_nightly_exit_codes_against_the_bench_double(extra, code, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    params = ["--untuned", str(UNTUNED), "--backend", "hipblaslt", "--hipblaslt-bench", DOUBLE,
              "--validators-from", str(TARGET), "--run-name", "night"]
    assert main(["nightly", "--workdir", str(tmp_path / "w"), *params, *extra]) == code
    assert f"gemm-tune nightly: exit {code}" in capsys.readouterr().out


def test_nightly_package_ships_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path / "locks"))
    params = ["--untuned", str(UNTUNED), "--backend", "hipblaslt", "--hipblaslt-bench", DOUBLE,
              "--validators-from", str(TARGET), "--run-name", "night", "--dist", str(tmp_path / "dist")]
    assert main(["nightly", "--package", "--workdir", str(tmp_path / "w"), *params]) == 0
    (package,) = (tmp_path / "dist").iterdir()
    assert (package / "manifest.json").exists() and (package / "env.sh").exists()
    assert main(["nightly", "--print-units", "--package", "--workdir", str(tmp_path / "w"), *params]) == 0
    assert f"nightly --workdir {tmp_path / 'w'} --package --untuned" in capsys.readouterr().out


def test_a_second_run_on_a_held_workdir_exits_13(tmp_path, capsys):
    with nightly.workdir_lock(tmp_path / "w"):
        assert main(["nightly", "--workdir", str(tmp_path / "w"), "--untuned", str(UNTUNED)]) == 13
    assert "is in use by another run" in capsys.readouterr().err

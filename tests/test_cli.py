from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pipeline.cli import main

from .conftest import FIXTURES


def test_shapes_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "shapes.json"
    assert main(["shapes", str(FIXTURES / "tunableop" / "torch2.11_cuda_untuned0.csv"), "--json", str(out)]) == 0
    assert "4 distinct GEMMs from 4 lines in 1 files" in capsys.readouterr().out
    assert next(row["params_signature"] for row in json.loads(out.read_text())).startswith("tn_4096_64_11008")


def test_shapes_strict_error_exit_code(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("GemmTunableOp_Half_TN,tn_8_8_8\nGemmTunableOp_Half_TN,tn_8_8_8,Default,slow\n")
    assert main(["shapes", str(bad)]) == 2
    assert f"gemm-tune shapes: error: {bad}:2: time 'slow' is not a number" in capsys.readouterr().err
    assert main(["shapes", str(bad), "--lenient"]) == 0
    assert "1 malformed lines skipped" in capsys.readouterr().out


def test_shapes_missing_input(tmp_path, capsys):
    assert main(["shapes", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("gemm-tune") is None, reason="console script not installed (pip install -e .)")
def test_console_script_is_installed():
    proc = subprocess.run(["gemm-tune", "shapes", str(FIXTURES / "tunableop")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "distinct GEMMs" in proc.stdout

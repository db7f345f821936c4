from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pipeline.cli import main

from .helpers import FIXTURES


def test_shapes_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "shapes.json"
    assert main(["shapes", str(FIXTURES / "tunableop" / "torch2.11_cuda_untuned0.csv"), "--json", str(out)]) == 0
    assert "4 distinct GEMMs from 4 lines in 1 files" in capsys.readouterr().out
    assert next(row["params_signature"] for row in json.loads(out.read_text())).startswith("tn_4096_64_11008")


def test_shapes_strict_error_exit_code(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("GemmTunableOp_Half_TN,tn_8_8_8\nGemmTunableOp_Half_TN,tn_8_8_8,Default,slow\n")
    assert main(["shapes", str(bad)]) == 12, "bad input"
    assert (
        f"gemm-tune shapes: TunableOpFormatError (exit 12, bad input): {bad}:2: time 'slow' is not a number"
        in capsys.readouterr().err
    )
    assert main(["shapes", str(bad), "--lenient"]) == 0
    assert "1 malformed lines skipped" in capsys.readouterr().out


def test_shapes_missing_input(tmp_path, capsys):
    assert main(["shapes", str(tmp_path / "nope")]) == 12
    assert "no such file or directory" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("gemm-tune") is None, reason="console script not installed (pip install -e .)")
def test_console_script_is_installed():
    proc = subprocess.run(["gemm-tune", "shapes", str(FIXTURES / "tunableop")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "distinct GEMMs" in proc.stdout


def test_shapes_with_the_collections_counts_and_times(tmp_path, capsys):
    untuned = FIXTURES / "tunableop" / "torch2.11_hf_gpt2_untuned0.csv"
    calls = FIXTURES / "hf_calls" / "torch2.11_hf_gpt2_calls.json"
    counted = json.loads(calls.read_text())["calls"]
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"per_call_us": dict.fromkeys(counted, 10.0)}))
    out = tmp_path / "shapes.json"
    args = ["shapes", str(untuned), "--calls", str(calls), "--baseline", str(baseline), "--json", str(out)]
    assert main([*args, "--m-grid", "exact"]) == 0  # the counts the files show, no grid around them
    rows = json.loads(out.read_text())
    total = sum(counted.values())
    assert {f"{r['op_signature']},{r['params_signature']}": r["calls"] for r in rows} == counted
    assert all(r["time_share"] == pytest.approx(r["calls"] / total) for r in rows)
    assert main(["shapes", str(untuned)]) == 0
    said = capsys.readouterr().out
    assert "note: call counts unknown" in said
    assert "m-grid auto: serving, " in said and "weights ran at more than one token count" in said  # GPT-2's prefill
    assert main([*args, "--force"]) == 0, "the default, auto: the serving grid where a weight ran at several counts"
    grid = json.loads(out.read_text())
    assert len(grid) > len(rows) and all(
        r["calls"] == counted.get(f"{r['op_signature']},{r['params_signature']}", 0) for r in grid
    )

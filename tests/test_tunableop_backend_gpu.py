"""The tunableop backend for real (run on the device machine: pytest -m gpu)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from pipeline.formats.tunableop import read_file

from .helpers import FIXTURES, ROOT, luigi_argv, nvmath_gpu_marks

pytestmark = nvmath_gpu_marks("validating TunableOp's picks (cuBLASLt solutions, run through nvmath-python)")


@pytest.mark.long
@pytest.mark.gpu_untimed  # asserts what TunableOp chose and what the DAG wrote, no timing: shares the GPU
def test_tune_workload_with_tunableop_offline_tuning(tmp_path):
    import torch

    untuned = FIXTURES / "tunableop" / "torch2.11_hf_gpt2_untuned0.csv"
    proc = subprocess.run(
        luigi_argv(
            "TuneWorkload",
            workdir=str(tmp_path),
            run_name="gpu",
            untuned=str(untuned),
            backend="tunableop",
            m_grid="exact",  # the file's 10 GEMMs as they ran: auto would add the serving grid of GPT-2's weights
            tunableop_iterations="20",
            gpus="1",
            validate_rounds="1",  # what is tested is TunableOp tuning, not the validation
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks")},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = tmp_path / "gpu"
    summary = json.loads((run / "bench" / "summary.json").read_text())
    assert summary["problems"] == summary["tuned"] == 10 and not summary["errors"]
    runtime = summary["runtime"]
    assert runtime["backend"] == "tunableop" and runtime["tunableop_settings"]["iterations"] == 20
    assert runtime["validators"]["PT_VERSION"] == torch.__version__.split("+")[0]
    results = [json.loads(p.read_text()) for p in (run / "bench" / "problems").glob("*.json")]
    assert all(r["default_us"] > 0 and r["candidates"][0]["name"] for r in results)
    merged = read_file(run / "merge" / "tunableop_results.csv")
    assert merged.validators == runtime["validators"] and len(merged.entries) == 10
    report = json.loads((run / "report" / "summary.json").read_text())
    chosen = sorted({r["candidates"][0]["name"] for r in results})
    if torch.version.hip is None and tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 14):
        assert chosen == ["Default"] and all(e.solution == "Default" for e in merged.entries)
        assert any("--backend cublaslt" in note for note in report["notes"])
    else:
        assert any(name != "Default" for name in chosen)
    print(f"\ntunableop: TunableOp chose {chosen}; {report['verdict']}")

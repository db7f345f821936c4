"""GPU tests of the stack fingerprint, re-timing and the package (run on the device machine: pytest -m gpu)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.backends.base import DEFAULT, TuneSettings, WinnerRecord
from pipeline.formats.solution_names import unknown_solution
from pipeline.formats.tunableop import TunableOpEntry, parse_key, write_file
from pipeline.stages.run.fingerprint import Stack, probe_here
from pipeline.stages.ship.package import write_package

pytestmark = pytest.mark.gpu
CUBLASLT = "Gemm_Cublaslt_id_21_tile_18_stages_21_splitk_1_red_0_swizzle_0_custom_0"
KEYS = [
    ("GemmTunableOp_BFloat16_TN", "tn_4096_8_4096_ld_4096_4096_4096"),  # F.linear(x[8,4096], W[4096,4096])
    ("GemmTunableOp_BFloat16_TN", "tn_11008_16_4096_ld_4096_4096_11008"),
]
RUN = """
import json, os, sys, torch
import torch.nn.functional as F
out, read = {}, None
if torch.cuda.tunable.is_enabled():  # the file the package names, read explicitly as well (it must validate)
    read = torch.cuda.tunable.read_file(os.environ["PYTORCH_TUNABLEOP_FILENAME"].replace("%d", "0"))
for n, t, k in ((4096, 8, 4096), (11008, 16, 4096)):
    x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    y = F.linear(x, w)
    torch.cuda.synchronize()
    enabled = torch.cuda.tunable.is_enabled()
    torch.cuda.tunable.enable(False)
    out[f"{n}x{t}x{k}"] = bool(torch.equal(y, F.linear(x, w)))
    torch.cuda.tunable.enable(enabled)
results = torch.cuda.tunable.get_results() if torch.cuda.tunable.is_enabled() else []
print(json.dumps({"equal": out, "enabled": torch.cuda.tunable.is_enabled(), "read_file": read,
                  "results": [list(map(str, r[:3])) for r in results]}))
"""


def _torch():
    import torch

    return torch


@pytest.mark.gpu_untimed
def test_the_probe_names_this_cuda_stack():
    facts = probe_here()
    torch = _torch()
    assert facts["platform"] == ("rocm" if torch.version.hip else "cuda")
    assert (
        facts["torch"] == torch.__version__
        and facts["sm_count"] == torch.cuda.get_device_properties(0).multi_processor_count
    )
    if facts["platform"] == "cuda":
        assert facts["arch"].startswith("sm") and facts["cublaslt"] > 100000 and facts["driver"].startswith("nvidia")


def _bundle(run: Path, solutions: list[str]) -> Path:
    version = _torch().__version__.split("+")[0]
    entries = [TunableOpEntry.from_problem(parse_key(*key), s, 0.01) for key, s in zip(KEYS, solutions, strict=True)]
    (run / "bundle" / "logic").mkdir(parents=True)
    write_file(run / "bundle" / "tunableop_results.csv", {"PT_VERSION": version}, entries)
    (run / "bundle" / "manifest.json").write_text(json.dumps({"rows": len(entries)}))
    return run


def _run_with(env_sh: Path | None, csv: Path | None, tmp_path: Path) -> subprocess.CompletedProcess:
    """The GEMMs in a fresh process: under the package's env.sh, or with a raw results file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_TUNABLEOP")}
    script = tmp_path / "run.py"
    script.write_text(RUN)
    if env_sh is not None:
        env["GEMM_TUNE_PACKAGE"] = str(env_sh.parent)
        command = ["sh", "-c", f'. "{env_sh}"; exec "{sys.executable}" "{script}"']
    else:
        env.update(
            PYTORCH_TUNABLEOP_ENABLED="1",
            PYTORCH_TUNABLEOP_TUNING="0",
            PYTORCH_TUNABLEOP_FILENAME=str(csv).replace("0.csv", "%d.csv"),
        )
        command = [sys.executable, str(script)]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.gpu_untimed
def test_the_packaged_results_load_into_this_torch_and_run_its_gemms(tmp_path):
    torch = _torch()
    version = torch.__version__.split("+")[0]
    platform = "rocm" if torch.version.hip else "cuda"
    run = _bundle(tmp_path / "run", [DEFAULT, CUBLASLT])
    stack = Stack("test-stack", {"platform": platform, "torch": torch.__version__}, {})
    manifest = write_package(run, tmp_path / "dist", stack, devices=torch.cuda.device_count())
    served = [s for s in (DEFAULT, CUBLASLT) if unknown_solution(s, platform, version) is None]
    assert manifest["serves"]["tunableop_rows"] == len(served) and manifest["serves"]["torch"] == version
    proc = _run_with(tmp_path / "dist" / "test-stack" / "env.sh", None, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["enabled"] and result["read_file"] is True and all(result["equal"].values()), result
    loaded = {(op, params): solution for op, params, solution in result["results"]}
    assert loaded[KEYS[0]] == DEFAULT, "torch did not load the packaged file"
    assert (loaded.get(KEYS[1]) == CUBLASLT) == (CUBLASLT in served)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.gpu_untimed
def test_the_unfiltered_file_is_what_a_torch_before_2_14_cannot_take(tmp_path):
    """Why the package filters: on CUDA torch <= 2.13 a row naming a cuBLASLt solution fails at dispatch
    (docs/tunableop.md section 2, "Reading"); on 2.14+ it loads."""
    torch = _torch()
    version = torch.__version__.split("+")[0]
    if torch.version.hip:
        pytest.skip("cuBLASLt names are a CUDA matter")
    run = _bundle(tmp_path / "run", [DEFAULT, CUBLASLT])
    raw = tmp_path / "raw"
    raw.mkdir()
    for ordinal in range(torch.cuda.device_count()):
        (raw / f"tunableop_results{ordinal}.csv").write_text((run / "bundle" / "tunableop_results.csv").read_text())
    proc = _run_with(None, raw / "tunableop_results0.csv", tmp_path)
    if unknown_solution(CUBLASLT, "cuda", version):
        assert proc.returncode != 0, f"torch {version} took an unknown solution: {proc.stdout[-500:]}"
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.skipif(importlib.util.find_spec("nvmath") is None, reason="nvmath-python is not installed")
def test_a_saved_cublaslt_winner_is_retimed_against_the_default():
    from pipeline.backends.cublaslt import CublasLtBackend
    from pipeline.problem import GemmProblem

    backend = CublasLtBackend(0)
    problem = GemmProblem("gemm", "T", "N", 6144, 8, 4096, 4096, 4096, 6144)
    settings = TuneSettings(time_budget_s=3.0, heuristic_count=32, enumerate_budget=24, margin=-1.0)
    tuned = backend.tune_one(problem, settings)  # margin -1: the fastest finalist wins, whatever it is
    assert tuned.has_winner
    again = backend.retime(tuned, TuneSettings(margin=-1.0))
    assert again.winner == tuned.winner and again.default_us > 0 and again.candidates[0].final_us > 0
    assert again.winner_us != again.candidates[0].verdict_us, "reported from a reading other than the one that kept it"
    assert len(again.candidates[0].report_windows) == 6, "the reported reading, window by window"
    alone = backend.retime(tuned, TuneSettings(margin=-1.0), report=False)  # a bucket's edge count: one reading
    assert alone.winner == tuned.winner and alone.winner_us == alone.candidates[0].verdict_us
    strict = backend.retime(tuned, TuneSettings(margin=10.0))  # no winner is 11x faster: it is not kept
    assert strict.winner == DEFAULT and strict.winner_us == strict.default_us
    assert 0 < strict.candidates[0].verdict_speedup < 11, "the figure that refused it is kept"
    broken = WinnerRecord({**tuned.record.solution, "AlgoBytes": None, "AlgoId": 10**6})
    with pytest.raises(Exception):  # noqa: B017 (cuBLASLt's own error type)
        backend.retime(type(tuned)(problem, winner=tuned.winner, record=broken), settings)


def test_alternations_side_by_side_show_each_run_one_real_gpu(tmp_path):
    """``--e2e-parallel`` on real GPUs: each run of a round sees one device, a different board in each lane (its
    UUID as torch reads it), and the pairs come back in lane order."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("side by side needs two GPUs; this machine shows one")
    from pipeline.stages.validate.e2e import ab_test

    seen = tmp_path / "uuids.txt"
    script = tmp_path / "workload.py"
    script.write_text(
        "import torch\n"
        "assert torch.cuda.device_count() == 1, torch.cuda.device_count()\n"
        f"open({str(seen)!r}, 'a').write(str(torch.cuda.get_device_properties(0).uuid) + '\\n')\n"
        "x = torch.randn(1024, 1024, device='cuda'); torch.cuda.synchronize()\n"
        "print('throughput: 100.0 tokens/s')\n"
    )
    csv = tmp_path / "bundle.csv"
    csv.write_text("Validator,PT_VERSION,2.11.0\n")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = ab_test(
        [sys.executable, str(script)], csv, tmp_path / "s", reps=2, timeout_s=300, env=env, parallel_gpus=[0, 1]
    )
    assert out["reps"] == 2 and out["parallel_gpus"] == [0, 1] and out["tokens_speedup"] == pytest.approx(1.0)
    assert [r["gpu"] for r in out["runs"]["tuned"]] == [0, 1] and sorted(out["by_gpu"]) == ["0", "1"]
    uuids = seen.read_text().split()
    assert len(uuids) == 4 and len(set(uuids)) == 2, "each lane on a board of its own"

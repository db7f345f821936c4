"""Real models: HuggingFace ``transformers`` models built from config (random weights, no download) under
record mode. Whatever torch writes must parse strictly and round-trip; calls and baseline times must be
learnt for them. Run on the device machine (pytest -m gpu); ``GEMM_TUNE_SAVE_FIXTURES=DIR`` also copies
the recorded files there, which is how ``tests/fixtures/tunableop/torch*_hf_*.csv`` were made."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from pipeline.formats.tunableop import format_file, read_file
from pipeline.procs import with_package_on_path
from pipeline.stages.gather.collect import collect
from pipeline.stages.gather.shapes import apply_weights, gather

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_untimed]  # records, times nothing it asserts on
ARCHS = ["llama", "mistral", "gpt2", "bert", "mixtral", "t5"]
TIMED = "gpt2"  # also timed at baseline: its GEMMs' time shares


def _record(arch: str, out: Path, **kw):
    pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    command = [sys.executable, "-m", "pipeline.workloads.hf", "--arch", arch, "--reps", "1"]
    return collect(out, command, env=with_package_on_path(os.environ), timeout_s=900, **kw)


@pytest.mark.long
@pytest.mark.parametrize(
    "arch", [pytest.param(arch, marks=pytest.mark.xdist_group(f"hf-{arch}")) for arch in ARCHS]
)  # one process each, side by side
def test_recorded_lines_parse_strictly_and_round_trip(arch, tmp_path):
    import torch

    result = _record(arch, tmp_path / "collect", **({"time_on": [0]} if arch == TIMED else {}))
    keys = set()
    for path in result.files:
        parsed = read_file(path)  # strict: any line torch wrote must parse
        assert parsed.entries, f"{arch} recorded no GEMM"
        assert format_file(parsed.validators, parsed.entries).encode() == path.read_bytes()
        keys |= {f"{e.op_signature},{e.params_signature}" for e in parsed.entries}
    calls = json.loads((tmp_path / "collect" / "calls.json").read_text())
    assert set(calls["calls"]) == keys, "every recorded GEMM was counted by the lookup log, and nothing else"
    assert calls["total"] > len(keys), "a prefill and decode steps call GEMMs more than once"
    save = os.environ.get("GEMM_TUNE_SAVE_FIXTURES")
    if save:
        version = torch.__version__.split("+")[0].rsplit(".", 1)[0]
        for path in result.files:
            shutil.copyfile(path, Path(save) / f"torch{version}_hf_{arch}_{path.name}")
        shutil.copyfile(tmp_path / "collect" / "calls.json", Path(save) / f"torch{version}_hf_{arch}_calls.json")
    print(f"\n{arch}: {len(keys)} GEMMs, {calls['total']} calls, {result.seconds:.1f} s")
    if arch == TIMED:
        _assert_time_shares(tmp_path, result)


def _assert_time_shares(tmp_path: Path, result) -> None:
    """The time shares of a real model (its one recording also timed at baseline: a model's recording costs a
    process and a transformers import, so the timed model is one of the parametrized ones)."""
    baseline = json.loads((tmp_path / "collect" / "baseline.json").read_text())
    assert baseline["per_call_us"] and all(us > 0 for us in baseline["per_call_us"].values())
    gathered = gather([str(f) for f in result.files])
    apply_weights(gathered, json.loads((tmp_path / "collect" / "calls.json").read_text()), baseline)
    shares = [r.time_share for r in gathered.shapes]
    assert all(s is not None and s > 0 for s in shares) and sum(shares) == pytest.approx(1.0)
    top = max(gathered.shapes, key=lambda r: r.time_share)
    print(
        f"\ngpt2: top GEMM {top.key}: {100 * top.time_share:.1f}% of GEMM time, {top.calls} calls, "
        f"{top.per_call_us:.1f} us per call"
    )

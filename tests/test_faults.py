"""Faults: the DAG killed with SIGKILL at 20 random moments across its stages and rerun each time loses and
duplicates nothing, never shows a partial file, and ends byte-identical to an uninterrupted run."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pipeline.formats.tunableop import read_file

from .helpers import UNTUNED, amd_dag, first_gemms

KILLS = 20
GEMMS = 6  # of the HF Llama file's 12 (the ld twins among them): stages of a second or two
ARTIFACTS = (
    "shapes/shapes.json",
    "bench/tunableop_results.csv",
    "bench/hipblaslt_override.txt",
    "bench/logic",
    "merge/tunableop_results.csv",
    "merge/records",
    "validate/gate.json",
    "bundle/tunableop_results.csv",
    "bundle/hipblaslt_override.txt",
    "bundle/records",
)
# where the 20 kills aim, in DAG order: each waits until that stage writes, then strikes a random moment later
PLAN = (
    "shapes",
    "configs",
    "bench",
    "bench",
    "bench",
    "bench",
    "bench",
    "merge",
    "merge",
    "validate",
    "validate",
    "validate",
    "validate",
    "validate",
    "bundle",
    "report",
    "report",
    "report",
    "tune-workload.txt",
    "tune-workload.txt",
)


def _start(tmp_path: Path, workdir: Path) -> subprocess.Popen:
    untuned = first_gemms(tmp_path, UNTUNED, GEMMS)
    command, env = amd_dag(
        tmp_path, "night", "", "TuneWorkload", "--gpus", "2", workdir=workdir, rounds=1, untuned=untuned
    )
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _visible_files(run: Path) -> list[Path]:
    """Files a reader would take as outputs: no hidden temporaries, nothing in a ``.partial`` staging dir."""
    return [
        p
        for p in run.rglob("*")
        if p.is_file()
        and not p.name.startswith(".")
        and not any(part.endswith(".partial") for part in p.relative_to(run).parts)
    ]


def _assert_no_partial_file(run: Path) -> None:
    for path in _visible_files(run):
        text = path.read_text(errors="replace")
        if path.suffix == ".json":
            json.loads(text)
        elif path.suffix == ".yaml":
            yaml.safe_load(text)
        elif path.suffix == ".csv":
            read_file(path)


SLOW = ("bench", "validate", "report")  # stages of seconds; the others take milliseconds
ORDER = ("shapes", "configs", "bench", "merge", "validate", "bundle", "report", "tune-workload.txt")


def _wait_for_write(proc: subprocess.Popen, run: Path, target: str, since: float, timeout_s: float = 120.0) -> None:
    """Until the ``target`` stage, or one after it (a resumed run skips what is done), writes after ``since``,
    or the run ends."""
    paths = [run / name for name in ORDER[ORDER.index(target) :]]
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        for path in paths:
            try:
                if any(p.stat().st_mtime >= since for p in [path, *(path.rglob("*") if path.is_dir() else [])]):
                    return
            except OSError:
                continue
        time.sleep(0.01)


def _stage_in_progress(run: Path, since: float) -> str:
    """The stage whose directory changed last before the kill (what the kill interrupted); what every stage writes
    besides its own directory (timings, made_from records, the lock) names no stage."""
    touched = [
        (p.stat().st_mtime, p.relative_to(run).parts[0].split(".")[0])
        for p in run.rglob("*")
        if p.exists() and p.stat().st_mtime >= since
    ]
    touched = [(when, name) for when, name in touched if name in ORDER]
    return max(touched)[1] if touched else "start"


@pytest.mark.long
def test_sigkill_at_twenty_random_moments_then_rerun_is_byte_identical(tmp_path):
    reference = _start(tmp_path, tmp_path / "ref")
    start = time.monotonic()
    assert reference.wait(timeout=600) == 0, reference.stderr.read()[-3000:]
    uninterrupted = time.monotonic() - start

    rng, run, hit = random.Random(20261122), tmp_path / "faulted" / "night", []
    assert len(PLAN) == KILLS
    for target in PLAN:
        proc, begun = _start(tmp_path, tmp_path / "faulted"), time.time()
        _wait_for_write(proc, run, target, begun)
        time.sleep(rng.uniform(0.0, 0.4 if target in SLOW else 0.005))
        with contextlib.suppress(ProcessLookupError):  # (the run may have finished already)
            os.killpg(proc.pid, signal.SIGKILL)  # the luigi process and every worker it started
        proc.wait()
        if run.exists():
            hit.append(_stage_in_progress(run, begun))
            _assert_no_partial_file(run)
    final = _start(tmp_path, tmp_path / "faulted")
    assert final.wait(timeout=600) == 0, final.stderr.read()[-3000:]
    print(f"uninterrupted {uninterrupted:.1f} s; kills landed in: {hit}")
    assert len(set(hit) & {"shapes", "configs", "bench", "merge", "validate", "bundle", "report"}) >= 3, (
        f"the kills did not spread across the stages: {hit}"
    )

    ref = tmp_path / "ref" / "night"
    _assert_no_partial_file(run)
    for name in ARTIFACTS:
        a, b = ref / name, run / name
        files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file()) if a.is_dir() else [Path()]
        assert files and files == (
            sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) if a.is_dir() else [Path()]
        ), name
        for rel in files:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), f"{name}/{rel} differs"

    def figures(path: Path) -> list[str]:  # the printed lines but the wall times, which differ by nature
        return [line for line in path.read_text().splitlines() if not line.startswith("stage times: ")]

    lines = [
        line.replace(str(tmp_path / "ref"), str(tmp_path / "faulted")) for line in figures(ref / "tune-workload.txt")
    ]
    assert figures(run / "tune-workload.txt") == lines, "the printed figures differ (paths and times aside)"
    results = json.loads((run / "bench" / "results.json").read_text())
    keys = [json.dumps(r["problem"], sort_keys=True) for r in results]
    assert len(keys) == len(set(keys)) == len(json.loads((ref / "bench" / "results.json").read_text()))
    merged = read_file(run / "merge" / "tunableop_results.csv").entries
    assert len({(e.op_signature, e.params_signature) for e in merged}) == len(merged)

"""bench/gather_bench.py on a small file: the record it writes and the committed one's figures against its
targets (docs/tuning.md cites them)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from .helpers import ROOT

SCRIPT = ROOT / "bench" / "gather_bench.py"


def test_a_small_run_records_every_fresh_process_and_their_medians(tmp_path):
    out = tmp_path / "gather.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--lines", "3000", "--distinct", "40", "--repeats", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # the installed package, not the checkout's directory
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["lines"] == 3000 and record["distinct"] == 40 and len(record["runs"]) == 2
    assert all(r["lines"] == 3000 and r["distinct"] == 40 for r in record["runs"])
    assert record["seconds_median"] == statistics.median(r["seconds"] for r in record["runs"])
    assert json.loads(done.stdout) == record


def test_a_directory_for_the_record_is_refused_before_measuring(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--lines", "3000", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 12 and "is a directory" in done.stderr


def test_the_committed_record_meets_its_targets():
    record = json.loads((ROOT / "bench" / "results" / "gather_cpu_2026-11-22.json").read_text())
    assert record["lines"] == 1_000_000 and record["distinct"] == 2000
    assert record["seconds_median"] <= record["targets"]["seconds"]
    assert record["max_rss_mb_median"] < record["targets"]["memory_mb"]

"""The workdir's history (stages/validate/history.py): three nights of the CPU DAG on the hipblaslt-bench double,
the third under another hipBLASLt build (another fingerprint), read back by ``gemm-tune history`` and the report;
a run redone under its name replaces its rows; a killed append and a corrupt or newer history."""

from __future__ import annotations

import io
import json
import math

import pandas as pd
import pytest

from pipeline.cli import main
from pipeline.stages.validate import history

from .helpers import UNTUNED, first_gemms, run_amd_dag

FAST = ("--validate-rounds", "1", "--e2e-reps", "1")


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Three nights in one workdir, the third on hipBLASLt build 7.1 (a redo under one name: the last test)."""
    tmp = tmp_path_factory.mktemp("history")
    untuned = first_gemms(tmp, UNTUNED, 4)
    for run, build in (("night1", ""), ("night2", ""), ("night3", "7.1")):
        run_amd_dag(tmp, run, build, "TuneWorkload", *FAST, untuned=untuned)
    return tmp


def test_every_validate_appends_its_run(nights):
    past = history.load(nights / "w")
    assert list(past.runs["run"]) == ["night1", "night2", "night3"]
    assert len(past.gemms) == 3 * 4 and set(past.gemms.groupby("run").size()) == {4}
    assert past.runs["fingerprint"].nunique() == 2 and "hipblaslt" in past.runs["libraries"].iloc[0]
    for run in past.runs.itertuples():  # the run's row is its GEMMs' figures
        mine = past.gemms[past.gemms["run"] == run.run]
        assert run.kept == int(mine["kept"].sum()) and run.gemms == len(mine)
        summary = json.loads((nights / "w" / run.run / "report" / "summary.json").read_text())
        assert run.weighted_speedup == pytest.approx(summary["weighted_gemm_speedup"])
    kept = past.gemms[past.gemms["kept"]]
    assert (kept["speedup"] == kept["baseline_us"] / kept["tuned_us"]).all() or len(kept) == 0
    assert set(past.gemms["source"]) <= {"default", "hipblaslt"}


def test_the_trend_marks_the_upgrade_with_the_defaults_own_speedup(nights, capsys):
    past = history.load(nights / "w")
    table = history.nights(past)
    assert list(table["upgrade"]) == [False, False, True] and table.loc[2, "common"] == 4
    before = past.gemms[past.gemms["run"] == "night2"].set_index("key")["baseline_us"]
    after = past.gemms[past.gemms["run"] == "night3"].set_index("key")["baseline_us"]
    expected = math.exp((before / after).map(math.log).mean())
    assert table.loc[2, "default_moved"] == pytest.approx(expected)
    assert main(["history", str(nights / "w")]) == 0
    out = capsys.readouterr().out.splitlines()
    (upgrade,) = [i for i, line in enumerate(out) if line.startswith("-- upgrade to ")]
    assert out[upgrade + 1].split()[1] == "night3" and "baseline before over after, 4 GEMMs" in out[upgrade]
    key = past.gemms["key"].iloc[0]
    assert main(["history", str(nights / "w"), "--gemm", key]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]] == ["night1", "night2", "night3"]
    assert main(["history", str(nights / "w"), "--csv"]) == 0
    assert len(pd.read_csv(io.StringIO(capsys.readouterr().out))) == 12


def test_the_report_shows_the_nights_and_what_the_upgrade_moved(nights):
    report = (nights / "w" / "night3" / "report" / "report.md").read_text()
    section = report.split("## Across nights", 1)[1].split("\n## ", 1)[0]
    assert "(trend.svg)" in section and section.count("| night") == 3 and "upgrade: the default x" in section
    assert "GEMMs whose default moved most across the last upgrade" in section
    svg = (nights / "w" / "night3" / "report" / "trend.svg").read_text()
    assert "upgrade" in svg and "weighted GEMM speedup" in svg and 'stroke-dasharray="4 3"' in svg
    html = (nights / "w" / "night3" / "report" / "report.html").read_text()
    assert "<h2>Across nights</h2>" in html


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_killed_append_is_not_read_and_a_bad_history_is_refused_untouched(fmt, tmp_path, capsys, monkeypatch):
    if fmt == "parquet":
        pytest.importorskip("pyarrow", reason="a Parquet history needs pyarrow")
    monkeypatch.setattr(history, "_parquet", lambda: fmt == "parquet")  # a new history takes the format asked
    run = {"run": "a", "fingerprint": "fp1", "libraries": "torch 2.11.0", "workload": "w", "passed": True,
           "gemms": 1, "kept": 1, "weighted_speedup": 1.1, "e2e_speedup": None, "e2e_noise": None}  # fmt: skip
    gemm = {"key": "k", "label": "l", "share": 1.0, "baseline_us": 2.0, "tuned_us": 1.0, "speedup": 2.0,
            "noise": 0.0, "kept": True, "why": "", "source": "hipblaslt"}  # fmt: skip
    history.append(tmp_path, run, [gemm])
    root = tmp_path / history.DIRECTORY
    assert json.loads((root / "meta.json").read_text())["format"] == fmt
    gemms = root / f"gemms.{fmt}"
    torn = pd.read_parquet(gemms) if fmt == "parquet" else pd.read_csv(gemms)
    torn = pd.concat([torn, torn.assign(run="b", written="killed")], ignore_index=True)
    if fmt == "parquet":  # an append killed after the GEMMs, before its run row
        torn.to_parquet(gemms, index=False)
    else:
        torn.to_csv(gemms, index=False)
    assert list(history.load(tmp_path).gemms["run"]) == ["a"]
    now = history.append(tmp_path, {**run, "run": "b"}, [gemm])
    assert list(history.load(tmp_path).gemms["run"]) == ["a", "b"], "the next append of b replaces the torn rows"
    loaded = history.load(tmp_path)  # what append returns is what a later read finds
    assert list(now.runs["written"]) == list(loaded.runs["written"]) and list(now.gemms["run"]) == ["a", "b"]
    assert list(now.gemms["speedup"]) == list(loaded.gemms["speedup"])
    for name, text, why in (
        (f"runs.{fmt}", "not,a\nhistory", "not a gemm-tune history table"),
        ("meta.json", '{"schema": 99, "format": "csv"}', "schema 99, newer than"),
    ):
        good = (root / name).read_bytes()
        (root / name).write_text(text)
        before = {p.name: p.read_bytes() for p in root.iterdir()}
        with pytest.raises(history.HistoryError, match=rf"{name}: .*{why}"):
            history.append(tmp_path, {**run, "run": "c"}, [gemm])
        assert {p.name: p.read_bytes() for p in root.iterdir()} == before, "never rewritten"
        assert main(["history", str(tmp_path)]) == 12
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and name in err[0] and why in err[0]
        (root / name).write_bytes(good)

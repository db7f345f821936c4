"""The workdir's history (stages/validate/history.py): three nights of the CPU DAG on the hipblaslt-bench double,
the third under another hipBLASLt build (another fingerprint), read back by ``gemm-tune history`` and the report;
a run redone under its name replaces its rows; a killed append and a corrupt or newer history."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter

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


@pytest.mark.long  # the three nights are built once, in one process (conftest)
def test_every_validate_appends_its_run(nights, request):
    if hasattr(request.config, "workerinput") and request.config.getvalue("loadgroup"):  # pytest-xdist
        assert request.node.nodeid.endswith("@module-tests.test_history"), "one process builds the nights"
    past = history.load(nights / "w")
    assert [r["run"] for r in past.runs] == ["night1", "night2", "night3"]
    assert len(past.gemms) == 3 * 4 and set(Counter(g["run"] for g in past.gemms).values()) == {4}
    assert len({r["fingerprint"] for r in past.runs}) == 2 and "hipblaslt" in past.runs[0]["libraries"]
    for run in past.runs:  # the run's row is its GEMMs' figures
        mine = [g for g in past.gemms if g["run"] == run["run"]]
        assert run["kept"] == sum(g["kept"] for g in mine) and run["gemms"] == len(mine)
        summary = json.loads((nights / "w" / run["run"] / "report" / "summary.json").read_text())
        assert run["weighted_speedup"] == pytest.approx(summary["weighted_gemm_speedup"])
    kept = [g for g in past.gemms if g["kept"]]
    assert all(g["speedup"] == g["baseline_us"] / g["tuned_us"] for g in kept)
    assert {g["source"] for g in past.gemms} <= {"default", "hipblaslt"}
    assert all(isinstance(g["kept"], bool) and isinstance(g["baseline_us"], float) for g in past.gemms), "typed"


@pytest.mark.long  # the three nights are built once, in one process (conftest)
def test_the_trend_marks_the_upgrade_with_the_defaults_own_speedup(nights, capsys):
    past = history.load(nights / "w")
    table = history.nights(past)
    assert [n["upgrade"] for n in table] == [False, False, True] and table[2]["common"] == 4
    before = {g["key"]: g["baseline_us"] for g in past.gemms if g["run"] == "night2"}
    after = {g["key"]: g["baseline_us"] for g in past.gemms if g["run"] == "night3"}
    expected = math.exp(sum(math.log(before[k] / after[k]) for k in after) / len(after))
    assert table[2]["default_moved"] == pytest.approx(expected)
    assert main(["history", str(nights / "w")]) == 0
    out = capsys.readouterr().out.splitlines()
    (upgrade,) = [i for i, line in enumerate(out) if line.startswith("-- upgrade to ")]
    assert out[upgrade + 1].split()[1] == "night3" and "baseline before over after, 4 GEMMs" in out[upgrade]
    key = past.gemms[0]["key"]
    assert main(["history", str(nights / "w"), "--gemm", key]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]] == ["night1", "night2", "night3"]
    assert main(["history", str(nights / "w"), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 12 and list(rows[0]) == list(history.GEMM_COLUMNS)


@pytest.mark.long  # the three nights are built once, in one process (conftest)
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
    torn = history._read(gemms, fmt, history.GEMM_TYPES)
    torn += [{**row, "run": "b", "written": "killed"} for row in torn]  # killed after the GEMMs, before its run row
    history._write(gemms, torn, history.GEMM_TYPES, fmt)
    assert [g["run"] for g in history.load(tmp_path).gemms] == ["a"]
    now = history.append(tmp_path, {**run, "run": "b"}, [gemm])
    assert [g["run"] for g in history.load(tmp_path).gemms] == ["a", "b"], "the next append of b replaces the torn rows"
    loaded = history.load(tmp_path)  # what append returns is what a later read finds
    assert now == loaded and [g["run"] for g in now.gemms] == ["a", "b"]
    assert [g["speedup"] for g in now.gemms] == [2.0, 2.0] and now.runs[0]["e2e_speedup"] is None
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


def test_a_history_pandas_wrote_reads_back_and_a_bad_value_names_its_line(tmp_path):
    """Histories before gemm-tune wrote its CSV itself came from pandas (``to_csv``: NaN as an empty field, bools
    as True/False, ints of a column with a missing value as floats); they read back typed as before."""
    root = tmp_path / history.DIRECTORY
    root.mkdir()
    (root / "meta.json").write_text('{"schema": 1, "format": "csv"}')
    runs = ",".join(history.RUN_COLUMNS) + "\na,1f,2026-11-01T00:00:00+00:00,,torch 2.11.0,w,True,2.0,1,1.05,,\n"
    (root / "runs.csv").write_text(runs)
    gemm = "a,1f,2026-11-01T00:00:00+00:00,,torch 2.11.0,w,k,l,1.0,2.0,1.0,2.0,0.0,False,,default"
    (root / "gemms.csv").write_text(",".join(history.GEMM_COLUMNS) + "\n" + gemm + "\n")
    past = history.load(tmp_path)
    assert past.runs[0]["gemms"] == 2 and past.runs[0]["passed"] is True and past.runs[0]["e2e_speedup"] is None
    assert past.gemms[0]["kept"] is False and past.gemms[0]["why"] is None and past.gemms[0]["fingerprint"] is None
    (root / "gemms.csv").write_text(",".join(history.GEMM_COLUMNS) + "\n" + gemm.replace(",2.0,1.0,", ",fast,1.0,"))
    with pytest.raises(history.HistoryError, match=r"gemms.csv:2: column baseline_us: 'fast' is not a float"):
        history.load(tmp_path)
